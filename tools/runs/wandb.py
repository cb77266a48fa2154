"""W&B run folders: curves, config and exit status from the ``.wandb`` transaction log.

``wandb/run-*`` and ``wandb/offline-run-*`` folders hold ``run-<id>.wandb``: every record the
run sent (history rows, config, console output, the exit record), written before anything is
uploaded, so it is there for offline runs and for runs whose machine died. It is a
LevelDB-style log (a 7-byte ``:W&B`` header, 32 KiB blocks of CRC-checked chunks) of
``wandb.proto`` ``Record`` messages. wandb 0.2x moved its reader into the Go service, so the
framing is read here (a few lines) and every record is parsed with wandb's own protobuf classes
from the optional extra ``rlmedic[wandb]``. The ``files/`` folder adds ``config.yaml`` and
``output.log`` (diagnosed as a log beside the curves).

A run with no exit record did not finish (or is still going): W&B then shows it "running"
forever, the case of a preempted spot instance.
"""

from __future__ import annotations

import math
import os
import re
import struct
import zlib
from pathlib import Path
from typing import Any, Callable

from rlmedic.errors import UserError
from rlmedic.tools.runs.curves import Run, make_curve, map_file_bytes, median_interval
from rlmedic.tools.runs.locate import RUN_DIR, is_run_dir, is_wandb_root, runs_in  # noqa: F401 - re-exported

HEADER = b":W&B"
HEADER_LEN = 7
BLOCK = 32 * 1024
CHUNK_HEADER = 7  # crc32 (4) + length (2) + type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
#: Console lines kept from the transaction log when the folder has no output.log
MAX_OUTPUT_LINES = 4000
_INTERNAL = ("_runtime", "_timestamp", "_step", "_wandb")


_PB: list[Any] = []
_PROTO_FILES = ("wandb_base_pb2", "wandb_telemetry_pb2", "wandb_internal_pb2")


def _pb() -> Any:
    """wandb's ``wandb_internal_pb2`` (the ``Record`` message); one line naming the extra when wandb is absent."""
    if _PB:
        return _PB[0]
    import importlib.util
    import sys

    if "wandb" not in sys.modules and importlib.util.find_spec("wandb") is not None:
        try:
            _PB.append(_load_protos_only())
            return _PB[0]
        except Exception:  # noqa: BLE001 - an unexpected wandb layout: the ordinary import below
            pass
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError:
        raise UserError("reading W&B runs needs the wandb extra: pip install 'rlmedic[wandb]'") from None
    _PB.append(wandb_internal_pb2)
    return wandb_internal_pb2


def _load_protos_only() -> Any:
    """wandb's generated protobuf modules without ``import wandb`` (1.9 s of SDK start-up, 10x the read).

    They only need google.protobuf and each other; for the time they load, ``wandb`` and
    ``wandb.proto`` are bare namespace modules over the installed package's folders, removed again
    afterwards, so a later ``import wandb`` runs normally (protobuf hands it the same classes)."""
    import importlib.util
    import sys
    import types

    import google.protobuf

    spec = importlib.util.find_spec("wandb")
    base = Path(spec.submodule_search_locations[0])  # type: ignore[union-attr,index]
    folder = base / "proto" / f"v{google.protobuf.__version__.split('.')[0]}"
    pkg = types.ModuleType("wandb")
    pkg.__path__ = [str(base)]
    proto = types.ModuleType("wandb.proto")
    proto.__path__ = [str(base / "proto")]
    added = {"wandb": pkg, "wandb.proto": proto}
    sys.modules.update(added)
    loaded: dict[str, Any] = {}
    try:
        for name in _PROTO_FILES:
            full = f"wandb.proto.{name}"
            mspec = importlib.util.spec_from_file_location(full, folder / f"{name}.py")
            module = importlib.util.module_from_spec(mspec)  # type: ignore[arg-type]
            sys.modules[full] = module
            added[full] = module
            setattr(proto, name, module)
            mspec.loader.exec_module(module)  # type: ignore[union-attr]
            loaded[name] = module
    finally:
        for name, module in added.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return loaded["wandb_internal_pb2"]


#: the CRC of each chunk type byte, which every chunk's CRC starts from
_KIND_CRC = [zlib.crc32(bytes((k,))) for k in range(256)]


def _crc32_function() -> Callable[..., int]:
    """zlib's CRC-32 as ISA-L computes it (``isal``, a dependency for gzip logs: the same numbers, ~3.5x
    zlib's speed over a 400 MB log), zlib's own where isal is absent."""
    try:
        from isal.isal_zlib import crc32
    except ImportError:
        return zlib.crc32
    return crc32  # type: ignore[no-any-return]


#: the CRC-32 every chunk is checked with (tests set zlib's)
_crc32 = _crc32_function()


def records(data: bytes) -> list[Any]:
    """The record payloads of a transaction log, in order (a torn last chunk is dropped: the run may still
    be writing): a whole record in one chunk as a ``memoryview`` of ``data`` (no copy of a 400 MB log), one
    spread over chunks as joined ``bytes``."""
    return _split(data, -1, -1)[1]


def _split(data: bytes, history: int = 0x12, skip: int = 0x1A,
           fast: Callable[[Any], Any] | None = None) -> tuple[Any, list[Any]]:
    """The framing walk: ``(history records, every other record)`` of a transaction log, in order, records
    whose type (the field after their number) is ``skip`` left out, history records ``fast`` refuses with
    the others. The 32 KiB blocks are walked side by side by numpy (:func:`_chunks`); a log whose chunks
    do not keep to their blocks is walked chunk by chunk (:func:`_split_walk`, the same answer)."""
    if not data[:len(HEADER)] == HEADER:
        raise UserError("not a W&B transaction log (no :W&B header)")
    found = _chunks(data) if BLOCK_WALK else None
    if found is None:
        return _split_walk(data, history, skip, fast)
    starts, lengths, kinds = found
    return _sort_records(data, starts, lengths, kinds, history, skip, fast)


