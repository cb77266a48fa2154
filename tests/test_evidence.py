"""One evidence interface: every tool result, through the registry, as rlmedic.types.Evidence."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import FIXTURES
from rlmedic.tools.registry import REGISTRY, ToolContext
from rlmedic.types import Evidence

HEALTHY = FIXTURES / "logs" / "scenarios" / "healthy_areal.log"
OOM_LOG = FIXTURES / "logs" / "signatures" / "cuda-oom.log"


def call(name: str, args: dict, *roots: Path):
    result = REGISTRY.call(name, args, ToolContext.for_roots([str(r) for r in roots], env_roots=False))
    assert result.ok, result.error
    assert isinstance(result.evidence, Evidence) and result.evidence.tool == name and result.evidence.call.startswith(name)
    return result.evidence


def test_logs_a_root_with_its_fixes_or_a_healthy_run_with_what_was_checked(tmp_path: Path) -> None:
    sick = call("diagnose", {"paths": [str(OOM_LOG)]}, OOM_LOG)
    assert sick.subject == "logs" and not sick.healthy
    assert sick.root_finding.category == "oom_training" and sick.fixes and sick.citations
    well = call("diagnose", {"paths": [str(HEALTHY)]}, HEALTHY)
    assert well.healthy and well.root_finding is None
    assert "1 file(s)" in well.checked and ("clean finish" in well.checked or "clean shutdown" in well.checked)
    assert well.verdict in ("finished", "healthy", "")


def test_gpus_give_advice_and_facts(tmp_path: Path) -> None:
    snap = FIXTURES / "gpu" / "a40_leftovers.json"
    ev = call("gpu_status", {"snapshot": str(snap)}, snap)
    assert ev.subject == "gpus" and not ev.healthy
    assert any(a.id == "leftover-process" for a in ev.advice)
    assert any("kill 4121" in str(f) for f in ev.fixes) and any("pid 4121" in fact for fact in ev.facts)
    idle = FIXTURES / "gpu" / "h200_idle.json"
    assert call("gpu_status", {"snapshot": str(idle)}, idle).healthy


def test_checkpoints_give_the_plan_and_a_damaged_newest_save_as_the_root(tmp_path: Path) -> None:
    trial = tmp_path / "checkpoints" / "root" / "exp" / "trial"
    for i, step in enumerate((10, 20)):
        save = trial / "default" / f"epoch0epochstep{step}globalstep{step}"
        save.mkdir(parents=True)
        (save / "config.json").write_text("{}")
        (save / "model.safetensors").write_bytes(b"" if step == 20 else b"\x01" * 64)
    ev = call("list_checkpoints", {"root": str(tmp_path)}, tmp_path)
    assert ev.subject == "checkpoints" and ev.frameworks == ["areal"]
    assert ev.root_finding.id == "newest-checkpoint-damaged" and "step 20" in ev.root_finding.summary
    assert ev.plan[0].startswith("areal recovery (from-weights) from step 10")
    assert any(line == "set recover.mode=auto" for line in ev.plan)


def test_a_config_gives_its_exact_edits_and_the_diff(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    shutil.copy(FIXTURES / "configs" / "areal" / "base.yaml", config)
    ev = call("fix_config", {"config": str(config), "logs": [str(OOM_LOG)]}, config, OOM_LOG)
    assert ev.subject == "config" and ev.frameworks == ["areal"] and ev.diff
    assert ev.fixes[0].key == "actor.mb_spec.max_tokens_per_mb"


def test_a_cached_result_has_its_evidence_too(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RLMEDIC_TOOL_CACHE", "1")
    log = tmp_path / "train.log"
    shutil.copy(OOM_LOG, log)
    ctx = ToolContext.for_roots([str(log)], env_roots=False)
    first = REGISTRY.call("diagnose", {"paths": [str(log)]}, ctx)
    second = REGISTRY.call("diagnose", {"paths": [str(log)]}, ctx)
    assert second.cached and second.evidence is not first.evidence
    assert {**second.evidence.to_dict(), "at": 0} == {**first.evidence.to_dict(), "at": 0}


def test_a_vouched_stream_is_diagnosed_never_cached_and_named_by_the_front_door() -> None:
    from rlmedic.tools.logs.scan import Source

    ctx = ToolContext.for_roots([], env_roots=False)
    ctx.streams["<pasted>"] = Source(name="<pasted>", data=OOM_LOG.read_bytes())
    result = REGISTRY.call("diagnose", {"paths": ["<pasted>"]}, ctx)
    assert result.ok and not result.cached and result.evidence.root_finding.category == "oom_training"
    # a name the front door did not vouch for is a path, read through the confinement (refused here)
    refused = REGISTRY.call("diagnose", {"paths": ["<other>"]}, ctx)
    assert not refused.ok
