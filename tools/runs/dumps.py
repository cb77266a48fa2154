"""Metric dumps: JSONL (one object per step, as verl's ``file`` logger and most hand-rolled loggers
write) and CSV (a header row, one row per step, as W&B's and TensorBoard's CSV exports).

A dump is told from a JSON-lines *log* by its first lines: objects whose values are mostly
numbers. Each row's step is its step column (``vocabulary.yaml`` step_keys) or its row number.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rlmedic.tools.runs.curves import Run, make_curve, median_interval, read_file_bytes

SUFFIXES = (".jsonl", ".csv", ".ndjson")
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
    data = read_file_bytes(path, confinement)
    text = data.decode("utf-8", "replace")
    series: dict[str, tuple[list[int], list[float]]] = {}
    walls: list[float] = []
    rows = _csv_rows(text) if path.name.lower().endswith(".csv") else _jsonl_rows(text)
    for n, row in enumerate(rows, 1):
        step = n
        for k in step_keys:
            v = row.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                step = int(v)
                break
        for k in _WALL_KEYS:
            v = row.get(k)
            if isinstance(v, (int, float)) and v > 1e9:
                walls.append(float(v))
                break
        for key, v in row.items():
            if key in step_keys or key in _WALL_KEYS or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            entry = series.get(key)
            if entry is None:
                entry = series[key] = ([], [])
            entry[0].append(step)
            entry[1].append(v)
    run = Run(path=str(path), source="csv" if path.name.lower().endswith(".csv") else "jsonl", name=path.stem)
    run.curves = {k: make_curve(k, s, v) for k, (s, v) in series.items() if s}
    run.last_wall = max(walls) if walls else None
    run.step_interval = median_interval(walls)
    run.files_mtime = os.stat(path).st_mtime
    return run


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
        if isinstance(obj, dict):
            yield _flatten(obj) if any(isinstance(v, dict) for v in obj.values()) else obj


def _csv_rows(text: str) -> Any:
    import csv

    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if not header:
        return
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
