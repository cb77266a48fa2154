"""Metric dumps: JSONL (one object per step, as verl's ``file`` logger and most hand-rolled loggers
write) and CSV (a header row, one row per step, as W&B's and TensorBoard's CSV exports).

A dump is told from a JSON-lines *log* by its first lines: objects whose values are mostly
numbers. Each row's step is its step column (``vocabulary.yaml`` step_keys) or its row number.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable

from rlmedic.tools.runs.curves import Run, make_curve, map_file_bytes, median_interval, read_file_bytes
from rlmedic.tools.runs.jsonl_fast import Block, Layout, Scan, find_block, layout_of

from rlmedic.tools.runs.locate import DUMP_SUFFIXES as SUFFIXES  # noqa: E402 - one list of dump suffixes
from rlmedic.tools.runs.locate import TB_EXPORT_NAME  # noqa: E402
_WALL_KEYS = ("_timestamp", "timestamp", "wall_time", "time")


def _numeric_share(obj: Any) -> float:
    if not isinstance(obj, dict) or not obj:
        return 0.0
    return sum(1 for v in obj.values() if isinstance(v, (int, float)) and not isinstance(v, bool)) / len(obj)


def is_dump(path: Path, head: bytes) -> bool:
    """Whether a .jsonl/.csv file is a metric dump (its first lines), not a log."""
    name = path.name.lower()
    if not name.endswith(SUFFIXES):
        return False
    lines = [ln for ln in head.decode("utf-8", "replace").splitlines()[:6] if ln.strip()]
    if not lines:
        return False
    if name.endswith(".csv"):
        cols = lines[0].split(",")
        if len(cols) < 2 or len(lines) < 2:
            return False
        cells = lines[1].split(",")
        nums = 0
        for c in cells:
            try:
                float(c)
                nums += 1
            except ValueError:
                pass
        return nums >= max(2, len(cells) // 2)
    ok = 0
    for ln in lines[:-1] or lines:  # the last line of a head may be cut
        try:
            ok += _numeric_share(json.loads(ln)) >= 0.5
        except ValueError:
            pass
    return ok >= max(1, len(lines[:-1] or lines) * 0.8)


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


#: Rows grouped and turned into columns at a time (their dicts are then dropped: memory stays bounded)
CHUNK_ROWS = 20_000
#: False parses every JSONL line (the tests compare the two reads); True reads blocks of lines that share the
#: first one's layout by numpy (:mod:`~rlmedic.tools.runs.jsonl_fast`)
FAST_JSONL = True


def read_dump(path: Path, step_keys: tuple[str, ...], confinement: Any = None,
              keep: Callable[[str], bool] | None = None) -> Run:
    """A dump as a :class:`Run`. Rows with the same keys are grouped, and the columns ``keep`` accepts
    (the keys the checks may read; None: all) become float arrays, a group's columns in one ``numpy``
    call, :data:`CHUNK_ROWS` rows at a time. JSONL lines are parsed with ``orjson`` where it is installed
    (gradio brings it; ~7x ``json.loads``), a line it refuses (NaN, Infinity: Python's ``json``
    writes them) with ``json``; a chunk of lines that all share the first one's layout is read as one
    group without a parse of each line (:mod:`~rlmedic.tools.runs.jsonl_fast`: the same columns)."""
    import gc

    import numpy as np

    is_csv = path.name.lower().endswith(".csv")
    if is_csv:
        rows: Any = _csv_rows(read_file_bytes(path, confinement).decode("utf-8", "replace"), path)
    else:
        data = map_file_bytes(path, confinement)
        rows = _jsonl_source(data, lambda first, keys: _wanted(first, keys, is_kept, step_keys)) if FAST_JSONL \
            else _jsonl_rows(bytes(data))
    pieces: dict[str, tuple[list[Any], list[Any]]] = {}
    walls: list[Any] = []
    every: set[str] = set()
    kept: dict[str, bool] = {}
    groups: dict[tuple[str, ...], Any] = {}
    order: dict[tuple[str, ...], Any] = {}
    nulls: dict[str, list[Any]] = {}

    def is_kept(k: str) -> bool:
        if k not in kept:
            plain = k not in step_keys and k not in _WALL_KEYS and not k.startswith("_")
            if plain:
                every.add(k)
            kept[k] = plain and (keep is None or keep(k))
        return kept[k]

    def flush() -> None:
        for keys, group in groups.items():
            for k in keys:
                is_kept(k)
            _take(group, keys, order[keys], kept, step_keys, pieces, walls, nulls)
        groups.clear()
        order.clear()

    enabled = gc.isenabled()
    gc.disable()  # the row dicts hold no cycles: the collector's passes over them were a tenth of the read
    try:
        n = 0
        for row in rows:
            if type(row) is Block:  # a whole chunk of rows that share their keys (groups is empty here)
                keys = row.layout.keys
                groups[keys] = row
                order[keys] = np.arange(n + 1, n + row.rows + 1, dtype=np.float64)
                n += row.rows
                flush()
                continue
            n += 1
            keys = tuple(row)
            group = groups.get(keys)
            if group is None:
                group = groups[keys] = []
                order[keys] = []
            group.append(row)
            order[keys].append(n)
            if not n % CHUNK_ROWS:
                flush()
        flush()
    finally:
        if enabled:
            gc.enable()
    for key, parts in nulls.items():
        if key in pieces:
            pieces[key][0].extend(parts)
            pieces[key][1].extend(np.full(len(p), np.nan) for p in parts)
    run = Run(path=str(path), source="csv" if is_csv else "jsonl", name=path.stem)
    run.keys = sorted(every)
    run.curves = {k: make_curve(k, np.concatenate(s), np.concatenate(v)) for k, (s, v) in pieces.items()}
    all_walls = np.concatenate(walls) if walls else np.zeros(0)
    run.last_wall = float(all_walls.max()) if len(all_walls) else None
    run.step_interval = median_interval(all_walls[-10_000:]) if len(all_walls) else None
    run.files_mtime = os.stat(path).st_mtime
    return run


def _take(group: Any, keys: tuple[str, ...], numbers: Any, kept: dict[str, bool],
          step_keys: tuple[str, ...], pieces: dict[str, tuple[list[Any], list[Any]]], walls: list[Any],
          nulls: dict[str, list[Any]]) -> None:
    """One group's (rows sharing their keys: a list of row dicts or a :class:`Block`) kept columns appended
    to ``pieces``, its wall times to ``walls``."""
    import numpy as np

    numbered = np.asarray(numbers, dtype=np.float64)
    steps = numbered
    block = type(group) is Block
    first = group.first if block else group[0]
    step_key, wall_key, names = _wanted(first, keys, kept.__getitem__, step_keys)
    wanted = [k for k in (step_key, wall_key) if k] + names
    if block:
        cols = group.arrays(wanted)
        if cols is None:
            cols = _columns_of({k: group.column(k) for k in wanted}, wanted)
    else:
        cols = _columns(group, wanted)
    if step_key:
        col = cols.pop(step_key)
        if col is not None:
            steps = np.where(np.isfinite(col), col, numbered)
    if wall_key:
        col = cols.pop(wall_key)
        if col is not None and np.nanmax(col) > 1e9:
            walls.append(col[np.isfinite(col)])
    for key, values in cols.items():
        if first[key] is None and (all(v is None for v in group.column(key)) if block else
                                   all(r[key] is None for r in group)):
            nulls.setdefault(key, []).append(steps)  # only nulls here: NaN if the key is a number elsewhere
            continue
        if values is None:
            continue
        entry = pieces.setdefault(key, ([], []))
        entry[0].append(steps)
        entry[1].append(values)


def _wanted(first: dict[str, Any], keys: tuple[str, ...], kept: Callable[[str], bool], step_keys: tuple[str, ...]
            ) -> tuple[str | None, str | None, list[str]]:
    """A group's step column, wall-time column and the kept columns it makes numbers of (by its first row)."""
    step_key = next((k for k in step_keys if _is_number(first.get(k))), None)
    wall_key = next((k for k in _WALL_KEYS if _is_number(first.get(k))), None)
    return step_key, wall_key, [k for k in keys if kept(k) and (_is_number(first[k]) or first[k] is None)]


