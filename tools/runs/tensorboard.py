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
from typing import Any, Callable

from rlmedic.errors import UserError
from rlmedic.tools.runs.curves import Run, make_curve, median_interval, read_file_bytes
from rlmedic.tools.runs.locate import EVENT_GLOB, event_files, is_logdir  # noqa: F401 - re-exported

#: one scalar record: frame length (< 256), CRC, Event{wall_time, [step], summary{value{tag, simple_value}}}, CRC
_SCALAR = re.compile(
    rb"(.)\x00{7}.{4}\x09(.{8})(?:\x10([\x80-\xff]{0,9}[\x00-\x7f]))?\x2a(.)\x0a(.)\x0a(.)([^\x00-\x1f\x7f]*?)\x15(.{4}).{4}",
    re.DOTALL,
)
_EXTRA = "tensorboard"


def _varint(b: bytes) -> int:
    n, shift = 0, 0
    for byte in b:
        n |= (byte & 0x7F) << shift
        shift += 7
    return n


#: Records walked one by one before looking for a repeating layout (a step's block of scalars)
WALK = 1024
MAX_PERIOD = 512
ROWS_PER_CHUNK = 4096


def _record(data: bytes, pos: int) -> tuple[int, Any]:
    """The record at ``pos``: (next position, its scalar layout or None), or (-1, None) at a torn end."""
    if pos + 12 > len(data):
        return -1, None
    (length,) = struct.unpack_from("<Q", data, pos)
    nxt = pos + 12 + length + 4
    if nxt > len(data):
        return -1, None
    m = _SCALAR.match(data, pos)
    if m is None or m.end() != nxt:
        return nxt, None
    _length, _wall, step_b, slen, vlen, tlen, tag, _val = m.groups()
    n = len(tag)
    if tlen[0] != n or vlen[0] != n + 7 or slen[0] != n + 9:
        return nxt, None
    # offsets inside the record: wall time, step varint (start, length), value
    layout = (nxt - pos, 13, (m.start(3) - pos, len(step_b)) if step_b else (0, 0), m.start(8) - pos, tag)
    return nxt, layout


def _decode(data: bytes, pos: int, layout: Any) -> tuple[bytes, int, float, float]:
    _total, wall_off, (s_off, s_len), v_off, tag = layout
    step = _varint(data[pos + s_off:pos + s_off + s_len]) if s_len else 0
    return tag, step, struct.unpack_from("<d", data, pos + wall_off)[0], struct.unpack_from("<f", data, pos + v_off)[0]


def _fast(data: bytes, keep: Callable[[bytes], bool] | None = None
          ) -> tuple[dict[str, tuple[Any, Any]], list[float], int, set[bytes]]:
    """Scalars of the simple_value records; the bytes those records covered (to judge completeness);
    the tags ``keep`` refused (seen, their values not parsed: no check reads them).

    Records are walked one by one until their layouts repeat (a writer logs the same tags every
    step, so a step's block of records has the same bytes but for wall times, steps, values and
    CRCs); the rest of that stretch is then read as rows of a numpy array, every row checked
    byte for byte against the first in all other positions, and the walk resumes where a row
    differs (the step grew a byte, a tag was added).
    """
    import numpy as np

    arr = np.frombuffer(data, dtype=np.uint8)
    size = len(data)
    chunks: dict[bytes, list[tuple[Any, Any]]] = {}
    single: dict[bytes, tuple[list[int], list[float]]] = {}
    walls: list[Any] = []
    single_walls: dict[int, float] = {}  # the first wall time of each step: the time between steps
    covered = 0
    seen: set[bytes] = set()
    pos = 0
    while 0 <= pos < size:
        walked: list[tuple[int, Any]] = []
        while len(walked) < WALK and 0 <= pos < size:
            nxt, layout = _record(data, pos)
            if nxt < 0:
                pos = -1
                break
            walked.append((pos, layout))
            pos = nxt
        period = _period([lay for _p, lay in walked])
        head = len(walked) - period if period else len(walked)
        for p, lay in walked[:head]:
            if lay is not None:
                tag, step, wall, value = _decode(data, p, lay)
                entry = single.setdefault(tag, ([], []))
                entry[0].append(step)
                entry[1].append(value)
                single_walls.setdefault(step, wall)
                covered += lay[0]
        if not period:
            continue
        row0 = walked[head][0]
        layouts = [lay for _p, lay in walked[head:]]
        width = sum(lay[0] for lay in layouts)
        varying = np.zeros(width, dtype=bool)
        offsets = []
        off = 0
        for lay in layouts:
            total, wall_off, (s_off, s_len), v_off, _tag = lay
            varying[off + 8:off + 12] = True  # header CRC
            varying[off + wall_off:off + wall_off + 8] = True
            if s_len:
                varying[off + s_off:off + s_off + s_len] = True
            varying[off + v_off:off + v_off + 4] = True
            varying[off + total - 4:off + total] = True  # data CRC
            offsets.append(off)
            off += total
        # a row matches the first where it is not masked out: (row ^ first) & mask is all zeros
        mask = np.where(varying, 0, 0xFF).astype(np.uint8)
        first = arr[row0:row0 + width].copy()
        rows = (size - row0) // width
        good = 0
        buf = np.empty((min(ROWS_PER_CHUNK, rows), width), dtype=np.uint8)
        while good < rows:
            n = min(ROWS_PER_CHUNK, rows - good)
            block = arr[row0 + good * width:row0 + (good + n) * width].reshape(n, width)
            tmp = buf[:n]
            np.bitwise_xor(block, first, out=tmp)
            np.bitwise_and(tmp, mask, out=tmp)
            bad = np.flatnonzero(tmp.any(axis=1))
            good += int(bad[0]) if len(bad) else n
            if len(bad):
                break
        view = arr[row0:row0 + good * width].reshape(good, width)
        for off, lay in zip(offsets, layouts):
            _total, wall_off, (s_off, s_len), v_off, tag = lay
            covered += lay[0] * good
            if keep is not None and not keep(tag):
                seen.add(tag)  # listed, not parsed: no check reads it
                continue
            values = view[:, off + v_off:off + v_off + 4].copy().view("<f4").reshape(-1).astype(np.float64)
            if s_len:
                sb = view[:, off + s_off:off + s_off + s_len].astype(np.int64)
                steps = np.zeros(good, dtype=np.int64)
                for i in range(s_len):
                    steps |= (sb[:, i] & 0x7F) << (7 * i)
            else:
                steps = np.zeros(good, dtype=np.int64)
            chunks.setdefault(tag, []).append((steps, values))
        walls.append(view[:, 13:21].copy().view("<f8").reshape(-1))
        pos = row0 + good * width
    out: dict[str, tuple[Any, Any]] = {}
    for tag in {*chunks, *single}:
        parts = chunks.get(tag, [])
        s_list = [np.asarray(single[tag][0], dtype=np.int64)] if tag in single else []
        v_list = [np.asarray(single[tag][1], dtype=np.float64)] if tag in single else []
        out[tag.decode("utf-8", "replace")] = (np.concatenate(s_list + [p[0] for p in parts]),
                                               np.concatenate(v_list + [p[1] for p in parts]))
    flat = [np.asarray(list(single_walls.values()), dtype=np.float64), *walls]
    return out, np.concatenate(flat).tolist()[-10_000:], covered, seen