def _sort_records(data: bytes, starts: Any, lengths: Any, kinds: Any, history: int, skip: int,
                  fast: Callable[[Any], Any] | None) -> tuple[Any, list[Any]]:
    """The records of the chunks :func:`_chunks` found, sorted as :func:`_split_walk` sorts them: each
    record's type read by numpy (a record number of 1-3 varint bytes) off its first chunk, the rest in
    Python. A record spread over chunks (``FIRST MIDDLE* LAST``: one crosses the end of each 32 KiB
    block) is grouped by numpy too and joined only when it is kept (not the summaries, half the log)."""
    import numpy as np

    view = memoryview(data)
    a = np.frombuffer(data, dtype=np.uint8)
    whole = kinds == FULL
    # records spread over chunks, as the walk's pending list groups them: a LAST closes the chunks since
    # the later of the last FIRST and the chunk after the previous LAST (a FIRST never closed is dropped)
    spread = np.flatnonzero(~whole & (kinds >= FIRST) & (kinds <= LAST))
    sk = kinds[spread]
    at_j = np.arange(len(spread))
    is_last = sk == LAST
    ends = np.flatnonzero(is_last)
    last_upto = np.maximum.accumulate(np.where(is_last, at_j, -1)) if len(spread) else at_j
    first_upto = np.maximum.accumulate(np.where(sk == FIRST, at_j, -1)) if len(spread) else at_j
    prev_last = np.concatenate([[-1], last_upto[:-1]])[ends] if len(ends) else ends
    group = np.maximum(first_upto[ends], prev_last + 1)  # each spread record's first chunk (in ``spread``)
    first_chunk, last_chunk = spread[group], spread[ends]
    total = np.zeros(len(ends), dtype=np.int64)
    if len(ends):
        cum = np.concatenate([[0], np.cumsum(lengths[spread])])
        total = cum[ends + 1] - cum[group]
    sp_s = starts[spread].tolist()
    sp_e = (starts[spread] + lengths[spread]).tolist()
    g_list, e_list = group.tolist(), ends.tolist()

    def joined(k: int) -> bytes:
        """Spread record ``k``'s payload: its chunks joined."""
        return b"".join([view[x:y] for x, y in zip(sp_s[g_list[k]:e_list[k] + 1], sp_e[g_list[k]:e_list[k] + 1])])

    # every record's type, read off its first chunk: whole chunks first, then the spread records
    s = np.concatenate([starts[whole], starts[first_chunk]])
    ln = np.concatenate([lengths[whole], total])
    room = np.concatenate([lengths[whole], lengths[first_chunk]])  # the bytes the first chunk holds
    n_whole = int(whole.sum())

    # each record's first 8 bytes as one word (one read of the log a record, not five): the last few
    # records' words are read where they fit and shifted down, past the log's end zeros
    w8 = np.ndarray(shape=(len(a) - 7,), dtype="<u8", buffer=a, strides=(1,))
    fit = np.minimum(s, len(a) - 8)
    w = w8[fit] >> ((s - fit) * 8).astype(np.uint64)
    b0, b1, b2, b3, b4 = (((w >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.int64) for k in range(5))
    field = np.where(b1 < 0x80, b2, np.where(b2 < 0x80, b3, b4))
    plain = (ln > 5) & (room >= 5) & (b0 == 0x08) & ((b1 < 0x80) | (b2 < 0x80) | (b3 < 0x80))
    for i in np.flatnonzero(~plain).tolist():  # a short record, no number first, or a long one
        field[i] = _record_field(view[int(s[i]):int(s[i] + ln[i])] if i < n_whole else joined(i - n_whole))
    # records in order: whole chunks, and spread ones at their LAST chunk's place
    place = np.concatenate([s[:n_whole], starts[last_chunk]])
    order = np.argsort(place, kind="stable")
    order = order[field[order] != skip]
    place, kind_of, size_of = place[order], field[order], ln[order]

    def payloads(sel: Any) -> list[Any]:
        """Views of the whole-chunk records, the joined bytes of the others (one ``map`` for the first)."""
        p = place[sel]
        out = list(map(view.__getitem__, map(slice, p.tolist(), (p + size_of[sel]).tolist())))
        rank = order[sel]
        for i in np.flatnonzero(rank >= n_whole).tolist():
            out[i] = joined(int(rank[i]) - n_whole)
        return out

    is_hist = kind_of == history
    if fast is None:  # every history record to the bulk reader: as places, viewed when its batch is joined
        sel = np.flatnonzero(is_hist)
        p, rank = place[sel], order[sel]
        spread_at = np.flatnonzero(rank >= n_whole)
        hist: Any = _Records(view, p, p + size_of[sel], spread_at,
                             [joined(r - n_whole) for r in rank[spread_at].tolist()])
        return hist, payloads(~is_hist)
    hist = payloads(is_hist)
    if fast is not None:
        verdict = list(map(fast, hist))
        if any(v is None for v in verdict):  # refused: read with the others, in the log's order
            refused = np.flatnonzero(is_hist)[[i for i, v in enumerate(verdict) if v is None]]
            is_hist[refused] = False
            hist = [h for h, v in zip(hist, verdict) if v is not None]
    return hist, payloads(~is_hist)


class _Records:
    """History records as their places in the log (``view[begin:end]``), viewed when their batch is joined
    rather than 100,000 views made at once; a record spread over chunks is its joined bytes (``spread``,
    at the sorted indices ``spread_at``). Indexing, slicing and iterating give what a list of the
    records' payloads would."""

    def __init__(self, view: Any, begin: Any, end: Any, spread_at: Any, spread: list[bytes]) -> None:
        self.view, self.begin, self.end = view, begin, end
        self.spread_at, self.spread = spread_at, spread

    def __len__(self) -> int:
        return len(self.begin)

    def __getitem__(self, i: Any) -> Any:
        import numpy as np

        if isinstance(i, slice):
            lo, hi, _step = i.indices(len(self))
            j0, j1 = np.searchsorted(self.spread_at, [lo, hi]).tolist()
            return _Records(self.view, self.begin[lo:hi], self.end[lo:hi], self.spread_at[j0:j1] - lo,
                            self.spread[j0:j1])
        i = i + len(self) if i < 0 else i
        j = int(np.searchsorted(self.spread_at, i))
        if j < len(self.spread_at) and self.spread_at[j] == i:
            return self.spread[j]
        return self.view[int(self.begin[i]):int(self.end[i])]

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    def lengths(self) -> Any:
        out = self.end - self.begin
        out[self.spread_at] = [len(b) for b in self.spread]
        return out

    def joined(self, tail: bytes) -> bytes:
        """Every record's bytes, one after another, then ``tail``."""
        parts = list(map(self.view.__getitem__, map(slice, self.begin.tolist(), self.end.tolist())))
        for at, payload in zip(self.spread_at.tolist(), self.spread):
            parts[at] = payload
        parts.append(tail)
        return b"".join(parts)

    def clear(self) -> None:
        self.begin = self.end = self.begin[:0]
        self.spread_at, self.spread = self.spread_at[:0], []


#: False walks every log chunk by chunk (the tests compare the two walks)
BLOCK_WALK = True


def _chunks(data: bytes) -> tuple[Any, Any, Any] | None:
    """``(start, length, type)`` of the log's good chunks in order, found by walking every block at once
    (a block starts with a chunk: each block is its own walk, numpy steps them all a chunk at a time),
    cut at the first chunk the chunk-by-chunk walk stops at (torn, or its CRC wrong); None where a chunk
    runs past its block (a damaged log: the chunk-by-chunk walk decides)."""
    import numpy as np

    size = len(data)
    if size < HEADER_LEN + CHUNK_HEADER:
        return None
    a = np.frombuffer(data, dtype=np.uint8)
    w4 = np.ndarray(shape=(size - 3,), dtype="<u4", buffer=a, strides=(1,))  # the 4 bytes from every offset
    nb = (size + BLOCK - 1) // BLOCK
    pos = np.arange(nb, dtype=np.int64) * BLOCK
    pos[0] = HEADER_LEN
    limit = np.minimum(pos - pos % BLOCK + BLOCK, size)  # each block's end
    active = np.arange(nb)
    found: list[tuple[Any, Any, Any, Any]] = []
    stops: list[int] = []
    while len(active):
        p = pos[active]
        live = (p + CHUNK_HEADER <= size) & (BLOCK - p % BLOCK >= CHUNK_HEADER) & (p < limit[active])
        active, p = active[live], p[live]
        if not len(active):
            break
        # the header's 7 bytes as two 4-byte words: the CRC, then (its last byte) the length and the type
        crc = w4[p]
        tail = w4[p + 3]
        length = ((tail >> 8) & 0xFFFF).astype(np.int64)
        kind = (tail >> 24).astype(np.uint8)
        end = p + CHUNK_HEADER + length
        padding = (kind == 0) & (length == 0) & (crc == 0) & (end <= size)  # zero padding: the block's rest skipped
        torn = end > size
        if torn.any():
            stops.append(int(p[torn].min()))
        good = ~padding & ~torn
        if (end[good] > limit[active[good]]).any():
            return None  # a chunk past its block's end: not for a walk by blocks
        found.append((p[good], length[good], kind[good], crc[good]))
        pos[active[good]] = end[good]
        active = active[good]
    if not found:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    starts = np.concatenate([f[0] for f in found])
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    lengths = np.concatenate([f[1] for f in found])[order]
    kinds = np.concatenate([f[2] for f in found])[order]
    crcs = np.concatenate([f[3] for f in found])[order]
    if stops:
        n = int(np.searchsorted(starts, min(stops)))
        starts, lengths, kinds, crcs = starts[:n], lengths[:n], kinds[:n], crcs[:n]
    view = memoryview(data)
    h = starts + CHUNK_HEADER
    # each chunk's type byte and payload in one view (the CRC covers both: no start value to look up and
    # pass); no Python frame per chunk
    views = map(view.__getitem__, map(slice, (h - 1).tolist(), (h + lengths).tolist()))
    ok = np.fromiter(map(_crc32, views), dtype=np.uint32, count=len(h)) == crcs
    if not ok.all():
        n = int(np.argmin(ok))  # damaged or half-written: up to the last good chunk
        starts, lengths, kinds = starts[:n], lengths[:n], kinds[:n]
    return starts + CHUNK_HEADER, lengths, kinds


def _split_walk(data: bytes, history: int, skip: int, fast: Callable[[Any], Any] | None
                ) -> tuple[list[Any], list[Any]]:
    """:func:`_split` chunk by chunk: one loop over the chunks sorts the records as they come."""
    view = memoryview(data)
    pos, size = HEADER_LEN, len(data)
    pending: list[bytes] = []
    hist: list[Any] = []
    rest: list[Any] = []
    unpack = struct.Struct("<IHB").unpack_from
    crc32 = _crc32
    kind_crc = _KIND_CRC
    while pos + CHUNK_HEADER <= size:
        room = BLOCK - (pos % BLOCK)
        if room < CHUNK_HEADER:
            pos += room  # block trailer padding
            continue
        crc, length, kind = unpack(data, pos)
        start = pos + CHUNK_HEADER
        end = start + length
        if end > size or (kind == 0 and length == 0 and crc == 0):
            if kind == 0 and length == 0 and end <= size:
                pos += room  # zero padding up to the block's end
                continue
            break
        chunk = view[start:end]
        if crc32(chunk, kind_crc[kind]) != crc:
            break  # damaged or half-written: stop at the last good record
        pos = end
        if kind == FULL:
            payload = chunk
        elif kind == FIRST:
            pending = [chunk]
            continue
        elif kind == MIDDLE:
            pending.append(chunk)
            continue
        elif kind == LAST:
            pending.append(chunk)
            payload = b"".join(pending)
            pending = []
        else:
            continue
        # the field after the record's number (a varint of 1-3 bytes: every log under 2 million records)
        if len(payload) > 5 and payload[0] == 0x08:
            field = payload[2] if payload[1] < 0x80 else payload[3] if payload[2] < 0x80 else \
                payload[4] if payload[3] < 0x80 else _record_field(payload)
        else:
            field = _record_field(payload)
        if field == skip:
            continue
        if field == history and (fast is None or fast(payload) is not None):
            hist.append(payload)
        else:
            rest.append(payload)
    return hist, rest


def _floats(raw: Any) -> list[float]:
    """JSON numbers (and wandb's NaN / Infinity spellings) as floats; one that is not a number as NaN."""
    try:
        return list(map(float, raw))
    except ValueError:
        pass
    out = []
    for v in raw:
        try:
            out.append(float(v))
        except ValueError:
            out.append(math.nan)
    return out


def _number(raw: str) -> float | None:
    try:
        return float(raw)  # JSON numbers, and wandb's NaN / Infinity / -Infinity spellings
    except ValueError:
        return None


_VALUE_TAG = b"\x82\x01"
_STEP, _WALL = b"_step", b"_timestamp"
#: A record's type is the field after its number: history (2) and summary (3) are most of a log
_HISTORY, _SUMMARY = 0x12, 0x1A


#: the odd multiplier that mixes a key's words into one number (tests set 0: every key collides)
_MIX = 0x9E3779B97F4A7C15
#: bytes a JSON number (or wandb's NaN / Infinity) may start with
_NUMBER_START = frozenset(b"-+0123456789.NI")


def _items_start(payload: bytes) -> int:
    """Where a history record's first item starts: after ``num`` (field 1, a varint) and the history
    field's tag and length (varint); -1 when the record does not start that way."""
    return _items_span(payload)[0]


def _items_span(payload: bytes) -> tuple[int, int]:
    """``(first, end)``: where a history record's first item starts (:func:`_items_start`) and where its
    history field ends (the first plus the field's length); ``(-1, -1)`` when it does not start that way."""
    i = 0
    if payload[0:1] == b"\x08":
        i = 1
        while i < len(payload) and payload[i] & 0x80:
            i += 1
        i += 1
    if payload[i:i + 1] != b"\x12":
        return -1, -1
    i += 1
    size = shift = 0
    while i < len(payload) and payload[i] & 0x80:
        size |= (payload[i] & 0x7F) << shift
        shift += 7
        i += 1
    if i < len(payload):
        size |= payload[i] << shift
    return i + 1, i + 1 + size


def _items_starts(a: Any, starts: Any, hist: list[Any]) -> tuple[Any, Any]:
    """:func:`_items_span` of every record at once (records are ``a[starts[i]:starts[i + 1]]``), as two
    arrays: numpy for varints of up to 3 bytes ending inside their record, :func:`_items_span` itself for
    any other."""
    import numpy as np

    st, ends = starts[:-1], starts[1:]
    top = len(a) - 1

    def at(i: Any) -> Any:
        return a[np.minimum(i, top)]

    def varint_end(i: Any) -> tuple[Any, Any]:
        """Where the varint at ``i`` ends (one past its last byte), and whether it ended within 3 bytes."""
        done = np.zeros(len(i), dtype=bool)
        out = i + 3
        for k in range(3):
            stop = ~done & ((at(i + k) & 0x80) == 0)
            out = np.where(stop, i + k + 1, out)
            done |= stop
        return out, done

    i = st.copy()
    has_num = at(i) == 0x08
    num_end, ok = varint_end(i + 1)
    i = np.where(has_num, num_end, i)
    ok = ~has_num | ok
    is_hist = at(i) == 0x12
    item0, ok2 = varint_end(i + 1)
    first = np.where(is_hist, item0 - st, -1)
    b1, b2, b3 = (at(i + k).astype(np.int64) for k in (1, 2, 3))
    size = (b1 & 0x7F) | np.where(b1 & 0x80, (b2 & 0x7F) << 7, 0) | np.where(b1 & b2 & 0x80, (b3 & 0x7F) << 14, 0)
    end = np.where(is_hist, first + size, -1)
    # a varint running on to its record's end or past 3 bytes: the record's own walk decides
    odd = ~(ok & ok2 & (i < ends) & (item0 <= ends)) | (has_num & (num_end > ends))
    for r in np.flatnonzero(odd).tolist():
        first[r], end[r] = _items_span(hist[r])
    return first, end


#: History records read at once by :func:`_history_bulk`: ~4 MB joined, ~100,000 items, so its arrays stay
#: in the caches (batches of 16,384 records read the benchmark's log ~20% slower); keys carry over (:class:`_Keys`)
BULK_RECORDS = 2048


def _history_bulk(hist: Any, keep: Callable[[str], bool] | None
                  ) -> tuple[dict[str, tuple[Any, Any]], Any, set[str], list[bytes]]:
    """:func:`_history_batch` over :data:`BULK_RECORDS` records at a time, the pieces joined per key."""
    import numpy as np

    pieces: dict[str, list[tuple[Any, Any]]] = {}
    walls: list[Any] = []
    every: set[str] = set()
    misfits: list[bytes] = []
    known = _Keys()
    for i in range(0, len(hist), BULK_RECORDS):
        out, w, e, m = _history_batch(hist[i:i + BULK_RECORDS], keep, known)
        for key, part in out.items():
            pieces.setdefault(key, []).append(part)
        walls.append(w)
        every |= e
        misfits += m
    hist.clear()
    return ({k: (np.concatenate([s for s, _v in parts]), np.concatenate([v for _s, v in parts]))
             for k, parts in pieces.items()}, np.concatenate(walls) if walls else np.zeros(0), every, misfits)


#: A known key is found by the top bits of its mixed number in a table this large (2^16 slots)
_SLOT_BITS = 16


class _Keys:
    """The keys earlier batches told apart, carried to the next, so a batch finds most of its items' keys
    in one pass over them (:meth:`find`) and tells apart (``np.unique``) only the items it does not find.

    A key is looked up by its length and its last 8 bytes (one word read where it ends), mixed into one
    number, then checked against the found key's other words: exact, whatever the mix."""

    def __init__(self) -> None:
        self.names: list[bytes] = []
        self.index: dict[bytes, int] = {}
        self._fp: list[int] = []
        self._len: list[int] = []
        self._heads: list[tuple[int, ...]] = []
        self._table: tuple[Any, ...] | None = None
        self._wanted: list[bool | None] = []

    @staticmethod
    def _mixed(last: Any, klen: Any) -> Any:
        import numpy as np

        with np.errstate(over="ignore"):
            return (last ^ klen.astype(np.uint64)) * np.uint64(_MIX)

    def add(self, name: bytes) -> int:
        """A key's number (a new one where it is new)."""
        import numpy as np

        if name in self.index:
            return self.index[name]
        i = self.index[name] = len(self.names)
        self.names.append(name)
        k = len(name)
        last = np.array([int.from_bytes(name[-8:], "little")], dtype=np.uint64)
        self._fp.append(int(self._mixed(last, np.array([k]))[0]))
        self._len.append(k)
        self._heads.append(tuple(int.from_bytes(name[o:o + 8], "little") for o in range(0, (k + 7) // 8 * 8 - 8, 8)))
        self._table = None
        return i

    def wanted(self, i: int, keep: Callable[[str], bool] | None) -> bool:
        """Whether key ``i``'s values are read: the wall time, and the keys ``keep`` accepts (asked once a key,
        not once a batch: it is a regular expression of every concept's names)."""
        if i >= len(self._wanted):
            self._wanted += [None] * (len(self.names) - len(self._wanted))
        verdict = self._wanted[i]
        if verdict is None:
            nm = self.names[i]
            verdict = self._wanted[i] = nm == _WALL or (not nm.startswith(b"_") and (
                keep is None or keep(nm.decode("utf-8", "replace"))))
        return verdict

    def find(self, word8: Any, p: Any, klen: Any) -> Any:
        """The number of the key ending at each ``p`` (``klen`` bytes long), -1 where it is not known."""
        import numpy as np

        if not self.names or not len(p):
            return np.full(len(p), -1, dtype=np.int64)
        if self._table is None:
            order = np.argsort(np.asarray(self._fp, dtype=np.uint64), kind="stable")
            width = max(map(len, self._heads))
            # heads[m]: each key's m-th word from its start (0 where it has none); heads[-1]: the first one's mask
            heads = [np.array([h[m] if len(h) > m else 0 for h in self._heads], dtype=np.uint64) for m in range(width)]
            heads.append(np.array([(1 << 64) - 1 if h else 0 for h in self._heads], dtype=np.uint64))
            fps = np.asarray(self._fp, dtype=np.uint64)
            slot = np.full(1 << _SLOT_BITS, -1, dtype=np.int64)  # a key's number by its mix's top bits
            top = (fps >> np.uint64(64 - _SLOT_BITS)).astype(np.int64)
            slot[top] = np.arange(len(fps))
            direct = len(np.unique(top)) == len(top)  # else two keys share a slot: searchsorted
            self._table = (fps[order], order.astype(np.int64), np.asarray(self._len, dtype=np.int64),
                           np.asarray([len(h) for h in self._heads]), heads, width, fps, slot if direct else None)
        u, uid, lens, nheads, heads, width, fps, slot = self._table
        # the key's last 8 bytes (a shorter key's own bytes: the word's top ones)
        last = word8[p - 8]
        short = np.flatnonzero(klen < 8)
        if len(short):
            last[short] >>= ((8 - klen[short]) * 8).astype(np.uint64)
        fp = self._mixed(last, klen)
        if slot is not None:
            cand = slot[(fp >> np.uint64(64 - _SLOT_BITS)).view(np.int64)]  # (a view: the top bits are small)
            # (an empty slot's -1 reads the last key: whatever that says, the answer is -1)
            hit = (fps[cand] == fp) & (lens[cand] == klen)
        else:
            j = np.minimum(np.searchsorted(u, fp), len(u) - 1)
            cand = uid[j]
            hit = (u[j] == fp) & (lens[cand] == klen)
        if not width:
            return np.where(hit, cand, -1)
        # the words before the last one, from the key's start: the first of every item (a key without one
        # compares under a zero mask), the others only for the items whose key is longer than 16 bytes
        hit &= (word8[p - klen] & heads[-1][cand]) == heads[0][cand]
        if width > 1:
            at = np.flatnonzero(hit & (nheads[cand] > 1))
            start, c = p[at] - klen[at], cand[at]
            for m in range(1, width):
                more = nheads[c] > m
                if not more.all():
                    at, start, c = at[more], start[more], c[more]
                if not len(at):
                    break
                same = word8[start + 8 * m] == heads[m][c]
                if not same.all():
                    hit[at[~same]] = False
                    at, start, c = at[same], start[same], c[same]
        return np.where(hit, cand, -1)


def _step_field_tags(padded: Any, starts: Any, hend: Any, p: Any, rec: Any, item: Any, ok: Any) -> Any:
    """The failed tags that are no item's: a record's last ``82 01`` lying in the step field after its items
    (``12 L 08 <step>``, the history field's last bytes: a step of 130 is the varint ``82 01``). They are
    marked ok and returned (to be dropped), so the record is read; None when there are none."""
    import numpy as np

    f = np.flatnonzero(~ok)
    if not len(f):
        return None
    r = rec[f]
    stop = starts[r] + hend[r]
    # where the failed tag's item would start (the end of the item before it), kept inside the record
    c = np.clip(item[f], starts[r], starts[r + 1])
    last = (f + 1 == len(rec)) | (rec[np.minimum(f + 1, len(rec) - 1)] != r)
    size = padded[c + 1].astype(np.int64)
    inside = last & (c == item[f]) & (padded[c] == 0x12) & (size < 0x80) & (padded[c + 2] == 0x08) \
        & (c + 2 + size == stop) & (p[f] > c + 2) & (p[f] + 2 <= stop)
    if not inside.any():
        return None
    ok[f[inside]] = True
    return f[inside]


def _history_batch(hist: Any, keep: Callable[[str], bool] | None, known: _Keys | None = None
                   ) -> tuple[dict[str, tuple[Any, Any]], Any, set[str], list[bytes]]:
    """All short-form history records at once, with numpy over their joined bytes: ``(key -> (steps,
    values) for the keys ``keep`` accepts, wall times, every key, the records that did not fit)``.

    An item is ``\\n L \\x12 K key \\x82\\x01 V value`` with one-byte lengths; items follow each other,
    so each value tag's item starts where the one before it ended (a record's first at
    :func:`_items_start`), and its lengths are checked against each other (L = K + V + 5). A record
    with any item that does not fit (a nested key, a text value, a long one) or without ``_step`` is
    returned (its bytes) for wandb's protobuf parse, as the per-record reader did."""
    import numpy as np

    n = len(hist)
    if not n:
        return {}, [], set(), []
    # bytes past the end: every offset starts a whole word (below), and a value (under 128 bytes) is read
    # past a tag with no bounds to clamp to
    if isinstance(hist, _Records):
        lengths, buf = hist.lengths(), hist.joined(b"\0" * _PAD)
    else:
        lengths = np.fromiter(map(len, hist), dtype=np.int64, count=n)
        buf = b"".join([*hist, b"\0" * _PAD])
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    padded = np.frombuffer(buf, dtype=np.uint8)
    a = padded[:-_PAD]
    first, hend = _items_starts(a, starts, hist)
    step_b = 1 << 26  # the tag scan in 64 MiB slices: no byte-sized temporary as long as the log
    p = np.concatenate([np.flatnonzero(a[o:o + step_b] == 0x82) + o for o in range(0, len(a), step_b)] or
                       [np.zeros(0, dtype=np.int64)])
    p = p[padded[p + 1] == 0x01]
    bad = np.zeros(n, dtype=bool)
    bad[first < 0] = True
    # each tag's record: the tags are in order, so each record's count of them repeats its number
    rec = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.searchsorted(p, starts)))
    vlen = padded[p + 2].astype(np.int64)
    end = p + 3 + vlen
    # each item starts where the one before it ended, a record's first where its history field's items do
    item = np.empty_like(p)
    item[1:] = end[:-1]
    newrec = np.ones(len(p), dtype=bool)
    newrec[1:] = rec[1:] != rec[:-1]
    item[newrec] = starts[rec[newrec]] + first[rec[newrec]]
    inside = (item >= 0) & (item + 4 < len(a))
    # an item ending past its record: its record's last (any other's end is the next one's start)
    last = np.flatnonzero(np.append(newrec[1:], True)) if len(p) else np.zeros(0, dtype=np.int64)
    inside[last] &= end[last] <= starts[rec[last] + 1]
    item_c = item if inside.all() else np.where(inside, item, 0)
    klen = padded[item_c + 3].astype(np.int64)
    ok = inside & (padded[item_c] == 0x0A) & (padded[item_c + 2] == 0x12) & (item_c + 4 + klen == p) \
        & (padded[item_c + 1] == klen + vlen + 5) & (vlen < 0x80) & (klen < 0x80) & (vlen > 0)
    lut = np.zeros(256, dtype=bool)
    lut[list(_NUMBER_START)] = True
    ok &= lut[padded[p + 3]]
    tail = _step_field_tags(padded, starts, hend, p, rec, item, ok)
    bad[rec[~ok]] = True
    if bad.any() or tail is not None:  # (most batches: every record fits, nothing to take out)
        good = ~bad[rec]
        if tail is not None:
            good[tail] = False
        p, rec, vlen, klen = p[good], rec[good], vlen[good], klen[good]
    # keys: told apart by their length and their bytes read as 8-byte words (a key of K bytes is its
    # ceil(K/8) words, the last one ending at the key's end), mixed into one number for np.unique and
    # then compared word for word with the first key of each number (exact, whatever the mix)
    # the 8 bytes from every offset as one little-endian word (a strided view, no copy)
    word8 = np.ndarray(shape=(len(a),), dtype="<u8", buffer=buf, strides=(1,))

    def words_at(pos: Any) -> Any:
        return word8[pos]

    known = _Keys() if known is None else known
    ids = known.find(word8, p, klen)
    unknown = np.flatnonzero(ids < 0)
    for k in np.unique(klen[unknown]).tolist():  # keys no earlier batch told apart (or mixed like a known one)
        sel = unknown[klen[unknown] == k]
        start = p[sel] - k
        offs = sorted({*range(0, max(k - 8, 0) + 1, 8), max(k - 8, 0)})
        words = [words_at(start + o) for o in offs]
        if k < 8:  # a short key's one word reaches past it: keep only its own bytes
            words = [words[0] & np.uint64((1 << (8 * k)) - 1)]
        mix = np.zeros(len(sel), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for w in words:
                mix = (mix ^ w) * np.uint64(_MIX)
        first_i, inv = _unique(mix)
        if not all((w == w[first_i][inv]).all() for w in words):  # two keys mixed to one number
            stacked = np.stack(words, axis=1)
            _u, first_i, inv = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
            inv = inv.reshape(-1)
        new = np.array([known.add(a[x - k:x].tobytes()) for x in p[sel][first_i].tolist()], dtype=np.int64)
        ids[sel] = new[inv]
    names = known.names
    every = {nm.decode("utf-8", "replace") for nm in names if not nm.startswith(b"_")}
    step_id = names.index(_STEP) if _STEP in names else -1
    # each record's step: its _step item (a record without one goes to the protobuf parse)
    steps = np.full(n, -1, dtype=np.int64)
    is_step = np.flatnonzero(ids == step_id)  # (places, not a mask: a few of the items are read)
    sp, sv = p[is_step], vlen[is_step]
    step_vals = _digits(padded, sp, sv)
    steps[rec[is_step]] = step_vals if step_vals is not None else _parse(padded, sp, sv).astype(np.int64)
    no_step = steps < 0
    bad |= no_step
    wanted = {i for i, nm in enumerate(names) if known.wanted(i, keep)}
    is_wanted = np.zeros(len(names) + 1, dtype=bool)
    is_wanted[list(wanted)] = True
    take = is_wanted[ids]
    if no_step.any():  # (the items of the records that failed before are gone already)
        take &= ~no_step[rec]
    take = np.flatnonzero(take)
    values = _parse(padded, p[take], vlen[take])
    t_ids, t_steps = ids[take], steps[rec[take]]
    out: dict[str, tuple[Any, Any]] = {}
    walls = np.zeros(0)
    # each key's items together, in their records' order (a stable sort of 16-bit numbers is a radix sort)
    by_key = np.argsort(t_ids.astype(np.int16) if len(names) < 1 << 15 else t_ids, kind="stable")
    bounds = np.searchsorted(t_ids[by_key], np.arange(len(names) + 1))
    for i in sorted(wanted):
        m = by_key[bounds[i]:bounds[i + 1]]
        if not len(m):
            continue
        if names[i] == _WALL:
            walls = values[m]
        else:
            out[names[i].decode("utf-8", "replace")] = (t_steps[m], values[m])
    return out, walls, every, [buf[starts[i]:starts[i + 1]] for i in np.flatnonzero(bad).tolist()]


#: Leading items whose distinct key numbers :func:`_unique` looks up every other item's in (a batch's
#: keys of one length are some tens of thousands of items)
UNIQUE_PREFIX = 1 << 12


def _unique(mix: Any) -> tuple[Any, Any]:
    """``np.unique(mix, return_index=True, return_inverse=True)[1:]`` without sorting every item: the
    distinct numbers of the first :data:`UNIQUE_PREFIX` items (a run's keys show in its first steps), each
    item's looked up among them; a number first seen later sends it to ``np.unique`` itself."""
    import numpy as np

    if len(mix) > UNIQUE_PREFIX:
        u, first_i = np.unique(mix[:UNIQUE_PREFIX], return_index=True)
        inv = np.searchsorted(u, mix)
        if (u[np.minimum(inv, len(u) - 1)] == mix).all():
            return first_i, inv
    _u, first_i, inv = np.unique(mix, return_index=True, return_inverse=True)
    return first_i, inv.reshape(-1)


#: Zero bytes after a batch's joined records (a value is under 128 bytes, a key word 8)
_PAD = 136


#: Per row width (in words): each value length's masks, the one keeping its bytes and the one writing past them
_ROW_MASKS: dict[int, tuple[Any, Any]] = {}


def _row_masks(nw: int) -> tuple[Any, Any]:
    """``(keep, fill)`` for rows of ``nw`` words, indexed by a value's length: ``keep`` its bytes, ``fill`` a
    comma right after them and spaces up to the row's end."""
    import numpy as np

    if nw not in _ROW_MASKS:
        width = 8 * nw
        v = np.arange(width)[:, None]
        col = np.arange(width)[None, :]
        keep = np.where(col < v, 0xFF, 0).astype(np.uint8)
        fill = np.where(col < v, 0, np.where(col == v, 0x2C, 0x20)).astype(np.uint8)
        _ROW_MASKS[nw] = (keep.view("<u8"), fill.view("<u8"))
    return _ROW_MASKS[nw]


def _parse(a: Any, p: Any, vlen: Any) -> Any:
    """The JSON numbers after the value tags at ``p`` as floats (orjson or numpy parses them; one that is
    not a number becomes NaN); ``a`` holds :data:`_PAD` bytes past the last value.

    The values are written as one JSON array, a row of whole words each (the value, a comma, spaces):
    each row copied in one piece (a strided view of ``a`` whose items are rows) and masked by a table
    looked up by the value's length, not byte by byte."""
    import numpy as np

    if not len(p):
        return np.zeros(0)
    n = len(p)
    nw = (int(vlen.max()) + 8) // 8  # the longest value and its comma (a value is under 128 bytes, the pad 136)
    width = 8 * nw
    rows = np.ndarray(shape=(len(a) - width + 1,), dtype=f"V{width}", buffer=a, strides=(1,))
    keep, fill = _row_masks(nw)
    flat = np.empty(1 + n * nw, dtype=np.uint64)
    flat[0] = np.uint64(0x202020202020205B)  # "[", seven spaces
    words = flat[1:].reshape(n, nw)
    words[:] = rows[p + 3].view(np.uint64).reshape(n, nw)
    words &= keep[vlen]
    words |= fill[vlen]
    text = flat.view(np.uint8)
    text[8 + (n - 1) * width + int(vlen[-1])] = 0x5D  # the last comma: "]"
    block = text[8:].reshape(n, width)
    fast = _json_array(block, text)
    if fast is not None:
        return fast
    plain = block.copy()
    plain[(plain == 0x2C) | (plain == 0x5D)] = 0x20
    strings = plain.view(f"S{width}").reshape(-1)
    try:
        return strings.astype(np.float64)
    except ValueError:
        return np.asarray(_floats(strings.tolist()), dtype=np.float64)


def _digits(a: Any, p: Any, vlen: Any) -> Any:
    """The values after the tags at ``p`` as integers where every one is 1-15 plain digits (a step: what
    the float parse gives them, read without it), else None."""
    import numpy as np

    if not len(p) or int(vlen.max()) > 15:
        return None
    rows = np.ndarray(shape=(len(a) - 15,), dtype="V16", buffer=a, strides=(1,))
    digit = rows[p + 3].view(np.uint8).reshape(len(p), 16).astype(np.int64) - 0x30
    place = vlen[:, None] - 1 - np.arange(16)  # each digit's power of ten (negative: past the value)
    inside = place >= 0
    if not ((digit >= 0) & (digit <= 9) | ~inside).all():
        return None
    powers = np.array([10 ** k for k in range(16)], dtype=np.int64)
    return (np.where(inside, digit, 0) * powers[np.maximum(place, 0)]).sum(axis=1)


def _json_array(block: Any, text: Any = None) -> Any:
    """Rows of number text (space-padded) as floats through ``orjson``, one JSON array of them (about
    twice numpy's parse of the same text); None where orjson is absent or refuses one (NaN, Infinity:
    numpy then parses them). A ``-0`` keeps its sign, as numpy's parse does. ``text``: the rows already
    written as that array (``[``, each row's number followed by a comma, ``]`` for the last one's), read
    as it stands, not copied."""
    import numpy as np

    try:
        from orjson import loads
    except ImportError:
        return None
    n, width = block.shape
    if text is None:
        rows = np.empty((n, width + 1), dtype=np.uint8)
        rows[:, :width] = block
        rows[:, width] = 0x2C  # ","
        rows[-1, width] = 0x5D  # "]"
        text = np.concatenate([np.array([0x5B], dtype=np.uint8), rows.reshape(-1)])
    try:
        values = loads(memoryview(text))
    except ValueError:
        return None
    if len(values) != n:
        return None
    out = np.fromiter(values, dtype=np.float64, count=n)  # orjson's floats and 64-bit integers
    zero = np.flatnonzero(out == 0)
    if len(zero):
        out[zero[block[zero, 0] == 0x2D]] = -0.0  # an integer "-0" is int 0 to orjson, -0.0 to numpy
    return out


def _record_field(payload: bytes) -> int:
    """The tag byte of the field after the record's ``num`` (0 when it does not start that way)."""
    if not payload or payload[0] != 0x08:
        return payload[0] if payload else 0
    i = 1
    while i < len(payload) and payload[i] & 0x80:
        i += 1
    return payload[i + 1] if i + 1 < len(payload) else 0


def _history_fast(payload: bytes) -> bytes | None:
    """A history record handed to the bulk reader (:func:`_history_bulk`, which checks its form itself);
    None leaves it to wandb's protobuf parse (the tests compare the two so)."""
    return payload


#: the hook as shipped: every history record goes to the bulk reader (tests replace the hook)
_ACCEPT_ALL = _history_fast


def read_transaction_log(data: bytes, run: Run, *, keep_output: bool = True,
                         keep: Callable[[str], bool] | None = None) -> list[str]:
    """Fill ``run`` from a transaction log's bytes; the console lines it carried (bounded).

    History records (one per logged step, most of the file with summary records) are read off
    their joined bytes at once (:func:`_history_bulk`): every key is listed, and only the values of
    the keys ``keep`` accepts (those the checks may read; None: all) are parsed. Summary records are skipped
    unparsed; everything else, and any history record the short form does not fit, goes through
    wandb's ``Record`` (whose keys ``keep`` refuses are listed too, and make no curve: the same curves
    whichever way a record was read)."""
    import numpy as np

    pb = _pb()
    record = pb.Record()
    slow: dict[str, tuple[list[int], list[float]]] = {}
    listed: set[str] = set()  # the keys with numbers in the records read here
    wanted: dict[str, bool] = {}  # whether a key's numbers are kept (``keep`` asked once a key)
    walls: list[Any] = []
    output: list[str] = []
    number = _number
    # and the history records the bulk read returns (they did not fit its form)
    # (the default hook is not called: 100,000 calls that say yes cost ~0.1 s)
    hist, pending = _split(data, _HISTORY, _SUMMARY, None if _history_fast is _ACCEPT_ALL else _history_fast)
    series, bulk_walls, every, misfits = _history_bulk(hist, keep)  # it empties ``hist``
    pending += misfits
    for payload in pending:
        record.ParseFromString(bytes(payload))
        kind = record.WhichOneof("record_type")
        if kind == "history":
            h = record.history
            step = h.step.num
            for item in h.item:
                key = "/".join(item.nested_key) if item.nested_key else item.key
                if key.startswith("_"):
                    if key == "_timestamp":
                        walls.append(item.value_json)
                    elif key == "_step" and not step:
                        step = int(number(item.value_json) or 0)
                    continue
                v = number(item.value_json)
                if v is None:
                    continue
                listed.add(key)
                read = wanted.get(key)
                if read is None:
                    read = wanted[key] = keep is None or keep(key)
                if not read:  # listed, not kept: as the bulk read does
                    continue
                entry2 = slow.get(key)
                if entry2 is None:
                    entry2 = slow[key] = ([], [])
                entry2[0].append(step)
                entry2[1].append(v)
        elif kind == "run":
            for c in record.run.config.update:
                key = "/".join(c.nested_key) if c.nested_key else c.key
                run.config[key] = c.value_json
            if record.run.display_name:
                run.name = record.run.display_name
        elif kind == "config":
            for c in record.config.update:
                run.config["/".join(c.nested_key) if c.nested_key else c.key] = c.value_json
        elif kind == "exit":
            run.exit_code = int(record.exit.exit_code)
            run.finished = run.exit_code == 0
        elif kind == "preempting":
            run.notes.append("the run reported preemption (wandb.mark_preempting)")
        elif kind in ("output_raw", "output") and keep_output:
            line = getattr(record, kind).line
            output.append(line)
            if len(output) > 2 * MAX_OUTPUT_LINES:
                del output[:MAX_OUTPUT_LINES]
    run.keys = sorted(set(run.keys) | every | listed)
    for key in {*series, *slow}:
        k_steps, values = series.get(key, ([], []))
        if key in slow:  # joined as float arrays (what make_curve makes of them), not as 100,000-item lists
            k_steps = np.concatenate([np.asarray(k_steps, dtype=np.float64), np.asarray(slow[key][0], dtype=np.float64)])
            values = np.concatenate([np.asarray(values, dtype=np.float64), np.asarray(slow[key][1], dtype=np.float64)])
        if len(k_steps):
            run.curves[key] = make_curve(key, k_steps, values)
    wall_values = np.concatenate([bulk_walls, np.asarray(_floats(walls), dtype=np.float64)])  # bulk, then protobuf
    wall_values = wall_values[np.isfinite(wall_values)]
    if len(wall_values):
        run.last_wall = float(wall_values.max())
        run.step_interval = median_interval(wall_values[-10_000:])
    run.config.update(_flat_config(run.config))
    return output[-MAX_OUTPUT_LINES:]


def _flat_config(config: dict[str, Any]) -> dict[str, Any]:
    """Values the detectors use, parsed from the config's JSON: the response length cap under any of its names."""
    import json

    out: dict[str, Any] = {}
    for key, raw in config.items():
        try:
            value = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        if isinstance(value, dict) and "value" in value:  # config.yaml's {desc, value} form
            value = value["value"]
        leaf = key.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
        if leaf in ("max_response_length", "rollout_max_response_len", "max_new_tokens") and isinstance(value, (int, float)):
            out["max_response_length"] = value
        if isinstance(value, dict):
            for k2, v2 in _walk(value, key):
                if k2.rsplit(".", 1)[-1] in ("max_response_length", "rollout_max_response_len", "max_new_tokens") \
                        and isinstance(v2, (int, float)):
                    out["max_response_length"] = v2
    return out


def _walk(value: Any, prefix: str) -> Any:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{prefix}.{k}")
    else:
        yield prefix, value


def read_run(path: Path, confinement: Any = None, keep: Callable[[str], bool] | None = None) -> Run:
    """One W&B run folder (or its ``.wandb`` file) as a :class:`Run`."""
    folder = path.parent if path.is_file() else path
    logs = [path] if path.is_file() else sorted(folder.glob("run-*.wandb"))
    run = Run(path=str(folder), source="wandb", name=folder.name)
    if logs:
        _pb()  # the missing extra is named on its own line, not as a damaged file
    mtimes = []
    output: list[str] = []
    for log in logs:
        data = map_file_bytes(log, confinement)
        mtimes.append(os.stat(log).st_mtime)
        try:
            output = read_transaction_log(data, run, keep=keep) or output
        except UserError as exc:
            raise UserError(f"{log}: {exc}") from None
    files = folder / "files"
    out_log = files / "output.log"
    if out_log.is_file():
        run.log_file = str(out_log)
        mtimes.append(os.stat(out_log).st_mtime)
    elif output:
        run.notes.append("console output read from the transaction log")
        run.config["_output_lines"] = output
    cfg = files / "config.yaml"
    if cfg.is_file():
        import yaml

        try:
            text = confinement.read_text(cfg) if confinement is not None else cfg.read_text(encoding="utf-8")
            data = yaml.safe_load(text)
            if isinstance(data, dict):
                run.config.update(_flat_config({k: v for k, v in data.items()}))
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            pass
    if not logs and not run.log_file:
        raise UserError(f"{folder}: no run-*.wandb transaction log and no files/output.log in this W&B run folder")
    run.files_mtime = max(mtimes) if mtimes else None
    return run
