"""The fast parts of the W&B transaction-log read give what the chunk-by-chunk walk and wandb's protobuf
parse give: the same curves (steps, bucket means, peaks, raw points, first NaN), the same keys and wall
times, and so the same findings (detector, metric, exact first step, values before and after), on runs
written by the real wandb library with pathologies at odd onsets, one long enough to be bucketed, one
with records the bulk read must hand to protobuf (a text value), and on damaged logs."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlmedic.tools.runs import wandb as wb
from rlmedic.tools.runs.diagnose import diagnose_runs
from rlmedic.tools.runs.vocabulary import builtin_vocabulary

from runs_compare import assert_same_run
from runs_data import CAP, curves, write_wandb

HAVE_WANDB = importlib.util.find_spec("wandb") is not None
NOW = 2.0e9  # a fixed "now": the stopped-run check compares the files' age with it


def _findings(path: Path) -> list[tuple[Any, ...]]:
    d = diagnose_runs([path], now=NOW)
    return [(f.id, f.severity, f.summary, json.dumps(f.evidence, sort_keys=True, default=str)) for f in d.findings]


# ------------------------------------------------------------------ W&B --

WANDB_RUNS = [("length_cap", "verl", 2_300, 1_733), ("nan", "slime", 300, 157), ("grad_spike", "areal", 400, 263)]


@pytest.fixture(scope="module")
def wandb_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    if not HAVE_WANDB:
        pytest.skip("wandb extra not installed (CI installs it)")
    work = tmp_path_factory.mktemp("wandb-fast")
    jobs = []
    for pathology, fw, steps, onset in WANDB_RUNS:
        series, _on = curves(pathology, fw, steps=steps, seed=onset, onset=onset)
        extra = {"note": "a text value"} if pathology == "nan" else {}  # its records go to protobuf: both mixed
        jobs.append({"dir": str(work / pathology), "name": pathology, "series": series, "extra": extra,
                     "config": {"data": {"max_response_length": CAP}}})
    return write_wandb(jobs, work)


def test_wandb_fast_parts_read_as_wandbs_protobuf_parse(wandb_runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulk read (keys looked up among the first items' keys, numbers parsed by orjson, item starts
    by numpy) against wandb's Record parse of every history record, and against its own slower parts."""
    vocab = builtin_vocabulary()
    for folder, (pathology, _fw, _steps, onset) in zip(wandb_runs, WANDB_RUNS):
        fast = (wb.read_run(folder, keep=vocab.known), _findings(folder))
        assert any(f"step {onset}" in f[2] for f in fast[1]), fast[1]
        variants = {
            "protobuf": {"_history_fast": lambda payload: None},  # every record through wandb's Record
            "numpy parse": {"_json_array": lambda block, text=None: None},
            "np.unique": {"UNIQUE_PREFIX": 10 ** 12},
            "key lookup": {"UNIQUE_PREFIX": 500},  # every key in the first 500 items: the others looked up
            "late keys": {"UNIQUE_PREFIX": 7},  # keys first seen past the prefix: np.unique after all
            "small batches": {"BULK_RECORDS": 7},  # keys looked up among those earlier batches told apart
            "small batches, one mix": {"BULK_RECORDS": 7, "_MIX": 0},  # ... where every key has the same number
        }
        for name, patches in variants.items():
            with monkeypatch.context() as m:
                for attr, value in patches.items():
                    m.setattr(wb, attr, value)
                other = (wb.read_run(folder, keep=vocab.known), _findings(folder))
            assert_same_run(fast[0], other[0], curve_order=False)
            assert fast[1] == other[1], (pathology, name)


def _history_payload(num: int, items: list[tuple[bytes, bytes]], step: int | None = None) -> bytes:
    def varint(v: int) -> bytes:
        out = b""
        while True:
            byte = v & 0x7F
            v >>= 7
            out += bytes((byte | (0x80 if v else 0),))
            if not v:
                return out

    body = b"".join(b"\n" + bytes((len(k) + len(v) + 5,)) + b"\x12" + bytes((len(k),)) + k + b"\x82\x01" +
                    bytes((len(v),)) + v for k, v in items)
    if step is not None:
        body += b"\x1a" + varint(len(varint(step)) + 1) + b"\x08" + varint(step)
    return b"\x08" + varint(num) + b"\x12" + varint(len(body)) + body


