"""A stats line longer than what a finding shows is read whole by the metric collector.

verl prints a step's ~100 metrics on one line of several KB, with ``timing_s/`` and ``perf/`` last;
cutting it at the 2,000 characters a finding shows dropped its throughput and step times.
"""

from __future__ import annotations

import pytest

from rlmedic.tools.logs import scan as logscan
from rlmedic.tools.logs.diagnose import diagnose_texts


def _verl_log(steps: int = 40, drop_at: int = 25) -> str:
    lines = []
    for step in range(1, steps + 1):
        pairs = [f"actor/extra_metric_{j:03d}:{0.5 + j / 1000:.4f}" for j in range(150)]
        pairs += [f"critic/score/mean:{0.4 + step / 400:.4f}", "actor/pg_loss:0.012", "actor/grad_norm:0.31",
                  "actor/entropy:0.52", "actor/kl_loss:0.001", "response_length/mean:612.0",
                  "response_length/clip_ratio:0.02", f"timing_s/step:{12.0 + step / 100:.3f}",
                  f"perf/throughput:{2400.0 if step < drop_at else 600.0:.1f}"]
        lines.append(f"step:{step} - " + " - ".join(pairs))
    return "\n".join(lines) + "\n"


def test_the_throughput_at_the_end_of_a_long_verl_line_is_read() -> None:
    text = _verl_log()
    assert min(len(line) for line in text.splitlines()) > 2 * logscan.MAX_LINE_CHARS
    d = diagnose_texts([("train.log", text)])
    drop = [f for f in d.findings if f.id == "throughput-drop"]
    assert drop and drop[0].key == "perf/throughput" and drop[0].evidence["step"] == 25 and drop[0].line == 25


def test_cut_at_what_a_finding_shows_the_same_line_loses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logscan, "METRIC_LINE_CHARS", logscan.MAX_LINE_CHARS)
    d = diagnose_texts([("train.log", _verl_log())])
    assert not any(f.id == "throughput-drop" for f in d.findings)


def test_what_was_checked_names_every_kind_of_metric_read() -> None:
    """A healthy verl log's verdict lists every kind of series it read (throughput and step time come last
    alphabetically after eight others; the list used to stop at eight)."""
    d = diagnose_texts([("train.log", _verl_log(drop_at=10_000))])
    checked = next(c for c in d.stats["health"]["checked"] if c.startswith("metrics: "))
    kinds = set(checked.removeprefix("metrics: ").split(", "))
    assert len(kinds) > 8 and {"reward", "step_time", "throughput"} <= kinds, kinds
