"""Issue 30: the scanner's fast path for stats lines gives exactly what the line-by-line path gave.

The old path (commit 49b0f3a: every candidate line's ids built as a set, every stats line fed
through its own call) lives on in ``tests/scan_reference.py`` as an oracle. Each input is
diagnosed twice, once with it and once as shipped; findings, root, stats, every metric series
point by point, steps, framework counts and the scan's hit groups must be equal. Inputs: every
log fixture under ``tests/`` (one file at a time, and the rank folders whole), the logs pasted into
the real cases of ``tests/data``, and generated mixed logs of every shape of
``benchmarks/mixedlogs.py`` (two seeds, plain and gzipped), all below the metric budgets (past them the
scan reads a share of the metrics on purpose: ``tests/test_scan_metric_sampling.py``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from rlmedic.confine import Confinement
from rlmedic.tools.logs import diagnose as dmod
from rlmedic.tools.logs import scan as logscan

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS.parent / "benchmarks"))

import mixedlogs  # noqa: E402
from scan_reference import ReferenceCollector, ReferenceScanner  # noqa: E402

LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".gz"}
FIXTURE_FILES = sorted(p for p in (TESTS / "fixtures").rglob("*") if p.is_file() and p.suffix in LOG_SUFFIXES)
FOLDERS = [TESTS / "fixtures" / "logs" / "multirank", TESTS / "fixtures" / "logs" / "causal_ranks"]
CASE_FILES = sorted([*(TESTS / "data").glob("*.jsonl"), *(TESTS / "data" / "known_cases").glob("*.jsonl")])


def _state(collector: Any, result: Any) -> dict[str, Any]:
    """What the scan and the collector learned, as comparable plain data."""
    return {
        "series": {f"{i}|{k}": (s.kind, s.dropped, [(p.step, repr(p.value), p.line) for p in s.points])
                   for (i, k), s in collector.series.items()},
        "series_order": list(collector.series),
        "steps": (collector.current_step, collector.last_step, collector.total_steps, collector.step_lines),
        "counters": dict(collector._counters),
        "keys": ({i: sorted(v) for i, v in collector._file_keys.items()}, sorted(collector._keys_seen), collector.frameworks),
        "groups": {k: (g.count, [(h.line, h.text, h.phase, str(h.ts), h.numbers, h.before, h.after) for h in g.detailed],
                       (g.last.line, g.last.text, str(g.last.ts), g.last.numbers) if g.last else None)
                   for k, g in result.groups.items()},
        "files": [(f.name, f.lines, f.bytes_read, f.frameworks, f.tail, str(f.last_ts), f.partial) for f in result.files],
    }


def _run(monkeypatch: pytest.MonkeyPatch, reference: bool, call: Any, engine: str | None = None) -> dict[str, Any]:
    """``call()`` (a diagnosis) with the old or the shipped scanner and collector; its result and state."""
    seen: dict[str, Any] = {}
    scanner_cls = ReferenceScanner if reference else logscan.Scanner
    collector_cls = ReferenceCollector if reference else dmod.MetricCollector

    class Collector(collector_cls):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            seen["collector"] = self

    class Scanner(scanner_cls):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "engine": engine or kwargs.get("engine")})

        def scan(self, *args: Any, **kwargs: Any) -> Any:
            seen["result"] = super().scan(*args, **kwargs)
            return seen["result"]

    with monkeypatch.context() as m:
        m.setattr(dmod, "MetricCollector", Collector)
        m.setattr(dmod, "Scanner", Scanner)
        try:
            diagnosis = call()
        except Exception as exc:  # noqa: BLE001 - the same refusal both ways is equality too
            return {"error": f"{type(exc).__name__}: {exc}"}
    out = diagnosis.to_dict()
    for volatile in ("seconds", "mb_per_s"):
        out["stats"].pop(volatile, None)
    return {"diagnosis": json.loads(json.dumps(out, default=repr)), "state": _state(seen["collector"], seen["result"])}


def _assert_same(monkeypatch: pytest.MonkeyPatch, call: Any, label: str, engine: str | None = None) -> None:
    old = _run(monkeypatch, True, call, engine)
    new = _run(monkeypatch, False, call, engine)
    for part in ("error", "diagnosis", "state"):
        if old.get(part) != new.get(part):
            detail = [k for k in (old.get(part) or {}) if (old[part] or {}).get(k) != (new.get(part) or {}).get(k)] \
                if isinstance(old.get(part), dict) else []
            pytest.fail(f"{label}: {part} differs from the line-by-line path ({', '.join(map(str, detail)) or 'all'})")


def _diagnose_path(path: Path) -> Any:
    return lambda: dmod.diagnose([str(path)], confinement=Confinement.for_paths([path]))


@pytest.mark.parametrize("path", FIXTURE_FILES + FOLDERS, ids=lambda p: str(p.relative_to(TESTS)))
def test_every_log_fixture_diagnoses_as_before(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    _assert_same(monkeypatch, _diagnose_path(path), str(path))


@pytest.mark.parametrize("cases", CASE_FILES, ids=lambda p: p.name)
def test_the_logs_of_real_cases_diagnose_as_before(monkeypatch: pytest.MonkeyPatch, cases: Path) -> None:
    rows = [json.loads(line) for line in cases.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [r.get("user_input") or "\n".join(r.get("traceback") or []) for r in rows]
    assert any(texts)
    for n, text in enumerate(t for t in texts if t):
        _assert_same(monkeypatch, lambda text=text: dmod.diagnose_text(text, name=f"case{n}"), f"{cases.name}#{n}")


def logscan_budget_bytes() -> int:
    """A size of ``kv`` log (a stats line every ~50 bytes) that stays under the scanner's stats-line budget."""
    from rlmedic.tools.logs import scan

    return scan.METRIC_LINES_FULL * 35


