"""Defects a newcomer met with lint-config / fix-config (issue 30): each one as a test."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ANYWHERE, FIXTURES
from rlmedic.tools.config.fix import fix_config, lint_config
from rlmedic.tools.gpu.snapshot import load_snapshot

AREAL = FIXTURES / "configs" / "areal"
SLIME = FIXTURES / "configs" / "slime"
GPU = FIXTURES / "gpu"
TRAIN_OOM = ("(TrainWorker pid=3101) Traceback (most recent call last):\n"
             '(TrainWorker pid=3101)   File "areal/engine/fsdp_engine.py", line 512, in train_batch\n'
             "(TrainWorker pid=3101)     loss.backward()\n"
             "(TrainWorker pid=3101) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. "
             "GPU 0 has a total capacity of {gib} GiB of which 1.02 GiB is free.\n")


def _variant(tmp_path: Path, source: Path, *edits: tuple[str, str], name: str = "") -> Path:
    text = source.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    out = tmp_path / (name or source.name)
    out.write_text(text)
    return out


def test_a_backend_without_dimensions_is_named_as_such_and_allocation_mode_gives_them(tmp_path: Path) -> None:
    cfg = _variant(tmp_path, AREAL / "allocation_mode.yaml",
                   ("allocation_mode: sglang:d4p1t1+d4p1t1", "allocation_mode: sglang:d4p1t1+d2t2"),
                   ("\nactor:\n", "\nactor:\n  backend: fsdp\n"))
    [problem] = [p for p in lint_config(cfg, confinement=ANYWHERE).problems if p.rule == "areal-backend-syntax"]
    assert "no parallel dimensions" in problem.message and "missing the backend prefix" not in problem.message
    result = fix_config(cfg, confinement=ANYWHERE)
    assert ("actor.backend", "fsdp", "fsdp:d2t2") in [(c.key, c.old, c.new) for c in result.changes]
    assert "allocation_mode" in next(c for c in result.changes if c.key == "actor.backend").why
    assert not any(p.rule == "areal-backend-syntax" for p in result.remaining)


def test_a_bare_backend_without_allocation_mode_gets_the_message_and_no_made_up_value(tmp_path: Path) -> None:
    cfg = _variant(tmp_path, AREAL / "backend_syntax.yaml", ('backend: "sglang:d4p1t1"', "backend: sglang"))
    problems = [p for p in lint_config(cfg, confinement=ANYWHERE).problems if p.key == "rollout.backend"]
    assert problems and "the backend 'sglang' has no parallel dimensions" in problems[0].message
    assert problems[0].fixes == []
    # bare dimensions still get the prefix
    cfg = _variant(tmp_path, AREAL / "backend_syntax.yaml", ('backend: "sglang:d4p1t1"', 'backend: "d4p1t1"'), name="dims.yaml")
    [problem] = [p for p in lint_config(cfg, confinement=ANYWHERE).problems if p.key == "rollout.backend"]
    assert "missing the backend prefix" in problem.message and problem.fixes[0].new == "sglang:d4p1t1"


def test_slime_non_integer_values_get_the_integer_they_mean(tmp_path: Path) -> None:
    for written, meant, valid in (("256.0", 256, True), ("64.5", 64, True), ("2e2", 200, False)):
        script = _variant(tmp_path, SLIME / "base.sh", ("--global-batch-size 256", f"--global-batch-size {written}"))
        [problem] = [p for p in lint_config(script, confinement=ANYWHERE).problems if p.rule == "slime-flag-type"]
        assert f"did you mean {meant}?" in problem.message
        result = fix_config(script, confinement=ANYWHERE)
        assert [(c.key, c.new) for c in result.changes] == [("--global-batch-size", meant)]
        assert f"--global-batch-size {meant}" in result.text
        # 200 is an integer but breaks the batch arithmetic (32 x 8 = 256): said, not hidden
        assert result.fixed_valid is valid, [p.message for p in result.remaining]
    script = _variant(tmp_path, SLIME / "base.sh", ("--global-batch-size 256", "--global-batch-size lots"))
    [problem] = [p for p in lint_config(script, confinement=ANYWHERE).problems if p.rule == "slime-flag-type"]
    assert problem.fixes == [] and "did you mean" not in problem.message


def test_colocated_training_oom_on_a_small_gpu_turns_on_gradient_checkpointing(tmp_path: Path) -> None:
    """Seed 004: on a 24-48 GB GPU shared with SGLang, its share goes down and gradient checkpointing goes on."""
    for gib, snapshot in (("44.35", None), ("44.35", "a40_idle.json"), ("31.36", None)):
        log = tmp_path / "train.log"
        log.write_text(TRAIN_OOM.format(gib=gib))
        snap = load_snapshot(GPU / snapshot, confinement=ANYWHERE) if snapshot else None
        result = fix_config(AREAL / "colocated_a40.yaml", log_paths=[log], snapshot=snap, confinement=ANYWHERE)
        changed = {c.key: c.new for c in result.changes}
        assert result.phases == ["training", "colocated"], (gib, snapshot)
        assert changed.get("actor.gradient_checkpointing") is True, (gib, snapshot, changed)
        assert changed["sglang.mem_fraction_static"] < 0.8
        assert re.search(r"gradient_checkpointing: true", result.text)
    # an 80 GB GPU: the training levers only, gradient checkpointing stays an alternative
    log.write_text(TRAIN_OOM.format(gib="79.11"))
    result = fix_config(AREAL / "colocated_a40.yaml", log_paths=[log], confinement=ANYWHERE)
    assert result.phases == ["training"]
    assert "actor.gradient_checkpointing" in [a.key for a in result.alternatives]
    # not colocated (base.yaml separates rollout and training): no colocated levers either
    log.write_text(TRAIN_OOM.format(gib="44.35"))
    result = fix_config(AREAL / "base.yaml", log_paths=[log], confinement=ANYWHERE)
    assert result.phases == ["training"]