def test_item_starts_unique_and_number_parse_equal_their_plain_forms() -> None:
    """Record numbers and history lengths of 1 to 5 varint bytes, torn records; numbers orjson reads
    differently from numpy (``-0``) or refuses (NaN, 1e400)."""
    hist = [_history_payload(num, [(b"_step", str(num).encode()), (b"a/b", b"0.5")] * reps)
            for num in (1, 127, 128, 300, 16_384, 2_097_152, 2 ** 34) for reps in (1, 30, 700)]
    hist += [h[:cut] for h in hist[:6] for cut in (1, 2, 3, 4)]  # torn: varints running off the record
    hist += [b"", b"\x12", b"\x08\x80", b"\x1a\x02ab"]
    starts = np.zeros(len(hist) + 1, dtype=np.int64)
    np.cumsum([len(h) for h in hist], out=starts[1:])
    a = np.frombuffer(b"".join(hist) + b"\0" * 8, dtype=np.uint8)[:-8]
    first, end = wb._items_starts(a, starts, hist)
    assert list(zip(first.tolist(), end.tolist())) == [wb._items_span(h) for h in hist]
    assert first.tolist() == [wb._items_start(h) for h in hist]

    # steps read as plain digits where they are (1-15 of them), as the float parse reads them
    for texts in ([b"0", b"7", b"007", b"130", b"16640", b"999999999999999", b"123456789012345"],
                  [b"1", b"1.5"], [b"1", b"-3"], [b"1", b"1e3"], [b"1", b"1234567890123456"], [b"1", b"NaN"]):
        payload = b"".join(b"\x82\x01" + bytes((len(t),)) + t for t in texts) + bytes(wb._PAD)
        buf = np.frombuffer(payload, dtype=np.uint8)
        tags = np.array([payload.index(b"\x82\x01" + bytes((len(t),)) + t) for t in texts])
        lens = np.array([len(t) for t in texts])
        got = wb._digits(buf, tags, lens)
        if all(t.isdigit() and len(t) <= 15 for t in texts):
            assert got.tolist() == wb._parse(buf, tags, lens).astype(np.int64).tolist() == [int(t) for t in texts]
        else:
            assert got is None

    rng = np.random.default_rng(3)
    mix = rng.integers(0, 50, 200_000).astype(np.uint64) * np.uint64(wb._MIX)
    for prefix in (7, 1 << 16):
        first, inv = wb._unique(mix) if prefix == 1 << 16 else _with_prefix(prefix, mix)
        _u, first_ref, inv_ref = np.unique(mix, return_index=True, return_inverse=True)
        assert first.tolist() == first_ref.tolist() and inv.tolist() == inv_ref.reshape(-1).tolist()

    texts = [b"-0", b"0", b"-0.0", b"1e5", b"1E-3", b"0.1", b"4.9e-324", b"1.7976931348623157e308",
             b"0.30000000000000004", b"123456789012345678901234", b"-17", repr(math.pi).encode()]
    texts += [repr(float(x)).encode() for x in rng.normal(0, 1e3, 2000)]
    for extra in ([], [b"NaN"], [b"1e400"], [b"-Infinity"]):
        vals = texts + extra
        width = max(map(len, vals))
        block = np.frombuffer(b"".join(v.ljust(width) for v in vals), dtype=np.uint8).reshape(len(vals), width)
        ref = block.view(f"S{width}").reshape(-1).astype(np.float64)
        got = wb._json_array(block)
        if extra:
            assert got is None  # orjson refuses it: numpy parses the batch
        else:
            assert [repr(v) for v in got.tolist()] == [repr(v) for v in ref.tolist()]


def _with_prefix(prefix: int, mix: Any) -> Any:
    saved = wb.UNIQUE_PREFIX
    wb.UNIQUE_PREFIX = prefix
    try:
        return wb._unique(mix)
    finally:
        wb.UNIQUE_PREFIX = saved


