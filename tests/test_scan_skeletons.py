"""The scanner's verdict cache: a line that only looks like an error once its numbers are gone is judged once.

A stats table that names ``timeperf/update_weights`` on every step holds a weight-update
signature's literal thousands of times; each such line is judged by its skeleton (digits
deleted). These tests check the cache never hides a real hit that shares a skeleton with lines
judged before, and that lines it refuses are not parsed again.
"""

from __future__ import annotations

from pathlib import Path

from rlmedic.confine import Confinement
from rlmedic.tools.logs import scan as logscan
from rlmedic.tools.logs.diagnose import diagnose
from rlmedic.tools.logs.signatures import builtin_catalog

ROW = "(TrainWorker pid=7, ip=10.0.0.5) │ timeperf/update_weights │  {v:.4e} │\n"
HIT = "(TrainWorker pid=7, ip=10.0.0.5) ERROR POST /update_weights_from_tensor status={code}\n"


def _log(tmp_path: Path, rows: int, codes: list[int]) -> Path:
    parts = [ROW.format(v=i / 7) for i in range(rows)]
    parts += [HIT.format(code=c) for c in codes]
    log = tmp_path / "train.log"
    log.write_text("".join(parts))
    return log


def test_rows_sharing_a_literal_are_judged_by_skeleton_and_a_real_hit_still_counts(tmp_path: Path) -> None:
    # the 200 and the 400 share a skeleton: the first one's miss must not hide the second one's hit
    log = _log(tmp_path, 3000, [200, 400])
    d = diagnose([log], confinement=Confinement([tmp_path]))
    hits = [f for f in d.findings if f.id == "weight-update-rejected"]
    assert hits and hits[0].line == 3002, [(f.id, f.line) for f in d.findings]


def test_the_cache_refuses_rows_without_running_a_regex(tmp_path: Path, monkeypatch) -> None:
    log = _log(tmp_path, 2000, [])
    calls = []
    sig = builtin_catalog().by_id["weight-update-rejected"]
    real = type(sig).match
    monkeypatch.setattr(type(sig), "match", lambda self, line: calls.append(line) or real(self, line))
    scanner = logscan.Scanner(builtin_catalog())
    sources, _ = logscan.expand_paths([log], Confinement([tmp_path]))
    result = scanner.scan(sources, Confinement([tmp_path]))
    assert not result.groups
    assert not calls  # every row refused by its skeleton
    assert 0 < len(scanner._skeletons) <= 2


def test_a_scanner_without_a_metric_collector_reads_stats_lines_as_lines(tmp_path: Path) -> None:
    """A line that is a stats line and a signature candidate at once, scanned with no collector
    (``Scanner(catalog)``): the signature is still matched, the metric part dropped (it raised KeyError)."""
    log = tmp_path / "train.log"
    log.write_text("step:3 - actor/pg_loss:0.12 - critic/score/mean:0.5\n"
                   "step:4 - actor/pg_loss:0.11 - torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    scanner = logscan.Scanner(builtin_catalog())
    sources, _ = logscan.expand_paths([log], Confinement([tmp_path]))
    result = scanner.scan(sources, Confinement([tmp_path]))
    assert {sig for sig, *_ in result.groups} == {"cuda-oom"}