@pytest.mark.parametrize("shape", mixedlogs.SHAPES)
@pytest.mark.parametrize("seed", [1, 2])
def test_generated_mixed_logs_diagnose_as_before(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shape: str, seed: int) -> None:
    # under the stats-line budget (kv: every line is one, ~50 bytes each)
    size = logscan_budget_bytes() if shape == "kv" else 700_000
    path = mixedlogs.write(tmp_path / f"{shape}.log{'.gz' if seed == 2 else ''}", shape, size, seed)
    _assert_same(monkeypatch, _diagnose_path(path), f"{shape} seed {seed}")


def test_nan_and_inf_values_in_tables_and_stats_lines_diagnose_as_before(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    path = mixedlogs.write(tmp_path / "dense.log", "areal-dense", 500_000, 8)
    lines = path.read_text(encoding="utf-8").split("\n")
    rows = [i for i, line in enumerate(lines) if "grpo_actor/update/grad_norm" in line]
    stats = [i for i, line in enumerate(lines) if "avg reward=" in line]
    lines[rows[len(rows) // 2]] = lines[rows[len(rows) // 2]].replace("│  ", "│ nan", 2)
    lines[stats[len(stats) // 3]] = lines[stats[len(stats) // 3]].replace("avg reward=", "avg reward=-inf ", 1)
    lines[stats[len(stats) // 2]] += " loss=NaN"
    path.write_text("\n".join(lines), encoding="utf-8")
    _assert_same(monkeypatch, _diagnose_path(path), "nan and inf values")


@pytest.mark.parametrize("shape", ["areal-mixed", "kv", "slime"])
def test_the_pure_python_engine_gives_the_same_as_the_old_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             shape: str) -> None:
    path = mixedlogs.write(tmp_path / f"{shape}.log", shape, logscan_budget_bytes() if shape == "kv" else 200_000, 3)
    _assert_same(monkeypatch, _diagnose_path(path), f"{shape}, python engine", engine="python")


def test_a_small_chunk_puts_lines_and_tables_across_region_ends(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = mixedlogs.write(tmp_path / "dense.log", "areal-dense", 900_000, 4)
    monkeypatch.setattr(logscan, "CHUNK", 1)  # the smallest buffer the scanner allows: many region ends
    original = logscan.Scanner.__init__

    def small(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **{**kwargs, "chunk": 1})

    monkeypatch.setattr(logscan.Scanner, "__init__", small)
    _assert_same(monkeypatch, _diagnose_path(path), "areal-dense in small regions")


# -- the shipped scanner's own shortcuts against its general path ------------------------------------
# Both shortcuts below change no result; each test runs the shipped scanner with the shortcut and without
# it on logs where it is taken, and checks that it was taken.


def _assert_same_shipped(monkeypatch: pytest.MonkeyPatch, call: Any, label: str, without: Any) -> None:
    """The shipped scanner's result as it is and with ``without(monkeypatch)`` applied (a shortcut off)."""
    shipped = _run(monkeypatch, False, call)
    with monkeypatch.context() as m:
        without(m)
        general = _run(monkeypatch, False, call)
    for part in ("error", "diagnosis", "state"):
        assert shipped.get(part) == general.get(part), f"{label}: {part} differs without the shortcut"


def test_stringzilla_counts_newlines_as_bytearray_does() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    assert logscan.count_newlines is not bytearray.count, "stringzilla (a dependency) should count the newlines"

    @settings(max_examples=400, deadline=None)
    @given(st.binary(max_size=300).map(lambda b: b.replace(b"x", b"\n")), st.integers(0, 310), st.integers(0, 310))
    def same(data: bytes, start: int, end: int) -> None:
        buf = bytearray(data)
        assert logscan.count_newlines(buf, b"\n", start, end) == buf.count(b"\n", start, end)

    same()
    big = bytearray(b"ab\n" * 400_000 + b"\r\n\n")  # past any SIMD block, ragged ends
    for start, end in ((0, len(big)), (1, len(big) - 1), (5, 1_000_003), (len(big), len(big)), (9, 3)):
        assert logscan.count_newlines(big, b"\n", start, end) == big.count(b"\n", start, end)


@pytest.mark.parametrize("shape", ["areal-mixed", "areal-dense", "verl"])
def test_the_plain_newline_count_gives_the_same_diagnosis(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         shape: str) -> None:
    path = mixedlogs.write(tmp_path / f"{shape}.log", shape, 400_000, 5)
    _assert_same_shipped(monkeypatch, _diagnose_path(path), shape,
                         lambda m: m.setattr(logscan, "count_newlines", bytearray.count))


@pytest.mark.parametrize("shape,chunk", [("areal-dense", 600_000), ("areal-mixed", 600_000), ("areal-dense", 1)])
def test_past_the_budgets_a_step_lines_shortcut_gives_what_the_general_path_gives(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shape: str, chunk: int
) -> None:
    pytest.importorskip("hyperscan", reason="the hyperscan extra is not installed")
    # small budgets and regions: a region starting past the budgets is read for signatures only but for its
    # last part, and a step line there takes the shortcut (chunk 1: the smallest regions, many ends)
    monkeypatch.setattr(logscan, "METRIC_LINES_FULL", 200)
    monkeypatch.setattr(logscan, "METRIC_TABLES_FULL", 10)
    monkeypatch.setattr(logscan, "METRIC_TAIL_FULL", 32 << 10)
    original = logscan.Scanner.__init__
    monkeypatch.setattr(logscan.Scanner, "__init__", lambda self, *a, **k: original(self, *a, **{**k, "chunk": chunk}))
    path = mixedlogs.write(tmp_path / f"{shape}.log", shape, 3 << 20, 6)
    lines = path.read_text(encoding="utf-8").split("\n")
    steps = [i for i, line in enumerate(lines) if "Train step" in line]
    for k in steps[5::9]:
        lines[k] += " loss=nan"  # a step line with a second report: the general path's
    for k in steps[7::13]:
        lines[k] = "\x1b[32m" + lines[k].replace("/", "\x1b[0m/", 1)  # coloured: the general path's
    path.write_text("\n".join(lines), encoding="utf-8")
    taken = []  # the shortcut reads a step line's numbers with match(), the general path with search()
    numbers = logscan._STEP_NUMBERS

    class Counted:
        def match(self, *args: Any) -> Any:
            taken.append(args[1])
            return numbers.match(*args)

        def search(self, *args: Any) -> Any:
            return numbers.search(*args)

    monkeypatch.setattr(logscan, "_STEP_NUMBERS", Counted())
    make = logscan.make_engine

    def off(m: pytest.MonkeyPatch) -> None:
        m.setattr(logscan, "make_engine", lambda *a, **k: setattr(e := make(*a, **k), "step_index", -1) or e)

    _assert_same_shipped(monkeypatch, _diagnose_path(path), f"{shape} past the budgets", off)
    assert len(taken) > len(steps) // 2, "most step lines should take the shortcut as shipped"


def _warning_log(path: Path) -> Path:
    """An AReaL log where every fifth line is a KV-cache retraction of SGLang's, in the variants a real one
    holds: coloured, behind a carriage return, deduplicated by Ray, cut short (the literal without the
    rest of the pattern), next to another signature's text, far longer than a shown line."""
    base = mixedlogs.write(path.with_suffix(".base"), "areal-mixed", 500_000, 9).read_text(encoding="utf-8").split("\n")
    warn = "[2025-11-22 10:00:{s:02d}] [TP{tp}] KV cache pool is full. Retract requests. #retracted_reqs: {k}, " \
           "#new_token_ratio: 0.{k:04d} -> 1.0000"
    variants = [
        lambda t: t,
        lambda t: f"\x1b[33m{t}\x1b[0m",
        lambda t: f"decode 12%\r{t}",
        lambda t: f"(SGLangServer pid=77) {t} [repeated 4x across cluster]",
        lambda t: t.split(". Retract")[0] + " for now",
        lambda t: f"{t} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        lambda t: t + " " + "x" * 3000,
    ]
    out = []
    for n, line in enumerate(base):
        out.append(line)
        if n % 5 == 0:
            text = warn.format(s=n % 60, tp=n % 8, k=n % 9000)
            out.append(variants[(n // 5) % 23 % len(variants)](text) if (n // 5) % 3 == 0 else text)
    out.append(variants[1](warn.format(s=1, tp=1, k=1)))  # the last one is kept as it was cleaned
    path.write_text("\n".join(out), encoding="utf-8")
    return path


def test_a_warning_on_every_fifth_line_diagnoses_as_before(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _warning_log(tmp_path / "warnings.log")
    _assert_same(monkeypatch, _diagnose_path(path), "warnings")
    _assert_same(monkeypatch, _diagnose_path(path), "warnings, python engine", engine="python")


@pytest.mark.parametrize("chunk", [None, 1])
def test_a_signature_counted_in_the_region_loop_counts_what_the_general_path_counts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, chunk: int | None
) -> None:
    path = _warning_log(tmp_path / "warnings.log")
    if chunk:
        original_init = logscan.Scanner.__init__
        monkeypatch.setattr(logscan.Scanner, "__init__",
                            lambda self, *a, **k: original_init(self, *a, **{**k, "chunk": chunk}))
    calls = []
    plain = logscan._plain_match

    def counting(sig: Any) -> Any:
        match = plain(sig)
        return lambda line: calls.append(sig.id) or match(line)

    monkeypatch.setattr(logscan, "_plain_match", counting)
    init = logscan.Scanner.__init__

    def without(m: pytest.MonkeyPatch) -> None:
        def no_shortcut(self: Any, *a: Any, **k: Any) -> None:
            init(self, *a, **k)
            self._own_literal = {}  # no signature is ever counted by the region loop

        m.setattr(logscan.Scanner, "__init__", no_shortcut)

    _assert_same_shipped(monkeypatch, _diagnose_path(path), "warnings", without)
    lines = path.read_text(encoding="utf-8").count("KV cache pool is full")
    assert calls.count("sglang-kv-retract") > lines // 2, "most retractions should be counted by the region loop"


def test_a_file_that_grew_after_its_size_was_taken_is_read_whole(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    # a small file's buffer is its size: a log written on meanwhile (its size taken before) is read on
    path = mixedlogs.write(tmp_path / "dense.log", "areal-dense", 700_000, 3)
    right = _run(monkeypatch, False, _diagnose_path(path))
    opener = logscan._open_source

    def taken_early(*args: Any, **kwargs: Any) -> Any:
        stream, gz, size, mtime = opener(*args, **kwargs)
        return stream, gz, size // 5, mtime

    monkeypatch.setattr(logscan, "_open_source", taken_early)
    grown = _run(monkeypatch, False, _diagnose_path(path))
    assert grown["state"]["files"] == right["state"]["files"]  # every line counted, the same tail
    assert grown["diagnosis"] == right["diagnosis"]
    # read in more rounds, a table cut by a round's end gives its second half's points that half's first line
    values = {k: [(step, value) for step, value, _line in points] for k, (_kind, _dropped, points) in
              right["state"]["series"].items()}
    assert values == {k: [(step, value) for step, value, _line in points] for k, (_kind, _dropped, points) in
                      grown["state"]["series"].items()}
