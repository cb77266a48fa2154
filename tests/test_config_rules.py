"""One broken config per rule: caught, fixed, the fix passes, the input untouched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ANYWHERE, FIXTURES, SHARED
from rlmedic.errors import UserError
from rlmedic.knowledge.cards import card_by_id
from rlmedic.tools.config.rules import LintContext, load_remedies
from rlmedic.tools.config.checks import load_rules
from rlmedic.confine import Confinement
from rlmedic.tools.config.fix import fix_config, lint_config, write_corrected
from rlmedic.tools.gpu.snapshot import load_snapshot
from rlmedic.types import Finding

AREAL = FIXTURES / "configs" / "areal"
SLIME = FIXTURES / "configs" / "slime"
GPU = FIXTURES / "gpu"


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


# (fixture, rule, options, key the fix must change, expected new value)
FIXED = [
    (AREAL / "mb_tokens.yaml", "areal-mb-tokens-cover-sequence", {}, "actor.mb_spec.max_tokens_per_mb", 2048),
    (AREAL / "backend_syntax.yaml", "areal-backend-syntax", {}, "actor.backend", "fsdp:d4p1t1"),
    (AREAL / "backend_fits.yaml", "areal-backend-fits-cluster", {}, "rollout.backend", "sglang:d4p1t1"),
    (AREAL / "separation_default.yaml", "areal-backend-fits-cluster", {}, "rollout.backend", "sglang:d4"),
    (AREAL / "ulysses.yaml", "areal-ulysses-sp-divisibility", {}, "actor.backend", "fsdp:d2c4"),
    (AREAL / "mem_fraction_range.yaml", "areal-mem-fraction-range", {}, "sglang.mem_fraction_static", 0.85),
    (AREAL / "colocated_a40.yaml", "areal-colocated-memory", {"snapshot": "a40_idle"}, "sglang.mem_fraction_static", 0.65),
    (AREAL / "attention_5090.yaml", "areal-attention-backend", {"snapshot": "rtx5090"}, "sglang.attention_backend", "flashinfer"),
    (AREAL / "fileroot_relative.yaml", "areal-fileroot-absolute", {}, "cluster.fileroot", "/workspace/outputs/grpo"),
    (AREAL / "fileroot_tmp.yaml", "areal-fileroot-persistent", {"spot": True}, "cluster.fileroot", "/workspace/outputs/areal/experiments"),
    (AREAL / "recover_disabled.yaml", "areal-recover-mode", {"spot": True}, "recover.mode", "auto"),
    (AREAL / "recover_no_freq.yaml", "areal-recover-frequency", {}, "recover.freq_secs", 3600),
    (AREAL / "recover_epoch_only.yaml", "areal-recover-epoch-only", {"spot": True}, "recover.freq_secs", 3600),
    (AREAL / "saver_no_freq.yaml", "areal-saver-frequency", {}, "saver.freq_epochs", 1),
    (AREAL / "request_timeouts.yaml", "areal-request-timeouts", {"spot": True}, "rollout.request_timeout", 7200),
    (AREAL / "schema_typo.yaml", "schema-typo", {}, "gconfig.max_new_tokens", 1024),
    (AREAL / "schema_removed.yaml", "schema-removed", {}, "actor.rejection_sampling.upper", 5.0),
    (SLIME / "batch_arithmetic.sh", "slime-batch-arithmetic", {}, "--global-batch-size", "256"),
    (SLIME / "async_colocate.sh", "slime-async-colocate", {}, "--colocate", None),
    (SLIME / "gpu_count.sh", "slime-gpu-count", {}, "--rollout-num-gpus", "4"),
    (SLIME / "engine_size.sh", "slime-rollout-engine-size", {}, "--rollout-num-gpus", "4"),
    (SLIME / "max_tokens_no_dynamic.sh", "slime-max-tokens-needs-dynamic-batch", {}, "--use-dynamic-batch-size", True),
    (SLIME / "context_parallel.sh", "slime-context-parallel", {}, "--context-parallel-size", "4"),
    (SLIME / "colocate_mem.sh", "slime-colocate-mem-fraction", {}, "--sglang-mem-fraction-static", "0.8"),
    (SLIME / "mem_fraction_range.sh", "slime-mem-fraction-range", {}, "--sglang-mem-fraction-static", "0.85"),
    (SLIME / "no_load.sh", "slime-resume", {"spot": True}, "--load", "/workspace/ckpt/qwen3-4b-grpo"),
    (SLIME / "no_save_interval.sh", "slime-save-interval", {}, "--save-interval", "20"),
    (SLIME / "save_relative.sh", "slime-save-absolute", {}, "--save", "/workspace/outputs/ckpt/qwen3-4b-grpo"),
]


def _options(options: dict) -> dict:
    out = dict(options)
    if "snapshot" in out:
        out["snapshot"] = load_snapshot(GPU / f"{out['snapshot']}.json", confinement=ANYWHERE)
    return out


def _value(framework: str, text: str, path: Path, key: str):
    if framework == "slime":
        from rlmedic.tools.config.slime import parse_slime_launch

        launch = parse_slime_launch(text, str(path))
        if key == "--colocate" or key == "--use-dynamic-batch-size":
            return launch.has(key) or None
        return launch.get(key)
    from rlmedic.tools.config.areal import parse_areal_config

    return parse_areal_config(text, str(path)).get(key)


def _target(change) -> str:  # noqa: ANN001
    """The key a change leaves set: for a rename, the new name beside the old one."""
    if change.op != "rename":
        return change.key
    parent, _, _old = change.key.rpartition(".")
    return f"{parent}.{change.new}" if parent else str(change.new)


def test_every_rule_has_a_fixture() -> None:
    covered = {rule for _p, rule, *_ in FIXED} | {"areal-allocation-mode-deprecated", "areal-colocated-share",
                                                  "areal-weight-update-disk-shared"}
    assert set(load_rules()) <= covered


def test_rules_table_is_valid_and_cites_existing_cards() -> None:
    rules = load_rules()
    assert len(rules) >= 25
    for rule in rules.values():
        assert rule.citations, rule.id
        for citation in rule.citations:
            if citation.kind == "card":
                assert card_by_id(citation.ref) is not None, f"{rule.id} cites missing card {citation.ref}"
    for phases in load_remedies().values():
        for remedies in phases.values():
            for remedy in remedies:
                for citation in remedy.citations:
                    if citation.kind == "card":
                        assert card_by_id(citation.ref) is not None, f"{remedy.id} cites missing card {citation.ref}"


def test_base_configs_are_clean() -> None:
    for path in (AREAL / "base.yaml", SLIME / "base.sh", SLIME / "args.txt"):
        result = lint_config(path, spot=True, confinement=ANYWHERE)
        assert [p.to_dict() for p in result.problems] == [], path


@pytest.mark.parametrize(("path", "rule", "options", "key", "new"), FIXED, ids=lambda v: v.name if isinstance(v, Path) else None)
def test_rule_caught_and_fixed(path: Path, rule: str, options: dict, key: str, new, tmp_path: Path) -> None:
    before = fingerprint(path)
    opts = _options(options)
    lint = lint_config(path, snapshot=opts.get("snapshot"), spot=opts.get("spot", False), confinement=ANYWHERE)
    caught = [p for p in lint.problems if p.rule == rule]
    assert caught, [p.to_dict() for p in lint.problems]
    assert caught[0].citation is not None and caught[0].fixable

    out = tmp_path / ("fixed" + path.suffix)
    result = fix_config(path, **opts, confinement=ANYWHERE)
    assert write_corrected(path, out, result.changes, confinement=Confinement.for_paths([path])) == out
    assert any(c.rule == rule for c in result.changes)
    for change in result.changes:
        assert change.reason and change.citation is not None
    text = out.read_text()
    assert text == result.text
    assert _value(result.framework, text, out, key) == new
    # the corrected file passes the checks
    relint = lint_config(out, snapshot=opts.get("snapshot"), spot=opts.get("spot", False), confinement=ANYWHERE)
    assert not [p for p in relint.problems if p.rule == rule], [p.to_dict() for p in relint.problems]
    assert relint.valid
    assert result.fixed_valid
    # the input is untouched, bytes and mtime
    assert fingerprint(path) == before
    # the rule itself changed the key (a rename lands on the new name)
    targets = {_target(c): c.rule for c in result.changes}
    assert targets.get(key) == rule, targets


@pytest.mark.parametrize(
    ("path", "rule", "options"),
    [
        (AREAL / "allocation_mode.yaml", "areal-allocation-mode-deprecated", {}),
        (AREAL / "colocated_share.yaml", "areal-colocated-share", {}),
        (AREAL / "weight_update_disk.yaml", "areal-weight-update-disk-shared", {}),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else None,
)
def test_advisory_rules_are_reported_without_an_automatic_change(path: Path, rule: str, options: dict) -> None:
    lint = lint_config(path, **options, confinement=ANYWHERE)
    assert any(p.rule == rule for p in lint.problems)
    result = fix_config(path, **options, confinement=ANYWHERE)
    assert not any(c.rule == rule for c in result.changes)


def test_upstream_typo_is_migrated_to_rejection_sampling(tmp_path: Path, shared: Path) -> None:
    src = SHARED / "corpus" / "areal-configs" / "scaffolding" / "gsm8k_rlvr_scaffolding.yaml"
    before = fingerprint(src)
    result = fix_config(src, confinement=ANYWHERE)
    # (metric: ratio is the section's default once upper creates it: not listed as a change)
    assert [(c.op, c.key, c.new) for c in result.changes] == [
        ("set", "actor.rejection_sampling.upper", 5.0),
        ("delete", "actor.behav_imp_weight_cap", None),
    ]
    assert "-  behav_imp_weight_cap: 5.0" in result.diff
    assert fingerprint(src) == before
    # left for the user: allocation_mode sglang:d1+d1 separates the engines (2 GPUs) on a 1-GPU cluster, and the
    # legacy string holds both engines, so no automatic split is proposed
    assert [(p.rule, p.key) for p in result.remaining if p.severity == "error"] == [("areal-backend-fits-cluster", "allocation_mode")]


def test_colocated_a40_matches_the_seed_table() -> None:
    """Seed 004: SGLang at 0.8 plus the trainer does not fit an A40; at 0.5 with gradient checkpointing it does."""
    from rlmedic.tools.config.areal import load_areal_config
    from rlmedic.tools.config.checks import colocation_report

    snapshot = load_snapshot(GPU / "a40_idle.json", confinement=ANYWHERE)
    config = load_areal_config(AREAL / "colocated_a40.yaml", confinement=ANYWHERE)
    default = colocation_report(config, LintContext(snapshot=snapshot))
    assert not default.fits and round(default.sglang_bytes / 2**30) == 36
    optimised = colocation_report(config, LintContext(snapshot=snapshot), mem_fraction=0.5, gradient_checkpointing=True,
                                  max_tokens_per_mb=4096)
    assert optimised.fits and round(optimised.sglang_bytes / 2**30, 1) == 22.5


def test_leftover_memory_counts_against_the_budget() -> None:
    from rlmedic.tools.config.areal import load_areal_config
    from rlmedic.tools.config.checks import colocation_report

    config = load_areal_config(AREAL / "attention_5090.yaml", confinement=ANYWHERE)
    idle = colocation_report(config, LintContext(snapshot=load_snapshot(GPU / "a40_idle.json", confinement=ANYWHERE)))
    busy = colocation_report(config, LintContext(snapshot=load_snapshot(GPU / "a40_leftovers.json", confinement=ANYWHERE)))
    assert idle.fits and not busy.fits
    assert busy.other_bytes > 30 * 2**30


# --------------------------------------------------------------------------- log-driven remedies


def oom(phase: str, category: str = "", card: str = "") -> Finding:
    category = category or {"generation": "oom_generation", "training": "oom_training",
                            "weight_update": "oom_weight_update"}.get(phase, "oom_training")
    return Finding(id=f"f-{phase}", category=category, severity="error", summary=f"OOM during {phase}",
                   evidence={"phase": phase}, card=card)


def test_generation_oom_takes_the_most_effective_remedy_first() -> None:
    result = fix_config(AREAL / "base.yaml", findings=[oom("generation", card="oom-sglang-generation")], confinement=ANYWHERE)
    assert result.phases == ["generation"]
    assert [(c.key, c.old, c.new) for c in result.changes] == [("rollout.max_concurrent_rollouts", 256, 192)]
    assert [c.key for c in result.alternatives] == ["rollout.backend", "sglang.mem_fraction_static"]
    assert result.changes[0].citation.ref == "oom-sglang-generation"


def test_training_oom_follows_the_effectiveness_order(tmp_path: Path) -> None:
    base = (AREAL / "base.yaml").read_text()
    # 1. micro-batch tokens down to max_length + max_new_tokens
    result = fix_config(AREAL / "base.yaml", findings=[oom("training", card="oom-actor-train")], confinement=ANYWHERE)
    assert [(c.key, c.new) for c in result.changes] == [("actor.mb_spec.max_tokens_per_mb", 2048)]
    assert [c.rule for c in result.alternatives] == ["ulysses-context-parallel", "per-layer-optim-step", "lightweight-optimizer"]
    # 2. already at the minimum: gradient checkpointing
    at_min = tmp_path / "at_min.yaml"
    at_min.write_text(base.replace("max_tokens_per_mb: 10240", "max_tokens_per_mb: 2048")
                      .replace("gradient_checkpointing: true", "gradient_checkpointing: false"))
    result = fix_config(at_min, findings=[oom("training")], confinement=ANYWHERE)
    assert [(c.key, c.new) for c in result.changes] == [("actor.gradient_checkpointing", True)]
    # 3. both done: Ulysses context parallelism (12 heads of Qwen2.5-1.5B divide by 2)
    both = tmp_path / "both.yaml"
    both.write_text(base.replace("max_tokens_per_mb: 10240", "max_tokens_per_mb: 2048"))
    result = fix_config(both, findings=[oom("training")], confinement=ANYWHERE)
    assert [(c.key, c.old, c.new) for c in result.changes] == [("actor.backend", "fsdp:d4p1t1", "fsdp:d2p1t1c2")]
    assert result.fixed_valid


def test_weight_update_oom_switches_to_disk() -> None:
    result = fix_config(AREAL / "base.yaml", findings=[oom("weight_update")], confinement=ANYWHERE)
    assert [(c.key, c.new) for c in result.changes] == [("actor.weight_update_mode", "disk")]
    assert any(a.rule == "smaller-weight-chunks" for a in result.actions)


def test_initialization_oom_with_leftovers_is_an_action_not_a_config_change() -> None:
    finding = oom("initialization", category="oom_training", card="oom-initialization")
    result = fix_config(AREAL / "attention_5090.yaml", findings=[finding], snapshot=load_snapshot(GPU / "a40_leftovers.json", confinement=ANYWHERE), confinement=ANYWHERE)
    assert [a.rule for a in result.actions][:1] == ["kill-leftover-processes"]
    assert "4121" in result.actions[0].reason
    assert not any(c.rule == "memory-efficient-load" for c in result.changes)
    # without leftovers on the machine, the next remedy applies
    result = fix_config(AREAL / "attention_5090.yaml", findings=[finding], snapshot=load_snapshot(GPU / "a40_idle.json", confinement=ANYWHERE), confinement=ANYWHERE)
    assert [c.key for c in result.changes] == ["actor.fsdp.memory_efficient_load"]


def test_sglang_disconnect_raises_timeouts() -> None:
    finding = Finding(id="d", category="sglang_connection", severity="error", summary="server went away",
                      card="sglang-disconnect-long-run")
    result = fix_config(AREAL / "request_timeouts.yaml", findings=[finding], confinement=ANYWHERE)
    assert {c.key: c.new for c in result.changes} == {"rollout.request_timeout": 7200, "rollout.request_retries": 5}


def test_spot_findings_escalate_recovery_rules() -> None:
    finding = Finding(id="s", category="checkpoint_recovery", severity="error", summary="pod preempted",
                      card="spot-interruption")
    lint = lint_config(AREAL / "recover_disabled.yaml", findings=[finding], confinement=ANYWHERE)
    assert [p.severity for p in lint.problems if p.rule == "areal-recover-mode"] == ["error"]
    assert [p.severity for p in lint_config(AREAL / "recover_disabled.yaml", confinement=ANYWHERE).problems if p.rule == "areal-recover-mode"] == ["info"]


def test_slime_training_oom_follows_the_faq() -> None:
    result = fix_config(SLIME / "base.sh", findings=[oom("training")], confinement=ANYWHERE)
    assert [(c.key, c.new) for c in result.changes] == [("--max-tokens-per-gpu", 8192)]


def test_slime_colocated_oom_lowers_the_share() -> None:
    result = fix_config(SLIME / "base.sh", findings=[oom("colocated", card="oom-colocated")], confinement=ANYWHERE)
    assert [(c.key, c.old, c.new) for c in result.changes] == [("--sglang-mem-fraction-static", 0.7, 0.4)]


# --------------------------------------------------------------------------- output safety


def test_output_never_overwrites_the_input(tmp_path: Path) -> None:
    src = tmp_path / "c.yaml"
    shutil.copy(AREAL / "mb_tokens.yaml", src)
    before = fingerprint(src)
    changes = fix_config(src, confinement=ANYWHERE).changes
    allow = Confinement.for_paths([src])
    with pytest.raises(UserError, match="input file"):
        write_corrected(src, src, changes, confinement=allow)
    link = tmp_path / "link.yaml"
    link.symlink_to(src)
    with pytest.raises(UserError, match="input file"):
        write_corrected(src, link, changes, confinement=allow)
    hard = tmp_path / "hard.yaml"
    hard.hardlink_to(src)
    with pytest.raises(UserError, match="input file"):
        write_corrected(src, hard, changes, confinement=allow, force=True)
    existing = tmp_path / "out.yaml"
    existing.write_text("keep me\n")
    with pytest.raises(UserError, match="already exists"):
        write_corrected(src, existing, changes, confinement=allow)
    assert existing.read_text() == "keep me\n"
    write_corrected(src, existing, changes, confinement=allow, force=True)
    assert "max_tokens_per_mb: 2048" in existing.read_text()
    assert fingerprint(src) == before


def test_no_change_needed_gives_an_identical_text() -> None:
    result = fix_config(AREAL / "base.yaml", confinement=ANYWHERE)
    assert result.changes == [] and result.diff == ""
    assert result.text == (AREAL / "base.yaml").read_text()


@pytest.mark.parametrize(("path", "rule", "options", "key", "new"), FIXED, ids=lambda v: v.name if isinstance(v, Path) else None)
def test_old_values_are_the_values_in_effect(path: Path, rule: str, options: dict, key: str, new) -> None:
    """Replaying fix-config's changes in order, each one's old value is what the config has in effect
    at that point: after earlier renames, with documented defaults for keys left out."""
    from rlmedic.tools.config.fix import _copy_launch, apply_changes, load_config

    result = fix_config(path, **_options(options), confinement=ANYWHERE)
    framework, config = load_config(path, confinement=ANYWHERE)
    work = config.copy() if framework == "areal" else _copy_launch(config)
    assert result.changes
    for change in result.changes:
        if change.op not in ("rename", "remove_value"):  # those carry the old name / the stray text
            assert change.old == work.value(change.key), (change.key, change.old, work.value(change.key))
        apply_changes(framework, work, [change])


def test_old_value_follows_a_rename_and_defaults(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text((AREAL / "colocated_a40.yaml").read_text().replace("  mem_fraction_static:", "  mem_fraction_statc:"))
    result = fix_config(typo, snapshot=load_snapshot(GPU / "a40_idle.json", confinement=ANYWHERE), confinement=ANYWHERE)
    assert [c.op for c in result.changes][:1] == ["rename"]
    fraction = next(c for c in result.changes if c.key == "sglang.mem_fraction_static")
    assert fraction.old == 0.8  # the renamed key's value, not None
    timeouts = fix_config(AREAL / "request_timeouts.yaml", spot=True, confinement=ANYWHERE)
    change = next(c for c in timeouts.changes if c.key == "rollout.request_timeout")
    assert (change.old, change.new) == (3600, 7200)  # AReaL's documented default, as lint reads it


@pytest.mark.parametrize(("path", "rule", "options", "key", "new"), FIXED, ids=lambda v: v.name if isinstance(v, Path) else None)
def test_everything_lint_marks_fixable_is_fixed_or_listed(path: Path, rule: str, options: dict, key: str, new) -> None:
    opts = _options(options)
    for spot in (False, True):
        opts["spot"] = spot
        lint = lint_config(path, snapshot=opts.get("snapshot"), spot=spot, confinement=ANYWHERE)
        result = fix_config(path, **opts, confinement=ANYWHERE)
        handled = {c.key for c in result.changes} | {c.key for c in result.actions} | {c.key for c in result.settled}
        for problem in lint.problems:
            for change in problem.fixes:
                assert change.key in handled, (problem.rule, change.key, spot)


def test_an_info_level_fix_is_listed_to_do_by_hand() -> None:
    result = fix_config(AREAL / "fileroot_tmp.yaml", confinement=ANYWHERE)
    assert not result.changes
    action = next(a for a in result.actions if a.key == "cluster.fileroot")
    assert action.reason.startswith("edit by hand") and "info only" in action.reason


def test_separation_is_the_default_and_the_fixed_config_relints_clean(tmp_path: Path) -> None:
    """The issue's case: no scheduling_strategy, an 8-GPU node, both engines on d8."""
    lint = lint_config(AREAL / "separation_default.yaml", confinement=ANYWHERE)
    [problem] = [p for p in lint.problems if p.severity == "error"]
    assert problem.rule == "areal-backend-fits-cluster"
    assert "16 GPUs requested, 8 available" in problem.message and "separation (the default)" in problem.message
    result = fix_config(AREAL / "separation_default.yaml", confinement=ANYWHERE)
    assert [(c.key, c.old, c.new) for c in result.changes] == [("rollout.backend", "sglang:d8", "sglang:d4"),
                                                                ("actor.backend", "fsdp:d8", "fsdp:d4")]
    out = write_corrected(AREAL / "separation_default.yaml", tmp_path / "fixed.yaml", result.changes,
                          confinement=Confinement.for_paths([AREAL / "separation_default.yaml"]))
    assert lint_config(out, confinement=ANYWHERE).problems == []
    # said explicitly, colocation shares the 8 GPUs and is no longer a count problem
    colocated = tmp_path / "colocated.yaml"
    colocated.write_text((AREAL / "separation_default.yaml").read_text().replace(
        '  backend: "sglang:d8"\n', '  backend: "sglang:d8"\n  scheduling_strategy:\n    type: colocation\n'))
    assert not [p for p in lint_config(colocated, confinement=ANYWHERE).problems if p.rule == "areal-backend-fits-cluster"]


