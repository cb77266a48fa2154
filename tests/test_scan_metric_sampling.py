"""Issue 30: past its metric budgets a file is read for metrics in a shrinking share of each region.

Below :data:`~rlmedic.tools.logs.scan.METRIC_LINES_FULL` stats lines and
:data:`~rlmedic.tools.logs.scan.METRIC_TABLES_FULL` stats tables a file's metrics are all read
(``tests/test_scan_equivalence.py`` checks it against the old path). Past one, only the last part of
each region is read for that kind (1/4, then 1/16...), plus the file's last ``METRIC_TAIL_FULL`` bytes;
elsewhere the region is scanned for signatures, AReaL's step lines and lines holding a non-finite
value, which always reach the collector. The budgets here are made small so that a few megabytes
show them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from rlmedic.confine import Confinement
from rlmedic.tools.logs import scan as logscan
from rlmedic.tools.logs.metrics import MetricCollector
from rlmedic.tools.logs.signatures import builtin_catalog

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import mixedlogs  # noqa: E402

BUDGET = 2_000
CHUNK = 256 << 10


@pytest.fixture(autouse=True)
def _small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logscan, "METRIC_LINES_FULL", BUDGET)
    monkeypatch.setattr(logscan, "METRIC_TAIL_FULL", 64 << 10)


def _kv_log(path: Path, lines: int, nan_at: int) -> Path:
    rows = (f"step={j} loss={'nan' if j == nan_at else '0.5'} reward=0.25 grad_norm=1.0 lr=1e-06\n" for j in range(1, lines + 1))
    path.write_text("".join(rows), encoding="utf-8")
    return path


def _fed(path: Path, engine: str | None = None, collector: MetricCollector | None = None) -> list[tuple[int, str]]:
    """(line number, text) of every stats line handed to the collector (tables: their first line)."""
    fed: list[tuple[int, str]] = []

    def on_metric(i: int, n: int, text: str) -> None:
        fed.append((n, text))
        if collector is not None:
            collector.feed(i, n, text)

    def on_table(i: int, n: int, text: str) -> None:
        fed.append((n, text.split("\n", 1)[0]))
        if collector is not None:
            collector.feed_table(i, n, text)

    confinement = Confinement.for_paths([path])
    sources, _skipped = logscan.expand_paths([str(path)], confinement)
    scanner = logscan.Scanner(builtin_catalog(), on_metric=on_metric, on_table=on_table, engine=engine, chunk=CHUNK)
    scanner.scan(sources, confinement)
    return fed


def test_past_the_budget_a_bounded_share_is_read_and_a_nan_anywhere_still_is(tmp_path: Path) -> None:
    lines = 60_000  # about 3.4 MB, 13 regions of 256 KiB
    log = _kv_log(tmp_path / "kv.log", lines, nan_at=31_234)
    fed = _fed(log)
    numbers = [n for n, _t in fed]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert numbers[:BUDGET] == list(range(1, BUDGET + 1))  # the budget: every line, in order
    assert BUDGET < len(fed) < lines // 3, len(fed)
    assert any("loss=nan" in t for _n, t in fed)  # in the middle, far from any full part
    size, offset, tail = log.stat().st_size, 0, []  # the lines that start in the file's last METRIC_TAIL_FULL bytes
    for n, line in enumerate(log.read_bytes().splitlines(keepends=True), 1):
        if offset >= size - (64 << 10):
            tail.append(n)
        offset += len(line)
    assert len(tail) > 1000 and numbers[-len(tail):] == tail
    # each region past the budget is read in its last part: gaps between runs of consecutive lines
    runs = sum(1 for a, b in zip(numbers, numbers[1:]) if b != a + 1)
    assert runs >= 5


def test_both_engines_read_the_same_lines_past_the_budget(tmp_path: Path) -> None:
    pytest.importorskip("hyperscan", reason="the hyperscan extra is not installed")
    log = _kv_log(tmp_path / "kv.log", 40_000, nan_at=17_001)
    assert _fed(log, "hyperscan") == _fed(log, "python")


def test_every_areal_step_line_is_read_so_tables_past_the_budget_keep_their_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logscan, "METRIC_LINES_FULL", 300)
    monkeypatch.setattr(logscan, "METRIC_TABLES_FULL", 100)
    log = mixedlogs.write(tmp_path / "dense.log", "areal-dense", 3 << 20, 5)
    text = log.read_text(encoding="utf-8").splitlines()
    steps = [(n, int(m.group(1))) for n, line in enumerate(text, 1) if (m := re.search(r"Train step (\d+)/", line))]
    assert len(steps) > 300  # both budgets run out
    collector = MetricCollector(builtin_catalog().metrics)
    fed = _fed(log, collector=collector)
    fed_lines = {n for n, _t in fed}
    assert all(n in fed_lines for n, _s in steps)  # every step line, sampled part or not
    assert len(fed) < len([line for line in text if "reward" in line or "Train step" in line]) // 2
    reward = next(s for (_i, key), s in collector.series.items() if key == "grpo_actor/task_reward/avg")
    step_at = dict(steps)
    for point in reward.points:  # each table's points carry the step of the step line just above it
        above = max(n for n in step_at if n < point.line)
        assert point.step == step_at[above], point
    assert len(reward.points) < len(steps)  # tables outside the full parts are left out


def test_a_nan_in_a_table_row_outside_the_full_parts_reaches_the_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logscan, "METRIC_LINES_FULL", 300)
    monkeypatch.setattr(logscan, "METRIC_TABLES_FULL", 100)
    log = mixedlogs.write(tmp_path / "dense.log", "areal-dense", 3 << 20, 6)
    lines = log.read_text(encoding="utf-8").split("\n")
    fed = {n for n, _t in _fed(log)}
    rows = [i for i, line in enumerate(lines) if "grpo_actor/update/grad_norm" in line]
    # a row of a table read for signatures only (its first row, four above, was not handed over)
    target = next(i for i in rows[len(rows) // 2:] if i - 3 not in fed and i + 1 not in fed)
    cell = re.compile(r"(grpo_actor/update/grad_norm\s+│ )(.{11})")
    lines[target] = cell.sub(lambda m: m.group(1) + "nan".rjust(11), lines[target])  # same length: same regions
    log.write_text("\n".join(lines), encoding="utf-8")
    collector = MetricCollector(builtin_catalog().metrics)
    assert (target + 1, lines[target]) in _fed(log, collector=collector)  # the row alone, with its nan
    grad = next(s for (_i, key), s in collector.series.items() if key == "grpo_actor/update/grad_norm")
    assert [p.line for p in grad.points if p.value != p.value] == [target + 1]  # nan != nan


def test_tables_are_all_read_while_only_the_stats_line_budget_is_spent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logscan, "METRIC_LINES_FULL", 100)
    log = mixedlogs.write(tmp_path / "mixed.log", "areal-mixed", 3 << 20, 7)
    text = log.read_text(encoding="utf-8").splitlines()
    throughput = [n for n, line in enumerate(text, 1) if "rollout throughput" in line]
    tables = [n + 3 for n, line in enumerate(text, 1) if "Train step" in line]  # step line, Stats line, border, row
    assert len(throughput) > 1000 and len(tables) > 20
    fed = {n for n, _t in _fed(log)}
    assert all(n in fed for n in tables)
    assert 100 < len([n for n in throughput if n in fed]) < len(throughput) // 2


def test_a_file_under_the_budget_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logscan, "METRIC_LINES_FULL", 50_000)
    log = _kv_log(tmp_path / "kv.log", 30_000, nan_at=0)
    assert [n for n, _t in _fed(log)] == list(range(1, 30_001))


@pytest.mark.parametrize("name", ["zero_reward_only.log", "healthy_areal.log", "length_cap_areal.log"])
def test_tables_under_step_lines_are_found_where_stats_lines_are_not_reported(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """With the stats-line budget spent at once, AReaL's tables (one-row ones too) are found below their
    step lines by the sparse scan: the series are those of a scan without a budget."""
    log = Path(__file__).resolve().parent / "fixtures" / "logs" / "scenarios" / name

    def series(budget: int) -> dict[str, list[tuple[int, float, int]]]:
        monkeypatch.setattr(logscan, "METRIC_LINES_FULL", budget)
        monkeypatch.setattr(logscan, "METRIC_TAIL_FULL", 0)
        collector = MetricCollector(builtin_catalog().metrics)
        _fed(log, collector=collector)
        return {k: [(p.step, p.value, p.line) for p in s.points] for (_i, k), s in collector.series.items()}

    whole = series(1_000_000)
    assert any(len(points) > 5 for points in whole.values())
    assert series(1) == whole


def test_a_run_read_in_part_still_says_how_far_training_went_on(tmp_path: Path) -> None:
    """The steps after an error the run got past are counted by their numbers, not by the step lines read
    (most of them are skipped past the budget: counting those said a few hundred where 28,766 followed)."""
    from rlmedic.tools.logs.diagnose import diagnose

    log = _kv_log(tmp_path / "kv.log", 60_000, nan_at=31_234)
    assert len(_fed(log)) < 20_000  # read in part
    d = diagnose([str(log)], confinement=Confinement.for_paths([log]))
    nan = next(f for f in d.findings if f.id == "loss-nan")
    assert "went on for 28766 more steps, to step 60000" in nan.summary, nan.summary