def test_block_walk_finds_the_chunks_the_chunk_walk_finds(wandb_runs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block walked at once against the chunk-by-chunk walk, on a real log and on damaged copies:
    cut anywhere (a torn chunk), bytes flipped (a wrong CRC, a length past the block), a block's tail
    zeroed (padding), a zero-length chunk with a CRC: the same records, up to the same last good one."""
    import random

    data = next(wandb_runs[0].glob("run-*.wandb")).read_bytes()
    assert len(data) > 8 * wb.BLOCK
    rnd = random.Random(11)
    copies = [data, data[:wb.BLOCK * 3], data[:wb.BLOCK * 3 + 5]]
    copies += [data[:rnd.randrange(len(data))] for _ in range(12)]
    for _ in range(25):
        damaged = bytearray(data)
        at = rnd.randrange(wb.HEADER_LEN, len(data))
        damaged[at] ^= 1 << rnd.randrange(8)
        copies.append(bytes(damaged))
    zeroed = bytearray(data)
    zeroed[5 * wb.BLOCK - 300:5 * wb.BLOCK] = bytes(300)
    copies.append(bytes(zeroed))
    header = bytearray(data)
    b = 6 * wb.BLOCK  # the first chunk of a block: an empty chunk of type 0 whose CRC is right, then the rest
    header[b:b + 7] = wb._KIND_CRC[0].to_bytes(4, "little") + b"\0\0\0"
    copies.append(bytes(header))
    walked = 0
    for copy in copies:
        got = {}
        for by_block, hook in ((True, None), (True, wb._history_fast), (False, None)):
            monkeypatch.setattr(wb, "BLOCK_WALK", by_block)
            hist, rest = wb._split(copy, fast=hook)  # (no hook: the history as places in the log)
            got[by_block, hook] = ([bytes(h) for h in hist], [bytes(r) for r in rest])
        assert got[True, None] == got[True, wb._history_fast] == got[False, None]
        walked += wb._chunks(copy) is not None
    assert walked >= len(copies) // 2  # most damage stays inside its block: the block walk answers itself


def _log_of_chunks(chunks: list[tuple[int, bytes]]) -> bytes:
    """A transaction log of the given ``(type, bytes)`` chunks, each kept inside its block (a block's tail
    too short for a chunk header, or for the next chunk, is zero padding)."""
    out = bytearray(wb.HEADER + b"\x00\x00\x00")
    for kind, body in chunks:
        room = wb.BLOCK - len(out) % wb.BLOCK
        if room < wb.CHUNK_HEADER + len(body):
            out += bytes(room)
        crc = wb.zlib.crc32(body, wb._KIND_CRC[kind])
        out += crc.to_bytes(4, "little") + len(body).to_bytes(2, "little") + bytes((kind,)) + body
    return bytes(out)


def test_spread_records_are_grouped_as_the_chunk_walk_groups_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records spread over chunks, grouped by numpy, against the chunk walk's pending list: whole
    ``FIRST MIDDLE* LAST`` runs, and odd ones (a LAST or MIDDLE with no FIRST, a FIRST never closed, a
    FIRST after a FIRST, pieces shorter than a record's number), history and summary records mixed."""
    import random

    rnd = random.Random(7)
    for trial in range(40):
        chunks = []
        for num in range(1, 120):
            field = rnd.choice([0x12, 0x12, 0x1A, 0x22])
            body = _history_payload(num * rnd.choice([1, 127, 3000]), [(b"_step", str(num).encode()),
                                    (b"k" * rnd.randrange(1, 30), b"0.5")] * rnd.randrange(1, 40))
            at = 1 + next(i for i in range(1, 8) if body[i] < 0x80)  # the history field's tag, after the number
            assert body[at] == 0x12
            body = body[:at] + bytes((field,)) + body[at + 1:]
            cuts = sorted(rnd.sample(range(1, len(body)), min(len(body) - 1, rnd.choice([0, 0, 1, 1, 2, 3]))))
            pieces = [body[x:y] for x, y in zip([0, *cuts], [*cuts, len(body)])]
            if len(pieces) == 1 and rnd.random() < 0.9:
                chunks.append((wb.FULL, pieces[0]))
                continue
            kinds = [wb.FIRST] + [wb.MIDDLE] * (len(pieces) - 2) + [wb.LAST] if len(pieces) > 1 else [wb.LAST]
            if rnd.random() < 0.15:  # an odd run: a piece dropped or its type changed
                k = rnd.randrange(len(kinds))
                if rnd.random() < 0.5:
                    del kinds[k], pieces[k]
                else:
                    kinds[k] = rnd.choice([wb.FIRST, wb.MIDDLE, wb.LAST])
            chunks += list(zip(kinds, pieces))
        data = _log_of_chunks(chunks)
        assert wb._chunks(data) is not None
        got = {}
        for by_block, hook in ((True, None), (True, wb._history_fast), (False, None)):
            monkeypatch.setattr(wb, "BLOCK_WALK", by_block)
            hist, rest = wb._split(data, fast=hook)
            got[by_block, hook] = ([bytes(h) for h in hist], [bytes(r) for r in rest])
            if by_block and hook is None:  # its batches: slices, their lengths and joined bytes
                for lo, hi in ((0, 7), (5, 40), (30, len(hist))):
                    part = hist[lo:hi]
                    assert [bytes(h) for h in part] == got[by_block, hook][0][lo:hi]
                    assert part.lengths().tolist() == [len(h) for h in got[by_block, hook][0][lo:hi]]
                    assert part.joined(b"end") == b"".join(got[by_block, hook][0][lo:hi]) + b"end"
        assert got[True, None] == got[True, wb._history_fast] == got[False, None], trial
        assert len(got[True, None][0]) > 20


def _varint(v: int) -> bytes:
    out = b""
    while True:
        out += bytes(((v & 0x7F) | (0x80 if v >> 7 else 0),))
        v >>= 7
        if not v:
            return out


def test_a_step_field_holding_82_01_is_read_in_bulk_as_protobuf_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """History records end with their step field (``12 L 08 <step>``); a step of 130 (or 16,640 ...) is the
    varint ``82 01``, the value tag's bytes. Such a record is still read in bulk (only a record number
    holding them sends its record to protobuf), and reads as wandb's Record parse reads it."""
    pytest.importorskip("wandb")
    from rlmedic.tools.runs.curves import Run

    steps = [*range(1, 200), *range(16_630, 16_800), 2_113_664]
    chunks = []
    for num, step in enumerate(steps, start=1):
        body = b"".join(b"\n" + bytes((len(k) + len(v) + 5,)) + b"\x12" + bytes((len(k),)) + k + b"\x82\x01" +
                        bytes((len(v),)) + v for k, v in ((b"_step", str(step).encode()),
                                                          (b"actor/entropy", repr(step / 7).encode())))
        body += b"\x12" + _varint(len(_varint(step)) + 1) + b"\x08" + _varint(step)
        chunks.append((wb.FULL, b"\x08" + _varint(num) + b"\x12" + _varint(len(body)) + body))
    data = _log_of_chunks(chunks)
    strays = [step for step in steps if b"\x82\x01" in _varint(step)]
    assert len(strays) > 100
    misfits: list[int] = []
    bulk = wb._history_bulk

    def spy(hist: Any, keep: Any) -> Any:
        out = bulk(hist, keep)
        misfits.append(len(out[3]))
        return out

    with monkeypatch.context() as m:
        m.setattr(wb, "_history_bulk", spy)
        fast = Run(path="a", source="wandb", name="a")
        wb.read_transaction_log(data, fast)
    assert misfits == [1]  # record 130: its number holds the bytes
    with monkeypatch.context() as m:
        m.setattr(wb, "_history_fast", lambda payload: None)
        slow = Run(path="b", source="wandb", name="b")
        wb.read_transaction_log(data, slow)
    curve, ref = fast.curves["actor/entropy"], slow.curves["actor/entropy"]
    assert curve.total == len(steps) and curve.raw is None
    assert curve.steps.tolist() == ref.steps.tolist() == steps
    assert [repr(v) for v in curve.values.tolist()] == [repr(v) for v in ref.values.tolist()]


def test_a_flipped_byte_in_a_value_ends_the_read_before_it_with_isal_and_zlib(wandb_runs: list[Path],
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunks' CRC-32 (ISA-L's where isal is installed) is zlib's; a history value with one bit flipped
    is never read as a number: the read (of the mapped file) stops at the record before it, as with zlib."""
    import random
    import zlib

    rnd = random.Random(5)
    for size in (0, 1, 7, 100, 32_768, 100_003):
        blob = rnd.randbytes(size)
        for start in (0, 1, 0xFFFFFFFF):
            assert wb._crc32(blob, start) == zlib.crc32(blob, start)
    folder = wandb_runs[0]
    log = next(folder.glob("run-*.wandb"))
    data = bytearray(log.read_bytes())
    at = data.index(b"critic/score/mean\x82\x01", len(data) // 2) + len(b"critic/score/mean\x82\x01") + 2
    data[at] ^= 0x01  # a digit of the value: still a number, a wrong one, were the CRC not checked
    damaged = folder.parent / "damaged"
    damaged.mkdir()
    for f in folder.iterdir():
        if f.is_file() and f != log:
            (damaged / f.name).write_bytes(f.read_bytes())
    (damaged / log.name).write_bytes(bytes(data))
    vocab = builtin_vocabulary()
    whole = wb.read_run(folder, keep=vocab.known).curves["critic/score/mean"]
    got = []
    for crc in (wb._crc32, zlib.crc32):
        monkeypatch.setattr(wb, "_crc32", crc)
        got.append(wb.read_run(damaged, keep=vocab.known).curves["critic/score/mean"])
    cut, same = got
    assert cut.raw is None and whole.raw is not None  # the whole run is bucketed: its raw points compared
    assert cut.total == same.total and 0 < cut.total < whole.total
    steps, values = whole.raw
    assert cut.steps.tolist() == steps[:cut.total].tolist() == same.steps.tolist()
    assert [repr(v) for v in cut.values.tolist()] == [repr(v) for v in values[:cut.total].tolist()]
