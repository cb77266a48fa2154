"""A healthy run gets no invented failure: clean endings, steady training, pasted excerpts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlmedic.confine import Confinement
from rlmedic.tools.logs.diagnose import diagnose, diagnose_text

LOGS = Path(__file__).parent / "fixtures" / "logs"
HEALTHY = [LOGS / "scenarios" / "healthy_slime.log", LOGS / "scenarios" / "healthy_areal.log",
           LOGS / "endings" / "slime_ray_succeeded.log", LOGS / "endings" / "verl_final_validation.log"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}


def _old_copy(src: Path, tmp: Path) -> Path:
    dst = tmp / src.name
    dst.write_bytes(src.read_bytes())
    old = time.time() - 3 * 86400
    os.utime(dst, (old, old))
    return dst


def _excerpt() -> str:
    """Steady slime training, cut before the completion line (a run still going, or a paste)."""
    lines = (LOGS / "scenarios" / "healthy_slime.log").read_text().splitlines()
    return "\n".join(lines[:40]) + "\n"


@pytest.mark.parametrize("src", HEALTHY, ids=[p.name for p in HEALTHY])
def test_a_finished_run_is_healthy(src: Path, tmp_path: Path) -> None:
    diag = diagnose([_old_copy(src, tmp_path)], confinement=Confinement([tmp_path]))
    assert diag.root_finding is None
    assert not [f for f in diag.findings if f.severity in ("critical", "error")]
    health = diag.stats["health"]
    assert health["verdict"] == "finished"
    assert any("error signatures" in c for c in health["checked"]) and any("last step" in c for c in health["checked"])


def test_a_pasted_excerpt_of_steady_training_is_not_a_failure() -> None:
    diag = diagnose_text(_excerpt())
    assert diag.root_finding is None
    assert diag.stats["health"]["verdict"] == "healthy"
    end = next(f for f in diag.findings if f.id == "probable-interruption")
    assert end.severity == "warning" and "nothing in it points at a failure" in end.summary
    assert not end.fixes and not end.card  # no preemption playbook for a run that may be fine


def test_an_old_file_cut_mid_run_still_says_it_ended_early(tmp_path: Path) -> None:
    path = tmp_path / "cut.log"
    path.write_text(_excerpt())
    old = time.time() - 3 * 86400
    os.utime(path, (old, old))
    diag = diagnose([path], confinement=Confinement([tmp_path]))
    assert diag.root_finding is not None and diag.root_finding.id == "probable-interruption"
    assert diag.stats["health"]["verdict"] == "failed"


def test_through_the_cli_from_stdin() -> None:
    out = subprocess.run([sys.executable, "-m", "rlmedic", "diagnose", "-"], input=_excerpt(), capture_output=True,
                         text=True, timeout=120, env=ENV, check=False)
    assert out.returncode == 0, out.stderr
    assert "No error found" in out.stdout and "Checked (healthy)" in out.stdout
    assert "ROOT CAUSE" not in out.stdout


def test_through_ask_offline_the_evidence_has_no_failure(tmp_path: Path) -> None:
    log = _old_copy(LOGS / "scenarios" / "healthy_slime.log", tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "rlmedic", "ask", "--offline", "--json", "did this run finish ok?", "--attach", str(log)],
        capture_output=True, text=True, timeout=180, env=ENV, cwd=tmp_path, check=False,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert not [f for f in data["findings"] if f.get("severity") in ("critical", "error")], data["findings"]
    assert not (data.get("root_cause") or {}).get("text"), data.get("root_cause")
