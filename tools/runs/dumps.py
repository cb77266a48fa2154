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
from typing import Any

from rlmedic.tools.runs.curves import Run, make_curve, median_interval, read_file_bytes

from rlmedic.tools.runs.locate import DUMP_SUFFIXES as SUFFIXES  # noqa: E402 - one list of dump suffixes
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


def read_dump(path: Path, step_keys: tuple[str, ...], confinement: Any = None) -> Run:
    """A dump as a :class:`Run`. Rows with the same keys are turned into columns at once (``zip``), so
    the cost is about ``json.loads`` of each line; numbers become float arrays, anything else is skipped."""
    import numpy as np

    data = read_file_bytes(path, confinement)
    text = data.decode("utf-8", "replace")
    is_csv = path.name.lower().endswith(".csv")
    groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    order: dict[tuple[str, ...], list[int]] = {}
    for n, row in enumerate(_csv_rows(text) if is_csv else _jsonl_rows(text), 1):
        keys = tuple(row)
        rows = groups.get(keys)
        if rows is None:
            rows = groups[keys] = []
            order[keys] = []
        rows.append(tuple(row.values()))
        order[keys].append(n)
    pieces: dict[str, tuple[list[Any], list[Any]]] = {}
    walls: list[Any] = []
    for keys, rows in groups.items():
        cols = list(zip(*rows))
        numbered = np.asarray(order[keys], dtype=np.float64)
        steps = numbered
        named = dict(zip(keys, cols))
        for k in step_keys:
            col = _numeric(named.get(k))
            if col is not None:
                steps = np.where(np.isfinite(col), col, numbered)
                break
        for k in _WALL_KEYS:
            col = _numeric(named.get(k))
            if col is not None and np.nanmax(col) > 1e9:
                walls.append(col[np.isfinite(col)])
                break
        for key, col in named.items():
            if key in step_keys or key in _WALL_KEYS or key.startswith("_"):
                continue
            values = _numeric(col)
            if values is None:
                continue
            entry = pieces.setdefault(key, ([], []))
            entry[0].append(steps)
            entry[1].append(values)
    run = Run(path=str(path), source="csv" if is_csv else "jsonl", name=path.stem)
    run.curves = {k: make_curve(k, np.concatenate(s), np.concatenate(v)) for k, (s, v) in pieces.items()}
    all_walls = np.concatenate(walls) if walls else np.zeros(0)
    run.last_wall = float(all_walls.max()) if len(all_walls) else None
    run.step_interval = median_interval(all_walls[-10_000:]) if len(all_walls) else None
    run.files_mtime = os.stat(path).st_mtime
    return run


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


def _jsonl_rows(text: str) -> Any:
    loads = json.loads
    for line in text.splitlines():
        if not line.startswith("{"):
            line = line.strip()
            if not line.startswith("{"):
                continue
        try:
            obj = loads(line)
        except ValueError:
            continue  # a torn last line (the run is still writing) or a stray log line
        if isinstance(obj, dict):  # a nested object shows as a second brace in the line (cheaper than a scan of values)
            yield _flatten(obj) if line.find("{", 1) != -1 else obj


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


def _csv_rows(text: str) -> Any:
    import csv

    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if not header:
        return
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
