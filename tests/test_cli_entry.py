"""The console script builds only the command it runs; what the user sees is the whole app's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer.main
from rlmedic.ui.cli import app, app_for
from typer.testing import CliRunner


def test_a_named_command_gets_an_app_of_that_command_alone() -> None:
    one = app_for(["lint-config", "x.yaml"])
    assert [i.callback for i in one.registered_commands] == [
        i.callback for i in app.registered_commands if i.name == "lint-config"]
    assert list(typer.main.get_command(one).commands) == ["lint-config"]  # type: ignore[attr-defined]
    assert len(app.registered_commands) > 10  # the shared app is untouched
    for argv in ([], ["--help"], ["--version"], ["diagnos", "x.log"], ["-v", "diagnose"]):
        assert app_for(argv) is app, argv  # help, version and a misspelt command see every command


def test_the_console_script_answers_as_the_whole_app_does(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("step 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    env = {**os.environ, "RLMEDIC_HOME": str(tmp_path / "home")}
    for argv in (["diagnose", "--json", str(log)], ["diagnose", "--help"], ["diagnos", str(log)]):
        run = subprocess.run([sys.executable, "-m", "rlmedic", *argv], capture_output=True, text=True, env=env,
                             timeout=120)
        whole = CliRunner().invoke(app, argv, env=env)
        assert run.returncode == whole.exit_code, (argv, run.stderr)
        if argv[-1] == "--help":
            # the usage line names the program; lines wrap at each one's terminal width
            assert " ".join(run.stdout.split("\n", 1)[1].split()) == " ".join(whole.stdout.split("\n", 1)[1].split())
        elif run.returncode == 0:
            assert run.stdout.count("cuda-oom") == whole.stdout.count("cuda-oom") > 0
        else:
            assert "Did you mean 'diagnose'?" in run.stderr
