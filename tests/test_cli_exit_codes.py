"""Exit codes agree with the messages, for every command, through the CLI.

0: done, nothing wrong (or nothing asked to fail on); 1: the command found what the user must
act on (lint errors, errors left after fix-config, no checkpoints where some were expected, a
finding at --fail-on); 2: the input itself is wrong (a missing file, a bad option), one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from rlmedic.ui.cli import app
from typer.testing import CliRunner

runner = CliRunner()
AREAL = FIXTURES / "configs" / "areal"
SLIME = FIXTURES / "configs" / "slime"
LOGS = FIXTURES / "logs"


def _areal_tree(root: Path, exp: str = "exp", trial: str = "t1") -> Path:
    """A fileroot holding one intact AReaL HF checkpoint of ``exp``/``trial``."""
    step = root / "checkpoints" / "root" / exp / trial / "default" / "epoch0epochstep9globalstep9"
    step.mkdir(parents=True)
    (step / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}')
    (step / "model.safetensors").write_bytes(b"\x00" * 64)
    return root


def _cases(tmp: Path) -> list[tuple[str, list[str], int]]:
    fileroot = _areal_tree(tmp / "fileroot")
    (tmp / "empty").mkdir()
    docs = tmp / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Reward verifier\n\nThe verifier times out after 30 s; raise its timeout.\n")
    clean_slime = tmp / "clean.sh"
    clean_slime.write_text((SLIME / "base.sh").read_text())
    typo_slime = tmp / "typo.sh"
    typo_slime.write_text((SLIME / "base.sh").read_text().replace("--rollout-batch-size", "--rollout-batch-szie"))
    by_hand = tmp / "cut.sh"  # fix-config cannot guess the missing value
    by_hand.write_text("python3 train.py --rollout-batch-size 32 --n-samples-per-prompt 8 --global-batch-size 100 --seq-length\n")
    return [
        ("diagnose healthy", ["diagnose", str(LOGS / "scenarios" / "healthy_slime.log")], 0),
        ("diagnose --fail-on error", ["diagnose", str(LOGS / "signatures" / "async-with-colocate.log"), "--fail-on", "error"], 1),
        ("diagnose missing file", ["diagnose", str(tmp / "nope.log")], 2),
        ("excerpt", ["excerpt", str(LOGS / "scenarios" / "healthy_slime.log")], 0),
        ("excerpt missing file", ["excerpt", str(tmp / "nope.log")], 2),
        ("index creates its folder", ["index", str(docs), "--index-dir", str(tmp / "new-index"), "--json"], 0),
        ("search", ["search", "verifier timeout", "--index-dir", str(tmp / "new-index"), "--json"], 0),
        ("search missing --index-dir", ["search", "x", "--index-dir", str(tmp / "no-index")], 2),
        ("ask --offline", ["ask", "reward verifier times out", "--offline", "--index-dir", str(tmp / "new-index")], 0),
        ("ask missing --index-dir", ["ask", "x", "--offline", "--index-dir", str(tmp / "no-index")], 2),
        ("gpu snapshot", ["gpu", "--snapshot", str(FIXTURES / "gpu" / "h100x8_running.json")], 0),
        ("gpu missing snapshot", ["gpu", "--snapshot", str(tmp / "nope.json")], 2),
        ("checkpoints found", ["checkpoints", str(fileroot)], 0),
        ("checkpoints empty folder", ["checkpoints", str(tmp / "empty")], 1),
        ("checkpoints wrong experiment", ["checkpoints", str(fileroot), "--experiment-name", "exq"], 1),
        ("checkpoints wrong trial --json", ["checkpoints", str(fileroot), "--trial-name", "t9", "--json"], 1),
        ("checkpoints missing root", ["checkpoints", str(tmp / "nope")], 2),
        ("lint-config clean", ["lint-config", str(AREAL / "base.yaml")], 0),
        ("lint-config errors", ["lint-config", str(AREAL / "mb_tokens.yaml")], 1),
        ("lint-config slime clean", ["lint-config", str(clean_slime)], 0),
        ("lint-config slime typo", ["lint-config", str(typo_slime)], 1),
        ("lint-config missing", ["lint-config", str(tmp / "nope.yaml")], 2),
        ("fix-config fixes everything", ["fix-config", str(AREAL / "mb_tokens.yaml")], 0),
        ("fix-config errors left", ["fix-config", str(by_hand)], 1),
        ("fix-config missing", ["fix-config", str(tmp / "nope.yaml")], 2),
        ("mcp bad --allow", ["mcp", "--allow", str(tmp / "nope")], 2),
        ("mcp missing --index-dir", ["mcp", "--index-dir", str(tmp / "no-index")], 2),
        ("unknown option", ["lint-config", str(AREAL / "base.yaml"), "--bogus"], 2),
    ]


def test_exit_code_table(tmp_path: Path) -> None:
    failures = []
    for name, args, expected in _cases(tmp_path):
        result = runner.invoke(app, args)
        if result.exit_code != expected:
            failures.append(f"{name}: exit {result.exit_code}, expected {expected}: {result.output[-300:]}")
        if expected == 2 and result.exception is not None and not isinstance(result.exception, SystemExit):
            failures.append(f"{name}: a traceback instead of one line: {result.exception!r}")
    assert not failures, "\n".join(failures)


def test_user_errors_are_one_line(tmp_path: Path) -> None:
    for args in (["checkpoints", str(tmp_path / "nope")], ["search", "x", "--index-dir", str(tmp_path / "no-index")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2
        assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("rlmedic: error: ")
    result = runner.invoke(app, ["search", "x", "--index-dir", str(tmp_path / "no-index")])
    assert "rlmedic index --index-dir" in result.stderr
    assert not (tmp_path / "no-index").exists()  # nothing was created behind the user's back


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_checkpoints_name_mismatch_is_one_clear_error(tmp_path: Path, extra: list[str]) -> None:
    fileroot = _areal_tree(tmp_path / "fileroot", exp="gsm8k-grpo", trial="trial0")
    result = runner.invoke(app, ["checkpoints", str(fileroot), "--experiment-name", "gsm8k-grpp", *extra])
    assert result.exit_code == 1
    if extra:
        issues = [i for i in json.loads(result.stdout)["issues"] if i["severity"] == "error"]
        assert [i["id"] for i in issues] == ["name-mismatch"]
        return
    errors = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "no checkpoints for experiment 'gsm8k-grpp'" in errors[0] and "did you mean experiment 'gsm8k-grpo'?" in errors[0]
    assert "Found: gsm8k-grpo: trial0" in errors[0]
    assert "nothing to resume from" not in result.stdout and "no checkpoints under" not in result.stdout


def test_checkpoints_empty_folder_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["checkpoints", str(tmp_path / "empty")])
    assert result.exit_code == 1
    errors = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: no checkpoints under {tmp_path / 'empty'}")
    assert "Recovery plan" not in result.stdout