def test_a_migration_lists_no_change_that_is_already_in_effect(tmp_path: Path) -> None:
    """The misspelt removed cap: one set that creates actor.rejection_sampling (nothing was in effect
    before: the section defaults to null), no "ratio -> ratio", nothing left "to do by hand"."""
    src = tmp_path / "cap.yaml"
    src.write_text((AREAL / "base.yaml").read_text().replace("\nactor:\n", "\nactor:\n  behav_imp_weight_cap: 5.0\n", 1))
    lint = lint_config(src, confinement=ANYWHERE)
    [typo] = [p for p in lint.problems if p.rule == "schema-typo"]
    assert "did you mean" not in typo.message and "use actor.rejection_sampling instead" in typo.message
    result = fix_config(src, confinement=ANYWHERE)
    assert [(c.op, c.key, c.old, c.new) for c in result.changes] == [
        ("set", "actor.rejection_sampling.upper", None, 5.0),
        ("delete", "actor.behav_imp_weight_cap", 5.0, None),
    ]
    assert all(c.op != "set" or c.old != c.new for c in result.changes)
    assert not [a for a in result.actions if "rejection_sampling" in str(a)]
    assert [c.key for c in result.settled] == ["actor.rejection_sampling.metric"]
    assert "+  rejection_sampling:\n+    upper: 5.0" in result.diff


