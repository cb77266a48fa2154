"""TensorBoard log folders: scalar curves from ``events.out.tfevents.*`` files.

An event file is a sequence of framed records (length, CRC, a serialised ``Event``, CRC). The
scalars PyTorch's and tensorboardX's ``SummaryWriter`` write (``simple_value``: what verl's,
slime's and AReaL's TensorBoard loggers produce) are read straight off the bytes with one
compiled pattern that matches a whole record (frame and fields), and each match is checked
against its frame's length: ~30x faster than parsing a protobuf per record, which a run of
100,000 steps x 50 metrics (5 million records) needs. A file holding other records (tensor
summaries from ``tf.summary``) is read record by record with tensorboard's own protobuf
classes, from the optional extra ``rlmedic[tensorboard]``.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError
from rlmedic.tools.runs.curves import Run, make_curve, median_interval, read_file_bytes

EVENT_GLOB = "events.out.tfevents."
#: one scalar record: frame length (< 256), CRC, Event{wall_time, [step], summary{value{tag, simple_value}}}, CRC
_SCALAR = re.compile(
    rb"(.)\x00{7}.{4}\x09(.{8})(?:\x10([\x80-\xff]{0,9}[\x00-\x7f]))?\x2a(.)\x0a(.)\x0a(.)([^\x00-\x1f\x7f]*?)\x15(.{4}).{4}",
    re.DOTALL,
)
_EXTRA = "tensorboard"


def is_logdir(path: Path) -> bool:
    """Whether ``path`` is (or directly holds) TensorBoard event files."""
    if path.is_file():
        return path.name.startswith(EVENT_GLOB)
    try:
        return any(p.name.startswith(EVENT_GLOB) for p in path.iterdir())
    except OSError:
        return False


def event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted((p for p in path.iterdir() if p.name.startswith(EVENT_GLOB) and p.is_file()), key=lambda p: p.name)


def _varint(b: bytes) -> int:
    n, shift = 0, 0
    for byte in b:
        n |= (byte & 0x7F) << shift
        shift += 7
    return n


def _fast(data: bytes) -> tuple[dict[str, tuple[list[int], list[float]]], list[float], int]:
    """Scalars of the simple_value records; the bytes those records covered (to judge completeness)."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    walls: dict[int, float] = {}
    covered = 0
    steps_of: dict[bytes, int] = {b"": 0}
    unpack_f = struct.Struct("<f").unpack
    unpack_d = struct.Struct("<d").unpack
    for length, wall, step_b, slen, vlen, tlen, tag, val in _SCALAR.findall(data):
        n = len(tag)
        if tlen[0] != n or vlen[0] != n + 7 or slen[0] != n + 9:
            continue
        if length[0] != 9 + (len(step_b) + 1 if step_b else 0) + 2 + slen[0]:
            continue
        covered += length[0] + 16
        step = steps_of.get(step_b)
        if step is None:
            step = steps_of[step_b] = _varint(step_b)
        entry = series.get(tag)  # type: ignore[call-overload]
        if entry is None:
            entry = series[tag] = ([], [])  # type: ignore[index]
        entry[0].append(step)
        entry[1].append(unpack_f(val)[0])
        if step not in walls:
            walls[step] = unpack_d(wall)[0]
    return {k.decode("utf-8", "replace"): v for k, v in series.items()}, list(walls.values()), covered  # type: ignore[union-attr]


def _slow(data: bytes) -> tuple[dict[str, tuple[list[int], list[float]]], list[float]]:
    """Every record through tensorboard's protobuf classes (tensor summaries as well)."""
    try:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.util import tensor_util
    except ImportError:
        raise UserError("reading these TensorBoard event files needs the tensorboard extra: pip install 'rlmedic[tensorboard]'") from None
    series: dict[str, tuple[list[int], list[float]]] = {}
    walls: dict[int, float] = {}
    pos, size = 0, len(data)
    while pos + 12 <= size:
        (length,) = struct.unpack_from("<Q", data, pos)
        start = pos + 12
        if start + length + 4 > size:
            break  # a record still being written
        event = event_pb2.Event.FromString(data[start:start + length])
        pos = start + length + 4
        if not event.HasField("summary"):
            continue
        for v in event.summary.value:
            if v.HasField("simple_value"):
                value = float(v.simple_value)
            elif v.HasField("tensor") and v.metadata.plugin_data.plugin_name in ("scalars", ""):
                arr = tensor_util.make_ndarray(v.tensor)
                if arr.size != 1:
                    continue
                value = float(arr.reshape(-1)[0])
            else:
                continue
            entry = series.setdefault(v.tag, ([], []))
            entry[0].append(int(event.step))
            entry[1].append(value)
            walls.setdefault(int(event.step), float(event.wall_time))
    return series, list(walls.values())


def read_file(data: bytes) -> tuple[dict[str, tuple[list[int], list[float]]], list[float]]:
    series, walls, covered = _fast(data)
    # the file-version record and a few headers are not scalars; anything beyond that is read properly
    if covered >= len(data) * 0.9 or (series and len(data) - covered < 4096):
        return series, walls
    return _slow(data)


def read_logdir(path: Path, confinement: Any = None) -> Run:
    """A TensorBoard log folder (or one event file) as a :class:`Run`; several files are merged by step."""
    files = event_files(path)
    if not files:
        raise UserError(f"{path}: no TensorBoard event files")
    merged: dict[str, tuple[list[int], list[float]]] = {}
    walls: list[float] = []
    mtime = 0.0
    for f in files:
        data = read_file_bytes(f, confinement)
        mtime = max(mtime, os.stat(f).st_mtime)
        series, w = read_file(data)
        walls += w
        for key, (steps, values) in series.items():
            entry = merged.setdefault(key, ([], []))
            entry[0].extend(steps)
            entry[1].extend(values)
    run = Run(path=str(path), source="tensorboard", name=path.name if path.is_dir() else path.parent.name)
    run.curves = {k: make_curve(k, s, v) for k, (s, v) in merged.items() if s}
    run.last_wall = max(walls) if walls else None
    run.step_interval = median_interval(walls)
    run.files_mtime = mtime or None
    return run
