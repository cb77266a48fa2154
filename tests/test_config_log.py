"""``fix-config --log``: the log diagnosis picks the remedies (uses the log fixtures of tests/test_logs_*)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ANYWHERE, FIXTURES
from rlmedic.tools.config.fix import fix_config
from rlmedic.ui.cli import app
from typer.testing import CliRunner

AREAL = FIXTURES / "configs" / "areal"
SLIME = FIXTURES / "configs" / "slime"
LOGS = FIXTURES / "logs"


def test_training_oom_log_shrinks_micro_batches(tmp_path: Path) -> None:
    out = tmp_path / "fixed.yaml"
    result = CliRunner().invoke(app, ["fix-config", str(AREAL / "base.yaml"), "--log", str(LOGS / "signatures" / "cuda-oom.log"),
                                      "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["phases"] == ["training"]
    assert [(c["key"], c["old"], c["new"]) for c in data["changes"]] == [("actor.mb_spec.max_tokens_per_mb", 10240, 2048)]
    assert data["changes"][0]["citation"]["text"].startswith("card:oom-actor-train")
    assert "max_tokens_per_mb: 2048" in out.read_text()


def test_interrupted_run_log_makes_recovery_an_error() -> None:
    result = fix_config(AREAL / "recover_disabled.yaml", log_paths=[LOGS / "scenarios" / "interrupted_areal.log"], confinement=ANYWHERE)
    problem = next(p for p in result.problems if p.rule == "areal-recover-mode")
    assert problem.severity == "error"
    assert ("recover.mode", "auto") in [(c.key, c.new) for c in result.changes]


def test_sglang_disconnect_log_raises_request_timeouts() -> None:
    result = fix_config(AREAL / "request_timeouts.yaml", log_paths=[LOGS / "scenarios" / "zero_reward_sglang_down.log"], confinement=ANYWHERE)
    assert {c.key: c.new for c in result.changes}.items() >= {"rollout.request_timeout": 7200, "rollout.request_retries": 5}.items()
    assert "connection" in result.phases


def test_slime_log_and_script_agree() -> None:
    result = fix_config(SLIME / "async_colocate.sh", log_paths=[LOGS / "signatures" / "async-with-colocate.log"], confinement=ANYWHERE)
    assert [(c.op, c.key) for c in result.changes] == [("remove_flag", "--colocate")]
    assert result.fixed_valid