def _colocated(tmp_path: Path, **replace: str) -> Path:
    text = (AREAL / "colocated_a40.yaml").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "colocated.yaml"
    path.write_text(text)
    return path


def test_colocated_memory_pulls_the_micro_batch_lever_when_checkpointing_is_already_on(tmp_path: Path) -> None:
    """Small colocated GPU, gradient checkpointing on, 64k tokens per micro-batch: no SGLang share fits
    until the micro-batch holds one sequence; that is the change proposed (and the fixed config fits)."""
    from rlmedic.tools.config.checks import colocation_report
    from rlmedic.tools.config.areal import load_areal_config
    from rlmedic.tools.gpu.snapshot import load_snapshot

    src = _colocated(tmp_path, **{"gradient_checkpointing: false": "gradient_checkpointing: true",
                                  "max_tokens_per_mb: 5120": "max_tokens_per_mb: 65536"})
    snapshot = load_snapshot(GPU / "a40_idle.json", confinement=ANYWHERE)
    ctx = LintContext(snapshot=snapshot)
    assert colocation_report(load_areal_config(src, confinement=ANYWHERE), ctx).max_mem_fraction is None
    lint = lint_config(src, snapshot=snapshot, confinement=ANYWHERE)
    [problem] = [p for p in lint.problems if p.rule == "areal-colocated-memory"]
    assert [(f.key, f.new) for f in problem.fixes][0] == ("actor.mb_spec.max_tokens_per_mb", 1536)
    result = fix_config(src, snapshot=snapshot, confinement=ANYWHERE)
    assert not [p for p in result.remaining if p.rule == "areal-colocated-memory"]