def _period(layouts: list[Any]) -> int:
    """The smallest number of records after which the walked layouts repeat (0: none, or not scalars)."""
    n = len(layouts)
    if n < 4 or any(lay is None for lay in layouts[n // 2:]):
        return 0
    for p in range(1, min(MAX_PERIOD, n // 2) + 1):
        if all(layouts[j] == layouts[j - p] for j in range(n - p, n)):
            return p
    return 0


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


def read_file(data: bytes, keep: Callable[[str], bool] | None = None
              ) -> tuple[dict[str, tuple[Any, Any]], list[float], list[str]]:
    """``(tag -> (steps, values), wall times, tags seen but not parsed)``; ``keep`` picks the tags to parse."""
    fast_keep = None if keep is None else (lambda tag: keep(tag.decode("utf-8", "replace")))
    series, walls, covered, skipped = _fast(data, fast_keep)
    # the file-version record and a few headers are not scalars; anything beyond that is read properly
    if covered >= len(data) * 0.9 or ((series or skipped) and len(data) - covered < 4096):
        return series, walls, sorted(t.decode("utf-8", "replace") for t in skipped)
    slow, walls = _slow(data)
    return slow, walls, []


def read_logdir(path: Path, confinement: Any = None, keep: Callable[[str], bool] | None = None) -> Run:
    """A TensorBoard log folder (or one event file) as a :class:`Run`; several files are merged by step."""
    files = event_files(path)
    if not files:
        raise UserError(f"{path}: no TensorBoard event files")
    merged: dict[str, tuple[list[int], list[float]]] = {}
    walls: list[float] = []
    keys: set[str] = set()
    mtime = 0.0
    for f in files:
        data = read_file_bytes(f, confinement)
        mtime = max(mtime, os.stat(f).st_mtime)
        series, w, skipped = read_file(data, keep)
        walls += w
        keys.update(skipped)
        keys.update(series)
        for key, (steps, values) in series.items():
            entry = merged.setdefault(key, ([], []))
            entry[0].append(steps)
            entry[1].append(values)
    run = Run(path=str(path), source="tensorboard", name=path.name if path.is_dir() else path.parent.name)
    import numpy as np

    run.curves = {k: make_curve(k, np.concatenate([np.asarray(x, dtype=np.float64) for x in s]),
                                np.concatenate([np.asarray(x, dtype=np.float64) for x in v]))
                  for k, (s, v) in merged.items() if sum(len(x) for x in s)}
    run.keys = sorted(keys)
    run.last_wall = max(walls) if walls else None
    run.step_interval = median_interval(walls)
    run.files_mtime = mtime or None
    return run
