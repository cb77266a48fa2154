"""Issue 31: a log of a million key=value stats lines costs bounded metric work, and a NaN is still seen.

Before: a gzip of 64 MiB of key=value lines (2.7 MB compressed) took 45-66 s in ``diagnose``, nearly all
of it parsing points into series that keep only their newest points. Past ``METRIC_LINES_FULL`` stats
lines a file feeds the collector a shrinking share of each region, and every line holding nan or inf
(``tests/test_scan_metric_sampling.py`` checks the shares).
"""

from __future__ import annotations

import gzip
from pathlib import Path

from rlmedic.confine import Confinement
from rlmedic.tools.logs import scan as logscan
from rlmedic.tools.logs.diagnose import diagnose
from rlmedic.tools.logs.signatures import builtin_catalog

LINES = 200_000
NAN_AT = 180_000


def _log(path: Path) -> Path:
    rows = (f"step={j} loss={'nan' if j == NAN_AT else '0.5'} reward=0.25 grad_norm=1.0 lr=1e-06\n" for j in range(LINES))
    path.write_bytes(gzip.compress("".join(rows).encode(), 6))
    return path


def test_stats_lines_past_the_budget_are_thinned_but_a_nan_is_always_fed(tmp_path: Path) -> None:
    log = _log(tmp_path / "kv.log.gz")
    fed: list[tuple[int, str]] = []
    confinement = Confinement.for_paths([log])
    sources, _skipped = logscan.expand_paths([str(log)], confinement)
    scanner = logscan.Scanner(builtin_catalog(), on_metric=lambda _i, n, t: fed.append((n, t)))
    scanner.scan(sources, confinement)
    assert logscan.METRIC_LINES_FULL < len(fed) <= LINES // 2, len(fed)
    assert [n for n, t in fed[: logscan.METRIC_LINES_FULL]] == list(range(1, logscan.METRIC_LINES_FULL + 1))
    assert any("loss=nan" in t for _n, t in fed)


def test_diagnose_still_reports_the_nan_past_the_budget(tmp_path: Path) -> None:
    log = _log(tmp_path / "kv.log.gz")
    result = diagnose([str(log)], confinement=Confinement.for_paths([log]))
    text = str(result.to_dict()).lower()
    assert "nan" in text and str(NAN_AT) in text
