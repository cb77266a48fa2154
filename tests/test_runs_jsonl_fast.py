"""JSONL dumps read a block of lines at a time (``tools/runs/jsonl_fast.py``) give what the line-by-line
parse gives: the same keys, curves (steps, bucket means, peaks, raw points, first NaN), wall times and
findings, on dumps whose lines all share a layout (read in blocks) and on dumps with every way a line
can differ from the first (read line by line where it does: the same answer either way)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from rlmedic.tools.runs import dumps, jsonl_fast
from rlmedic.tools.runs.diagnose import diagnose_runs
from rlmedic.tools.runs.vocabulary import builtin_vocabulary

from runs_compare import assert_same_run
from runs_data import curves, rows

NOW = 2.0e9


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch, keep: bool = True) -> tuple[Any, Any, int]:
    """The dump read both ways, and how many lines the fast read took in blocks."""
    vocab = builtin_vocabulary()
    blocks: list[int] = []
    found = jsonl_fast.find_block

    def spy(*args: Any) -> Any:
        block = found(*args)
        if block is not None:
            blocks.append(block.rows)
        return block

    with monkeypatch.context() as m:
        m.setattr(dumps, "find_block", spy)
        fast = dumps.read_dump(path, vocab.step_keys, keep=vocab.known if keep else None)
    with monkeypatch.context() as m:
        m.setattr(dumps, "FAST_JSONL", False)
        slow = dumps.read_dump(path, vocab.step_keys, keep=vocab.known if keep else None)
    return fast, slow, sum(blocks)


def _row(step: int, rng: random.Random) -> dict[str, Any]:
    return {"step": step, "_timestamp": 1.7e9 + 30 * step + rng.random(), "actor/entropy": rng.random(),
            "critic/score/mean": rng.choice([0.0, -0.0, 1, rng.random() * 1e-7, rng.random() * 1e300]),
            "actor/grad_norm": rng.random() * 3, **{f"actor/extra_{i}": rng.random() for i in (1, 2, 10)},
            "perf/throughput": rng.randrange(10 ** 6)}


def _write(path: Path, lines: list[str], end: str = "\n") -> Path:
    path.write_text("\n".join(lines) + end)
    return path


def test_a_dump_of_one_layout_is_read_in_blocks_as_the_line_parse_reads_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dumps, "CHUNK_ROWS", 16)
    rng = random.Random(1)
    lines = [json.dumps(_row(step, rng)) for step in range(1, 101)]
    for name, text, end in (("plain", lines, "\n"), ("no newline", lines, ""),
                            ("torn", lines + ['{"step": 101, "_timestamp": 17'], ""),
                            ("compact", [json.dumps(json.loads(x), separators=(",", ":")) for x in lines], "\n")):
        fast, slow, in_blocks = _read_both(_write(tmp_path / f"{name}.jsonl", text, end), monkeypatch)
        assert_same_run(fast, slow)
        assert in_blocks == 100, name  # every line but a torn last one in blocks
    for keep in (True, False):
        fast, slow, _n = _read_both(tmp_path / "plain.jsonl", monkeypatch, keep=keep)
        assert_same_run(fast, slow)


# each returns the lines of a dump whose lines differ from the first somewhere (or not)
def _variants() -> dict[str, list[str]]:
    rng = random.Random(7)
    base = [_row(step, rng) for step in range(1, 121)]
    out: dict[str, list[str]] = {}

    def dumped(rows_: list[dict[str, Any]], **kw: Any) -> list[str]:
        return [json.dumps(r, **kw) for r in rows_]

    nan = [dict(r) for r in base]
    nan[30]["actor/entropy"] = math.nan  # a kept column: json then parses the block
    nan[31]["actor/extra_1"] = math.inf  # an unread one
    nan[40]["actor/grad_norm"] = -math.inf
    out["nan and infinity"] = dumped(nan)
    nulls = [dict(r) for r in base]
    for r in nulls[32:48]:
        r["actor/entropy"] = None  # a whole block of nulls, and some in others
    nulls[5]["actor/grad_norm"] = None
    nulls[64]["actor/entropy"] = None
    out["nulls"] = dumped(nulls)
    text = [dict(r) for r in base]
    text[20]["actor/grad_norm"] = "high"  # text in a kept column: that column is no curve in its group
    text[50]["actor/extra_2"] = "no comma"  # text in an unread one
    text[70]["actor/extra_2"] = "a, b"
    text[90]["actor/grad_norm"] = True
    text[91]["actor/extra_10"] = [1]
    out["text, booleans, arrays"] = dumped(text)
    nested = [dict(r) for r in base]
    nested[44]["actor"] = {"pg_loss": 0.5}
    nested[45]["actor/extra_1"] = {}
    out["nested objects"] = dumped(nested)
    swapped = [dict(r) for r in base]
    for i in (3, 17, 60):  # keys differing only in a digit, their order swapped: the values must not swap
        r = swapped[i]
        swapped[i] = {k: r[k] for k in ["step", "_timestamp", "actor/entropy", "critic/score/mean", "actor/grad_norm",
                                        "actor/extra_2", "actor/extra_1", "actor/extra_10", "perf/throughput"]}
    out["keys swapped"] = dumped(swapped)
    evals = [dict(r) for r in base]
    for r in evals[::10]:
        r["val-core/gsm8k/reward/mean@1"] = rng.random()  # every 10th row has one more key
    out["eval rows"] = dumped(evals)
    stray = dumped(base)
    stray.insert(33, "Traceback (most recent call last):")
    stray.insert(50, "")
    stray.insert(51, "   ")
    stray.insert(70, '   {"step": 5, "actor/entropy": 0.5}   ')
    out["stray lines"] = stray
    resumed = [dict(r, step=r["step"] if i < 60 else r["step"] - 40) for i, r in enumerate(base)]
    out["steps going back"] = dumped(resumed)
    big = [dict(r) for r in base]
    big[10]["perf/throughput"] = 123456789012345678901234567890  # past orjson's integers: json parses it
    big[11]["actor/grad_norm"] = -0
    out["big and signed integers"] = dumped(big)
    spaced = dumped(base)
    spaced[77] = spaced[77].replace(", ", ",  ", 1)
    spaced[78] = spaced[78].replace(": ", ":", 2)
    spaced[79] = spaced[79][:-1] + " }"
    spaced[80] = spaced[80].replace('"actor/entropy": ', '"actor/entropy": ', 1).replace(", \"critic", " , \"critic", 1)
    out["spacing"] = spaced
    odd_keys = [{**r, "a,b": 1.0, "quote\"d": 2.0, "ünï": 3.0} for r in base]
    out["keys with commas, quotes, non-ASCII"] = dumped(odd_keys)
    out["non-ASCII escaped"] = dumped([{**r, "ünï": 3.0} for r in base])
    out["non-ASCII raw"] = dumped([{**r, "ünï": 3.0} for r in base], ensure_ascii=False)
    dup = dumped(base)
    dup[90] = dup[90][:-1] + ', "actor/entropy": 9.0}'  # a key twice: the last one counts
    out["a key twice"] = dup
    long = [dict(r) for r in base]
    long[12]["actor/grad_norm"] = "x" * 100  # a value past MAX_TOKEN: its column cut out slice by slice
    long[13]["actor/grad_norm"] = 1.0e-300 * 3
    out["long values"] = dumped(long)
    no_step = [{k: v for k, v in r.items() if k != "step"} for r in base]
    no_step[10]["step"] = 4
    out["row numbers for steps"] = dumped(no_step)
    return out


@pytest.mark.parametrize("name", list(_variants()))
@pytest.mark.parametrize("chunk", [16, 20_000])
def test_lines_that_differ_give_what_the_line_parse_gives(name: str, chunk: int, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dumps, "CHUNK_ROWS", chunk)
    monkeypatch.setattr(jsonl_fast, "ROWS_AT_ONCE", 5)  # a line that differs in a later gather of separators
    lines = _variants()[name]
    for keep in (True, False):
        fast, slow, in_blocks = _read_both(_write(tmp_path / "metrics.jsonl", lines), monkeypatch, keep=keep)
        assert_same_run(fast, slow)
        if chunk == 16 and name not in _NO_BLOCKS:
            assert in_blocks >= 48, (name, in_blocks)  # the blocks with no odd line are still read as blocks


#: dumps where (nearly) every block of 16 lines has a line of another layout, or no line has a plain one
_NO_BLOCKS = ("eval rows", "keys with commas, quotes, non-ASCII", "non-ASCII escaped")


def test_crlf_and_lone_carriage_returns_are_left_to_the_line_parse(tmp_path: Path, monkeypatch) -> None:
    rng = random.Random(3)
    lines = [json.dumps(_row(step, rng)) for step in range(1, 41)]
    for name, text in (("crlf", "\r\n".join(lines) + "\r\n"), ("cr", "\n".join(lines[:20]) + "\r" + "\n".join(lines[20:]))):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(text.encode())
        fast, slow, in_blocks = _read_both(path, monkeypatch)
        assert_same_run(fast, slow)
        assert in_blocks == 0


def test_findings_are_the_same_both_ways(tmp_path: Path, monkeypatch) -> None:
    """A pathology at an odd step, in a dump long enough to be bucketed, with its lines in blocks."""
    monkeypatch.setattr(dumps, "CHUNK_ROWS", 500)
    for pathology, fw, onset in (("entropy_collapse", "verl", 1_733), ("nan", "verl", 2_111), ("zero_reward", "verl", 2_900)):
        series, _on = curves(pathology, fw, steps=4_100, seed=onset, onset=onset)
        path = tmp_path / f"{pathology}.jsonl"
        with open(path, "w") as fh:
            for step, data in rows(series):
                fh.write(json.dumps({"step": step, "_timestamp": 1.7e9 + step, **data,
                                     **{f"actor/extra_{i}": i * 0.5 for i in range(20)}}) + "\n")
        got = {}
        for fast in (True, False):
            monkeypatch.setattr(dumps, "FAST_JSONL", fast)
            d = diagnose_runs([path], now=NOW)
            got[fast] = [(f.id, f.summary, json.dumps(f.evidence, sort_keys=True, default=str)) for f in d.findings]
        assert got[True] == got[False] and got[True], pathology
        assert any(f"step {onset}" in f[1] for f in got[True]), (pathology, got[True])


@pytest.mark.parametrize("text", ["", "\n", '{"step": 1, "actor/entropy": 0.5}', '{"a": 1}\n', '{}\n{}\n',
                                  '{"step": 1}\n' * 3, '[1, 2]\n{"step": 2, "actor/entropy": 1}\n', '1\n2\n'])
def test_tiny_and_odd_dumps(text: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dumps, "CHUNK_ROWS", 2)
    path = tmp_path / "metrics.jsonl"
    path.write_text(text)
    fast, slow, _n = _read_both(path, monkeypatch, keep=False)
    assert_same_run(fast, slow)