def _columns_of(lists: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """:func:`_columns` of columns already parsed (a :class:`Block`'s): the same arrays, the same None."""
    import numpy as np

    if not names:
        return {}
    try:
        out = {k: np.asarray(lists[k], dtype=np.float64) for k in names}
        if all(v.ndim == 1 for v in out.values()):  # every cell a number (or null, a boolean): one matrix did it
            return out
    except (TypeError, ValueError):
        pass
    return {k: _numeric(lists[k]) for k in names}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _columns(rows: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """The named columns of rows that share their keys as float arrays (None for a column holding text):
    all at once when every cell is a number or null, else column by column."""
    import numpy as np
    from operator import itemgetter

    if not names:
        return {}
    try:
        mat = np.array(list(map(itemgetter(*names), rows)), dtype=np.float64).reshape(len(rows), len(names))
        return {k: mat[:, i].copy() for i, k in enumerate(names)}
    except (TypeError, ValueError):
        pass
    return {k: _numeric([r[k] for r in rows]) for k in names}


def _numeric(col: Any) -> Any:
    """A column of JSON numbers (None as NaN) as a float array; None for text, booleans or a missing column."""
    import numpy as np

    if col is None:
        return None
    first = next((v for v in col if v is not None), None)
    if first is None or isinstance(first, bool) or not isinstance(first, (int, float)):
        return None
    try:
        return np.asarray(col, dtype=np.float64)
    except (TypeError, ValueError):
        return None


def _fast_loads() -> Callable[[bytes], Any]:
    try:
        from orjson import loads
    except ImportError:
        return json.loads
    return loads  # type: ignore[no-any-return]


def _jsonl_source(data: Any, wanted: Callable[[dict[str, Any], tuple[str, ...]], tuple[Any, Any, list[str]]]
                  ) -> Any:
    """The rows of a JSONL dump's bytes, as :func:`_jsonl_rows` yields them, but a chunk of
    :data:`CHUNK_ROWS` lines that share their first line's layout as one :class:`Block` (where rows
    are counted in whole chunks: the line-by-line read would make that chunk one group), its columns
    ``wanted`` names (:func:`_wanted` of its first row) parsed."""
    if data.find(b"\r") != -1:  # bytes.splitlines() cuts lines at a lone \r too: only the line parse does that
        yield from _jsonl_rows(bytes(data))
        return
    fast, loads = _fast_loads(), json.loads
    scan = Scan(data)
    count, i, total = 0, 0, len(scan)
    while i < total:
        if not count % CHUNK_ROWS:
            block = _block_at(scan, data, i, min(CHUNK_ROWS, total - i), wanted, fast, loads)
            if block is not None:
                yield block
                count += block.rows
                i += block.rows
                continue
        for row in _jsonl_rows_of([scan.line(data, i)], fast, loads):
            yield row
            count += 1
        i += 1


def _block_at(scan: Scan, data: Any, i: int, rows: int, wanted: Callable[..., Any], fast: Callable[[bytes], Any],
              loads: Callable[[Any], Any]) -> Block | None:
    """Lines ``i`` .. ``i + rows`` as one :class:`Block` with its wanted columns parsed, or None (then the lines
    are parsed one by one); the last chunk of a file whose last line is torn leaves that line out."""
    line = scan.line(data, i)
    try:
        first = fast(line)
    except ValueError:
        try:
            first = loads(line)
        except ValueError:
            return None
    layout = layout_of(line, first)
    if layout is None:
        return None
    step_key, wall_key, names = wanted(first, layout.keys)
    block = find_block(scan, data, i, rows, layout)
    if block is None and i + rows == len(scan) and rows > 1:  # a torn last line (the run is still writing)
        block = find_block(scan, data, i, rows - 1, layout)
    if block is None or not block.parse([k for k in (step_key, wall_key) if k] + names):
        return None
    return block


def _jsonl_rows(data: bytes) -> Any:
    yield from _jsonl_rows_of(data.splitlines(), _fast_loads(), json.loads)


def _jsonl_rows_of(lines: Any, fast: Callable[[bytes], Any], loads: Callable[[Any], Any]) -> Any:
    for line in lines:
        if not line.startswith(b"{"):
            line = line.strip()
            if not line.startswith(b"{"):
                continue
        try:
            obj = fast(line)
        except ValueError:
            try:
                obj = loads(line)  # NaN / Infinity, which orjson refuses
            except ValueError:
                continue  # a torn last line (the run is still writing) or a stray log line
        if isinstance(obj, dict):  # a nested object shows as a second brace in the line (cheaper than a scan of values)
            yield _flatten(obj) if line.find(b"{", 1) != -1 else obj


#: W&B's "Export CSV" of a chart: ``Step``, ``<run name> - <key>``, ``<run name> - <key>__MIN`` / ``__MAX``
_WANDB_EXPORT = re.compile(r"^.+? - (.+?)(__MIN|__MAX)?$")


def _export_column(name: str) -> str:
    """A CSV column as its metric key: W&B's export prefixes the run's name and adds min/max columns
    (left out: a key starting with ``_`` is not a curve)."""
    if name == "Step":
        return "step"
    m = _WANDB_EXPORT.match(name)
    if m is None:
        return name
    return f"_{m.group(1)}{m.group(2)}" if m.group(2) else m.group(1)


#: The CSV TensorBoard's scalars dashboard downloads, one tag per file: ``run-<run>-tag-<tag>.csv``
#: (the tag's ``/`` written ``_``), columns ``Wall time,Step,Value``
TB_EXPORT_HEADER = ["Wall time", "Step", "Value"]


def tb_export_tag(path: Path) -> tuple[str, str]:
    """(run, tag) of a TensorBoard CSV download's file name; the tag still has ``_`` for ``/``
    (:meth:`~rlmedic.tools.runs.vocabulary.Vocabulary.export_key` restores it)."""
    m = TB_EXPORT_NAME.match(path.name)
    return (m.group(1), m.group(2)) if m else ("", path.stem)


def export_files(folder: Path) -> list[Path]:
    """The TensorBoard CSV downloads directly in ``folder`` (by their names)."""
    try:
        return sorted(p for p in folder.iterdir() if TB_EXPORT_NAME.match(p.name) and p.is_file())
    except OSError:
        return []


def read_tb_exports(folder: Path, step_keys: tuple[str, ...], confinement: Any = None,
                    select: Callable[[list[str]], set[str]] | None = None) -> Run:
    """A folder of one run's TensorBoard CSV downloads (one file per tag) as one :class:`Run`."""
    from rlmedic.errors import UserError

    files = export_files(folder)
    runs = {tb_export_tag(f)[0] for f in files}
    if len(runs) > 1:
        raise UserError(f"{folder}: TensorBoard CSV downloads of {len(runs)} runs ({', '.join(sorted(runs)[:3])}...) "
                        "in one folder; put each run's files in a folder of its own")
    run = Run(path=str(folder), source="tensorboard-csv", name=next(iter(runs), "") or folder.name)
    walls, mtimes = [], []
    for f in files:
        one = read_dump(f, step_keys, confinement)
        run.curves.update(one.curves)
        run.keys += one.keys
        walls += [w for w in (one.last_wall,) if w is not None]
        mtimes.append(one.files_mtime or 0.0)
        run.step_interval = run.step_interval or one.step_interval
    run.last_wall = max(walls) if walls else None
    run.files_mtime = max(mtimes) if mtimes else None
    return run


def _csv_rows(text: str, path: Path) -> Any:
    import csv

    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if not header:
        return
    if [h.lstrip("\ufeff").strip() for h in header] == TB_EXPORT_HEADER:
        header = ["wall_time", "step", tb_export_tag(path)[1]]
    else:
        header = [_export_column(h) for h in header]
    for cells in reader:
        row: dict[str, Any] = {}
        for key, cell in zip(header, cells):
            if cell == "":
                continue
            try:
                row[key] = float(cell)
            except ValueError:
                continue
        yield row
