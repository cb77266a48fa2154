"""Logs in the shapes people actually have: endings per framework, metric streams in every
common format (Ray-prefixed AReaL tables, slime dicts, verl ``key:value``, JSON lines,
``key=value``), and the framework told from the metric names.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import ANYWHERE, FIXTURES
from rlmedic.tools.logs.diagnose import diagnose, diagnose_text

ENDINGS = FIXTURES / "logs" / "endings"


def _old(src: Path, tmp_path: Path) -> str:
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    old = time.time() - 3600
    os.utime(dst, (old, old))
    return str(dst)


@pytest.mark.parametrize(
    ("name", "framework"),
    [
        ("slime_ray_succeeded.log", "slime"),
        ("verl_final_validation.log", "verl"),
        ("areal_ray_job_succeeded.log", "areal"),
    ],
)
def test_clean_endings_are_not_interruptions(name: str, framework: str, tmp_path: Path) -> None:
    d = diagnose([_old(ENDINGS / name, tmp_path)], confinement=ANYWHERE)
    assert d.root_finding is None, [f.summary for f in d.findings]
    assert not [f for f in d.findings if f.severity in ("critical", "error")]
    assert d.stats["clean_shutdown"] is True
    assert d.stats["frameworks"] == [framework]
    assert d.stats["last_step"] is not None and d.stats["last_step"] >= 11
    assert {"reward", "loss", "grad_norm"} <= set(d.stats["metrics"])


def test_a_cut_off_run_is_still_an_interruption(tmp_path: Path) -> None:
    d = diagnose([_old(ENDINGS / "slime_cut_mid_training.log", tmp_path)], confinement=ANYWHERE)
    root = d.root_finding
    assert root is not None and root.id == "probable-interruption" and root.severity == "error"
    assert d.stats["clean_shutdown"] is False


def _areal_table(step: int, reward: float, prefix: str) -> list[str]:
    rows = [
        ("grpo_actor/task_reward/avg", reward),
        ("grpo_actor/update/actor_loss/avg", 0.003),
        ("grpo_actor/update/grad_norm", 0.21),
    ]
    out = [f"{prefix}[AReaL] 20251120-09:{step:02d}:00.000 StatsLogger INFO: Epoch 1/1 Step {step}/40 Train step {step}/40 done."]
    out.append(f"{prefix}╒══════════════════════════════════╤═════════════╕")
    out += [f"{prefix}│ {k:<32} │ {v:11.4e} │" for k, v in rows]
    out.append(f"{prefix}╘══════════════════════════════════╧═════════════╛")
    return out


@pytest.mark.parametrize("prefix", ["", "(trainer pid=4242) ", "(TrainWorker pid=17, ip=10.0.0.3) "])
def test_areal_stats_table_with_or_without_ray_prefix(prefix: str) -> None:
    lines: list[str] = []
    for step in range(1, 21):
        lines += _areal_table(step, 0.4 if step <= 4 else 0.0, prefix)
    d = diagnose_text("\n".join(lines) + "\n", "trainer.log")
    root = d.root_finding
    assert root is not None and root.id == "zero-reward-streak", [f.id for f in d.findings]
    assert root.category == "reward_collapse"
    assert root.evidence["numbers"]["first_zero_step"] == 5 and root.evidence["numbers"]["zero_steps"] == 16
    assert d.stats["frameworks"] == ["areal"]


def _slime_zero_reward() -> str:
    lines = []
    for i in range(16):
        reward = 0.35 if i < 3 else 0.0
        lines.append(f"(RolloutManager pid=9) rollout {i}: {{'rollout/raw_reward': {reward}, 'rollout/response_len/mean': 412.0}}")
        lines.append(f"(TrainRayActor pid=10) step {i}: {{'train/loss': 0.01, 'train/pg_loss': 0.002, 'train/grad_norm': 0.3}}")
    return "\n".join(lines) + "\n"


def test_slime_zero_reward_gets_slime_fixes_not_areal_keys() -> None:
    d = diagnose_text(_slime_zero_reward(), "slime.log")
    root = d.root_finding
    assert root is not None and root.id == "zero-reward-streak"
    assert d.stats["frameworks"] == ["slime"] and root.evidence["framework"] == "slime"
    text = json.dumps(root.to_dict())
    assert "rollout.request_retries" not in text and "recover.mode" not in text
    assert "--rm-type" in text


def test_json_lines_and_key_value_streams() -> None:
    jsonl = "".join(
        json.dumps({"step": i, "actor/pg_loss": 0.1, "actor/grad_norm": float("nan") if i == 6 else 0.2}) + "\n"
        for i in range(1, 10)
    )
    d = diagnose_text(jsonl.replace("NaN", "nan"), "metrics.jsonl")
    root = d.root_finding
    assert root is not None and root.id == "nonfinite-grad-norm" and root.evidence["numbers"]["step"] == 6
    assert d.stats["frameworks"] == ["verl"]
    kv = "".join(f"iter {i} reward={0.5 if i < 3 else 0.0} loss={0.1:.3f} grad_norm=0.2\n" for i in range(20))
    d = diagnose_text(kv, "kv.log")
    assert d.root_finding is not None and d.root_finding.id == "zero-reward-streak"
    colon = "".join(f"step: {i}, reward: {0.5 if i < 4 else 0.0}, loss: 0.1\n" for i in range(20))
    d = diagnose_text(colon, "colon.log")
    root = d.root_finding
    assert root is not None and root.id == "zero-reward-streak" and root.evidence["numbers"]["first_zero_step"] == 4