def test_colocated_memory_says_when_no_lever_is_enough(tmp_path: Path) -> None:
    """A 32B model on one A40: every lever together leaves no room; the message says so and what to do."""
    src = _colocated(tmp_path, **{"Qwen/Qwen2.5-0.5B-Instruct": "Qwen/Qwen2.5-32B-Instruct"})
    lint = lint_config(src, snapshot=load_snapshot(GPU / "a40_idle.json", confinement=ANYWHERE), confinement=ANYWHERE)
    [problem] = [p for p in lint.problems if p.rule == "areal-colocated-memory"]
    assert "every memory lever" in problem.message and "gradient checkpointing" in problem.message
    assert "optimizer offload" in problem.message and "separate GPUs" in problem.message
    assert problem.fixes == [] or all(f.key != "sglang.mem_fraction_static" for f in problem.fixes)


def test_rules_judge_the_renamed_config_not_the_misspelt_one() -> None:
    """gconfig.max_new_token (a typo) hides max_new_tokens: 1024, so the micro-batch rule measured a
    sequence with the 16384 default; once renamed, the 10240-token micro-batch holds 1024 + 1024."""
    lint = lint_config(AREAL / "schema_typo.yaml", confinement=ANYWHERE)
    assert any(p.rule == "areal-mb-tokens-cover-sequence" for p in lint.problems)  # the input, as AReaL reads it
    result = fix_config(AREAL / "schema_typo.yaml", confinement=ANYWHERE)
    assert [(c.op, c.key) for c in result.changes] == [("rename", "gconfig.max_new_token"), ("set", "actor.weight_update_mode")]
    assert "actor.mb_spec.max_tokens_per_mb" in {c.key for c in result.settled}
    assert not [a for a in result.actions if "max_tokens_per_mb" in str(a)]
    assert result.fixed_valid
