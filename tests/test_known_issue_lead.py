"""A known issue leads an answer only when it is about the root, not about a cascade shown beside it.

A run that dies of a CUDA OOM on one rank logs NCCL watchdog timeouts on the others right after. A
known issue about watchdog timeouts (a checkpoint save that outlasts the process-group timeout) matches
those lines, which the root's excerpt shows as context; it must not be put ahead of the OOM.
"""

from __future__ import annotations

import sys
from pathlib import Path

from typer.testing import CliRunner

from rlmedic.ui.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import mixedlogs  # noqa: E402


def test_the_root_leads_when_a_known_issue_matches_only_its_cascade(tmp_path: Path) -> None:
    log = mixedlogs.write(tmp_path / "train.log", "verl", 300_000, 4)
    assert "Watchdog caught collective operation timeout" in log.read_text()
    out = CliRunner().invoke(app, ["ask", "why did my run die?", "-a", str(log), "--offline"])
    assert out.exit_code == 0, out.output
    first = out.stdout.splitlines()[0]
    assert first.startswith("From the log: CUDA out of memory"), out.stdout[:800]
    assert "Known issue" not in out.stdout.split("Evidence:", 1)[0]
