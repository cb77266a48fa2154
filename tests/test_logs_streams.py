"""Logs that are not files: ``-`` (stdin), ``/dev/stdin`` and ``<(...)`` pipes; and empty logs.

The pipe cases run the real console script through a real shell, so the path the program
sees is the one a user's shell hands over (a FIFO under /dev/fd).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ANYWHERE, FIXTURES
from rlmedic.confine import Confinement
from rlmedic.errors import UserError
from rlmedic.tools.logs.diagnose import diagnose
from rlmedic.ui.cli import app
from rlmedic.ui.cli_logs import split_streams

LOGS = FIXTURES / "logs"
OOM = LOGS / "signatures" / "cuda-oom.log"
runner = CliRunner()


def _cmd() -> list[str]:
    exe = Path(sys.executable).with_name("rlmedic")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "rlmedic"]


def _root(data: dict) -> tuple[str, str, int]:
    root = data["findings"][data["root"]]
    return root["id"], root["category"], root["line"]


def _file_answer() -> tuple[str, str, int]:
    proc = subprocess.run([*_cmd(), "diagnose", str(OOM), "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return _root(json.loads(proc.stdout))


def test_dash_reads_stdin_like_the_file() -> None:
    expected = _file_answer()
    proc = subprocess.run(
        [*_cmd(), "diagnose", "-", "--json"], input=OOM.read_bytes(), capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert _root(data) == expected
    assert data["findings"][data["root"]]["file"] == "<stdin>"


def test_gzipped_stdin_and_excerpt(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*_cmd(), "diagnose", "-", "--json"], input=gzip.compress(OOM.read_bytes()), capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert _root(json.loads(proc.stdout)) == _file_answer()
    proc = subprocess.run([*_cmd(), "excerpt", "-"], input=OOM.read_bytes(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert "root cause cuda-oom" in out and "==> <stdin> <==" in out


@pytest.mark.skipif(shutil.which("bash") is None, reason="process substitution needs bash")
def test_dev_stdin_and_process_substitution(tmp_path: Path) -> None:
    expected = _file_answer()
    exe = " ".join(_cmd())
    for shell in (f"{exe} diagnose --json <(cat {OOM})", f"cat {OOM} | {exe} diagnose --json /dev/stdin"):
        proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (shell, proc.stderr)
        assert _root(json.loads(proc.stdout)) == expected, shell
    # a pipe and a file together: both are read, and the file's path still goes through confinement
    other = LOGS / "signatures" / "nccl-watchdog-timeout.log"
    proc = subprocess.run(
        ["bash", "-c", f"{exe} diagnose --json <(cat {OOM}) {other}"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    files = {f["file"] for f in json.loads(proc.stdout)["findings"]}
    assert str(other) in files and any(f.startswith("/dev/fd/") for f in files)


def test_pipe_is_capped(tmp_path: Path) -> None:
    body = OOM.read_bytes()
    env = {**os.environ, "RLMEDIC_MAX_STDIN_BYTES": "200"}
    proc = subprocess.run(
        [*_cmd(), "diagnose", "-", "--json"], input=body, capture_output=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)["stats"]
    assert stats["bytes"] == 200
    assert "RLMEDIC_MAX_STDIN_BYTES" in stats["partial"][0]["reason"]


def test_stdin_named_twice_and_devices_are_refused() -> None:
    with pytest.raises(UserError, match="only once"):
        split_streams([Path("-"), Path("-")])
    with pytest.raises(UserError, match="is a device"):
        split_streams([Path("/dev/zero")])
    # the tool itself (which a model may call through the registry) never opens a pipe or device by path
    with pytest.raises(UserError, match="not a regular file"):
        diagnose(["/dev/zero"], confinement=Confinement.for_paths(["/dev/zero"]))
    assert runner.invoke(app, ["diagnose", "/dev/zero"]).exit_code == 2


def test_empty_log_is_a_warning(tmp_path: Path) -> None:
    empty = tmp_path / "train.log"
    empty.write_text("\n\n")
    result = runner.invoke(app, ["diagnose", str(empty)])
    assert result.exit_code == 0
    assert "No error found" not in result.output and "The log is empty" in result.output
    assert runner.invoke(app, ["diagnose", str(empty), "--fail-on", "warning"]).exit_code == 1
    assert runner.invoke(app, ["diagnose", str(empty), "--fail-on", "error"]).exit_code == 0
    data = json.loads(runner.invoke(app, ["diagnose", str(empty), "--json"]).stdout)
    assert data["root"] is None and [f["id"] for f in data["findings"]] == ["empty-log"]
    assert data["findings"][0]["severity"] == "warning"
    proc = subprocess.run([*_cmd(), "diagnose", "-", "--json"], input=b"", capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["findings"][0]["id"] == "empty-log"
    # one empty rank file beside a real log is listed, not a finding
    (tmp_path / "rank1.log").write_bytes(OOM.read_bytes())
    d = diagnose([str(tmp_path)], confinement=ANYWHERE)
    assert d.root_finding is not None and d.root_finding.id == "cuda-oom"
    assert d.stats["empty_files"] == [str(empty)]
