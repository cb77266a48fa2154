"""`rlmedic diagnose` / `rlmedic excerpt` from the terminal: JSON contract, exit codes, report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from conftest import FIXTURES
from rlmedic.ui.cli import app

LOGS = FIXTURES / "logs"
runner = CliRunner()


def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / Path(name).name
    shutil.copy(LOGS / name, dst)
    old = time.time() - 3600
    os.utime(dst, (old, old))
    return dst


def test_json_contract(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", str(LOGS / "multirank"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["root"] == 0
    root = data["findings"][0]
    assert root["id"] == "cuda-oom" and root["file"].endswith("rank2.log") and root["line"] == 13
    assert root["fixes"] and root["citations"]
    assert data["stats"]["files"] == 5


def test_human_report_root_first(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", str(LOGS / "multirank")])
    assert result.exit_code == 0
    out = result.output
    assert out.index("ROOT CAUSE") < out.index("Caused by the root") < out.index("Fix, most effective first")
    assert "rank2.log:13" in out and "CUDA out of memory" in out
    assert "max_tokens_per_mb" in out


def test_fail_on(tmp_path: Path) -> None:
    log = str(_copy("signatures/nccl-watchdog-timeout.log", tmp_path))
    assert runner.invoke(app, ["diagnose", log, "--fail-on", "error"]).exit_code == 1
    assert runner.invoke(app, ["diagnose", log, "--fail-on", "critical"]).exit_code == 0
    healthy = str(_copy("scenarios/healthy_areal.log", tmp_path))
    result = runner.invoke(app, ["diagnose", healthy, "--fail-on", "error"])
    assert result.exit_code == 0 and "No error found" in result.output


def test_user_errors_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", str(tmp_path / "missing.log")])
    assert result.exit_code == 2
    assert "no such file" in result.output
    result = runner.invoke(app, ["diagnose", str(LOGS / "scenarios" / "binary.log")])
    assert result.exit_code == 2 and "binary" in result.output
    assert runner.invoke(app, ["diagnose", str(LOGS / "multirank"), "--fail-on", "bogus"]).exit_code == 2


def test_excerpt_command() -> None:
    result = runner.invoke(app, ["excerpt", str(LOGS / "multirank"), "--max-lines", "30"])
    assert result.exit_code == 0
    assert "root cause cuda-oom" in result.output and "> 13 |" in result.output


def test_console_script_subprocess(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("rlmedic")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "rlmedic"]
    log = _copy("signatures/data-key-error.log", tmp_path)
    proc = subprocess.run([*cmd, "diagnose", str(log), "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["findings"][data["root"]]["id"] == "data-key-error"
    proc = subprocess.run([*cmd, "diagnose", str(tmp_path / "nope.log")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_diagnose_path_imports_nothing_heavy(tmp_path: Path) -> None:
    code = (
        "import sys; from rlmedic.tools.logs.diagnose import diagnose; from rlmedic.confine import Confinement; "
        f"diagnose([{str(LOGS / 'multirank')!r}], confinement=Confinement.for_paths([{str(LOGS)!r}])); "
        "heavy = [m for m in ('torch', 'chromadb', 'langchain', 'gradio', 'sentence_transformers', 'llama_index') "
        "if m in sys.modules]; print(heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
