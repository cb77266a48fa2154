"""AReaL YAML: round-trip loading, text-patch edits, the schema check, backend strings."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import ANYWHERE, SHARED
from rlmedic.errors import UserError
from rlmedic.tools.config.areal import (
    check_schema,
    load_areal_config,
    parse_allocation_mode,
    parse_areal_config,
    parse_backend,
    roundtrip_dump,
)
from rlmedic.tools.config.rules import LintContext
from rlmedic.tools.config.checks import lint_areal

UPSTREAM = SHARED / "corpus" / "areal-configs"
UPSTREAM_CONFIGS = sorted(UPSTREAM.rglob("*.yaml"))


def test_upstream_corpus_is_there(shared: Path) -> None:
    assert len(UPSTREAM_CONFIGS) >= 50


# without ../shared, one placeholder that the `shared` fixture skips (not pytest's empty-set skip)
@pytest.mark.parametrize("path", UPSTREAM_CONFIGS or [UPSTREAM], ids=lambda p: str(p.relative_to(UPSTREAM)) if UPSTREAM_CONFIGS else "none")
def test_upstream_configs_parse_lint_and_round_trip(path: Path, shared: Path) -> None:
    original = path.read_bytes()
    config = load_areal_config(path, confinement=ANYWHERE)
    problems = lint_areal(config, LintContext())
    assert all(p.severity in ("critical", "error", "warning", "info") for p in problems)
    assert all(p.citation is not None for p in problems)
    # unchanged round trip: byte for byte
    assert config.dump().encode() == original
    assert config.diff() == ""
    assert not config.changed


def test_ruamel_emitter_round_trips_the_canonical_example(shared: Path) -> None:
    """The round-trip dumper (used as a fallback) keeps comments, order, quotes and nulls."""
    path = UPSTREAM / "math" / "gsm8k_grpo.yaml"
    assert roundtrip_dump(load_areal_config(path, confinement=ANYWHERE)) == path.read_text()


def test_upstream_typo_found_with_the_right_suggestion(shared: Path) -> None:
    """scaffolding/*.yaml misspell behave_imp_weight_cap (itself replaced by rejection_sampling)."""
    config = load_areal_config(UPSTREAM / "scaffolding" / "gsm8k_rlvr_scaffolding.yaml", confinement=ANYWHERE)
    typos = [p for p in check_schema(config) if p.rule == "schema-typo"]
    assert [(p.key, p.suggestion, p.severity) for p in typos] == [
        ("actor.behav_imp_weight_cap", "behave_imp_weight_cap", "error")
    ]
    assert "rejection_sampling" in typos[0].message
    assert typos[0].line == 70


def test_custom_sections_are_not_typos(shared: Path) -> None:
    """tau2's econfig is one letter from gconfig but shares none of its fields: a custom section."""
    config = load_areal_config(UPSTREAM / "tau2" / "config_8b_airline.yaml", confinement=ANYWHERE)
    econfig = [p for p in check_schema(config) if p.key == "econfig"]
    assert econfig and econfig[0].rule == "schema-unknown" and econfig[0].severity == "info"


def test_removed_option_points_at_its_replacement(shared: Path) -> None:
    config = load_areal_config(UPSTREAM / "math" / "gsm8k_grpo_megatron_lora.yaml", confinement=ANYWHERE)
    removed = [p for p in check_schema(config) if p.rule == "schema-removed"]
    assert [p.key for p in removed] == ["actor.behave_imp_weight_cap"]
    assert "actor.rejection_sampling" in removed[0].message


def test_upstream_config_with_a_too_small_micro_batch(shared: Path) -> None:
    """search_scaffolding.yaml: max_length 8192 + max_new_tokens 2048 > max_tokens_per_mb 8192."""
    config = load_areal_config(UPSTREAM / "scaffolding" / "search_scaffolding.yaml", confinement=ANYWHERE)
    found = {p.key for p in lint_areal(config) if p.rule == "areal-mb-tokens-cover-sequence"}
    assert found == {"actor.mb_spec.max_tokens_per_mb", "ref.mb_spec.max_tokens_per_mb"}


def test_schema_type_and_choice_checks() -> None:
    config = parse_areal_config("gconfig:\n  n_samples: four\nactor:\n  weight_update_mode: nccl\n  kl_estimator: k3\n")
    by_key = {p.key: p for p in check_schema(config)}
    assert by_key["gconfig.n_samples"].rule == "schema-type"
    assert by_key["actor.weight_update_mode"].rule == "schema-choice"
    assert "actor.kl_estimator" not in by_key


def test_lists_of_scheduling_specs_are_checked() -> None:
    config = parse_areal_config("actor:\n  scheduling_spec:\n    - task_type: worker\n      gpus: 1\n")
    problems = check_schema(config)
    assert [(p.key, p.suggestion) for p in problems] == [("actor.scheduling_spec.0.gpus", "gpu")]


# --------------------------------------------------------------------------- reading


SAMPLE = """\
experiment_name: demo  # the experiment
trial_name: t0
cluster:
  n_gpus_per_node: 8
  fileroot: /data/exp
rollout:
  backend: "sglang:d4p1t1"
  fileroot: ${cluster.fileroot}
  note: "${cluster.fileroot}/x"
actor:
  path: Qwen/Qwen2.5-1.5B-Instruct
  scheduling_spec:
    - task_type: worker
      mem: 32
  optimizer:
    lr: 1.0e-5   # keep
gconfig:
  max_new_tokens: 1024
sglang:
  model_path: ${actor.path}
  mem_fraction_static:
"""


def test_get_resolves_interpolations_and_lists() -> None:
    config = parse_areal_config(SAMPLE)
    assert config.get("rollout.fileroot") == "/data/exp"
    assert config.get("rollout.note") == "/data/exp/x"
    assert config.get("rollout.fileroot", resolve=False) == "${cluster.fileroot}"
    assert config.get("sglang.model_path") == "Qwen/Qwen2.5-1.5B-Instruct"
    assert config.get("actor.scheduling_spec.0.mem") == 32
    assert config.get("nope.nothing", "dflt") == "dflt"
    assert config.line("actor.optimizer.lr") == 16
    assert config.get("sglang.mem_fraction_static") is None


def test_invalid_yaml_is_a_user_error() -> None:
    with pytest.raises(UserError, match="invalid YAML at line 2"):
        parse_areal_config("a: 1\n  b: [\n")
    with pytest.raises(UserError, match="mapping"):
        parse_areal_config("- a\n- b\n")


# --------------------------------------------------------------------------- editing


def _changed_lines(config) -> list[str]:
    return [line for line in config.diff().splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_set_existing_scalar_keeps_comment_and_touches_one_line() -> None:
    config = parse_areal_config(SAMPLE)
    config.set("actor.optimizer.lr", 2e-5)
    assert _changed_lines(config) == ["-    lr: 1.0e-5   # keep", "+    lr: 2e-05   # keep"]
    assert config.get("actor.optimizer.lr") == 2e-5


def test_set_keeps_double_quotes() -> None:
    config = parse_areal_config(SAMPLE)
    config.set("rollout.backend", "sglang:d2p1t2")
    assert '  backend: "sglang:d2p1t2"\n' in config.dump()


def test_set_empty_value_and_list_item() -> None:
    config = parse_areal_config(SAMPLE)
    config.set("sglang.mem_fraction_static", 0.5)
    config.set("actor.scheduling_spec.0.mem", 64)
    text = config.dump()
    assert "  mem_fraction_static: 0.5\n" in text
    assert "      mem: 64\n" in text


def test_insert_key_into_existing_section_and_create_sections() -> None:
    config = parse_areal_config(SAMPLE)
    config.set("actor.gradient_checkpointing", True)
    config.set("rollout.request_timeout", 7200)
    config.set("recover.mode", "auto")
    text = config.dump()
    # after the last key of actor's block (past the nested list and mapping), same indentation
    assert "    lr: 1.0e-5   # keep\n  gradient_checkpointing: true\ngconfig:" in text
    assert '  note: "${cluster.fileroot}/x"\n  request_timeout: 7200\nactor:' in text
    assert text.endswith("recover:\n  mode: auto\n")
    assert config.get("recover.mode") == "auto"


def test_insert_into_list_item_mapping() -> None:
    config = parse_areal_config(SAMPLE)
    config.set("actor.scheduling_spec.0.cpu", 4)
    assert "      mem: 32\n      cpu: 4\n" in config.dump()


def test_delete_and_rename() -> None:
    config = parse_areal_config(SAMPLE)
    config.delete("actor.scheduling_spec")
    config.rename("gconfig.max_new_tokens", "max_new_token")
    text = config.dump()
    assert "scheduling_spec" not in text and "task_type" not in text
    assert "  max_new_token: 1024\n" in text
    assert config.get("actor.optimizer.lr") == 1e-5


def test_strings_that_need_quotes_are_quoted() -> None:
    config = parse_areal_config(SAMPLE)
    config.set("trial_name", "yes")
    config.set("experiment_name", "a: b")
    assert config.get("trial_name") == "yes" and config.get("experiment_name") == "a: b"
    assert 'experiment_name: "a: b"  # the experiment' in config.dump()


def test_setting_inside_a_scalar_is_refused() -> None:
    config = parse_areal_config(SAMPLE)
    with pytest.raises(UserError, match="not a mapping"):
        config.set("trial_name.sub", 1)


def test_copy_is_independent() -> None:
    config = parse_areal_config(SAMPLE)
    other = config.copy()
    other.set("trial_name", "t1")
    assert config.get("trial_name") == "t0" and other.get("trial_name") == "t1"


# --------------------------------------------------------------------------- backend strings


@pytest.mark.parametrize(
    ("text", "world", "dims"),
    [
        ("sglang:d4p1t1", 4, (4, 1, 1, 1)),
        ("sglang:d2t4", 8, (2, 4, 1, 1)),
        ("fsdp:d2c2", 4, (2, 1, 1, 2)),
        ("megatron:d2p2t4", 16, (2, 4, 2, 1)),
        ("megatron:d2p2t4e4", 16, (2, 4, 2, 1)),
        ("archon:d8", 8, (8, 1, 1, 1)),
    ],
)
def test_parse_backend(text: str, world: int, dims: tuple[int, int, int, int]) -> None:
    spec = parse_backend(text)
    assert spec.world == world
    assert (spec.d, spec.t, spec.p, spec.c) == dims


def test_parse_hybrid_moe_backend() -> None:
    spec = parse_backend("megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)")
    assert spec.hybrid and spec.world == 32


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("d4t2", "backend prefix"),
        ("fsdp:d2p2", "does not support the 'p'"),
        ("sglang:d4c2", "does not support the 'c'"),
        ("tensorrt:d2", "unknown backend"),
        ("fsdp:d2x3", "cannot read"),
        ("fsdp:d2d2", "twice"),
        ("megatron:(attn:d4p2t2|ffn:d2p1t4)", "pipeline size"),
    ],
)
def test_bad_backends(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_backend(text)


def test_parse_allocation_mode() -> None:
    gen, train = parse_allocation_mode("sglang:d2p1t2+d2p1t1c2")
    assert (gen.backend, gen.world, train.backend, train.world) == ("sglang", 4, "fsdp", 4)
    gen, train = parse_allocation_mode("sglang.d2t2+d4")
    assert gen.t == 2 and train.d == 4
    assert parse_allocation_mode("d8")[0] is None
    with pytest.raises(ValueError, match="training backend"):
        parse_allocation_mode("fsdp:d4+d4")


def test_with_dims_keeps_the_written_order() -> None:
    assert parse_backend("sglang:d4p1t1").with_dims(d=2, t=2).raw == "sglang:d2p1t2"
    assert parse_backend("fsdp:d4").with_dims(d=2, c=2).raw == "fsdp:d2c2"


def test_load_reads_through_confinement(tmp_path: Path) -> None:
    from rlmedic.confine import Confinement
    from rlmedic.errors import AccessDenied

    path = tmp_path / "c.yaml"
    path.write_text("trial_name: t\n")
    with pytest.raises(AccessDenied):
        load_areal_config(path, confinement=Confinement(roots=[tmp_path / "elsewhere"]))
    assert load_areal_config(path, confinement=ANYWHERE).get("trial_name") == "t"


def test_roundtrip_dump_is_yaml() -> None:
    from ruamel.yaml import YAML

    text = roundtrip_dump(parse_areal_config(SAMPLE))
    assert YAML().load(io.StringIO(text))["cluster"]["n_gpus_per_node"] == 8


def test_flow_collections_edit_in_place() -> None:
    config = parse_areal_config("stats_logger:\n  wandb: {mode: disabled, project: x}\n  tags: [a, b]\nseed: 1")
    config.set("stats_logger.wandb.mode", "online")
    config.set("stats_logger.tags.1", "c")
    assert config.dump() == "stats_logger:\n  wandb: {mode: online, project: x}\n  tags: [a, c]\nseed: 1"
    with pytest.raises(UserError, match="flow mapping"):
        config.set("stats_logger.wandb.entity", "me")


def test_insert_keeps_blank_lines_and_comments_between_sections() -> None:
    config = parse_areal_config("a:\n  x: 1\n\n# about b\nb:\n  y: 2")
    config.set("a.w", 4)
    config.set("b.z", 3)
    assert config.dump() == "a:\n  x: 1\n  w: 4\n\n# about b\nb:\n  y: 2\n  z: 3\n"


MERGED = """\
experiment_name: e
trial_name: t
base_mb: &mb
  max_tokens_per_mb: 1024
actor:
  path: /models/Qwen
  mb_spec:
    <<: *mb
ref:
  mb_spec:
    <<: *mb
    max_tokens_per_mb: 2048
"""


def test_keys_from_a_yaml_merge_are_set_locally() -> None:
    """Setting a key that only came in through `<<: *anchor` crashed (TypeError in the text patch)."""
    cfg = parse_areal_config(MERGED, "c.yaml")
    assert cfg.get("actor.mb_spec.max_tokens_per_mb") == 1024
    cfg.set("actor.mb_spec.max_tokens_per_mb", 5120)
    cfg.set("ref.mb_spec.max_tokens_per_mb", 6144)
    again = parse_areal_config(cfg.dump(), "c.yaml")
    assert again.get("actor.mb_spec.max_tokens_per_mb") == 5120
    assert again.get("ref.mb_spec.max_tokens_per_mb") == 6144
    assert again.get("base_mb.max_tokens_per_mb") == 1024  # the anchor (shared) is left alone
    assert "    <<: *mb\n    max_tokens_per_mb: 5120\n" in cfg.dump()
    fresh = parse_areal_config(MERGED, "c.yaml")
    with pytest.raises(UserError, match="merge"):
        fresh.delete("actor.mb_spec.max_tokens_per_mb")
    with pytest.raises(UserError, match="merge"):
        fresh.rename("actor.mb_spec.max_tokens_per_mb", "max_tokens")
    assert fresh.dump() == MERGED


def test_fix_config_on_a_config_with_merge_keys(tmp_path: Path) -> None:
    from rlmedic.confine import Confinement
    from rlmedic.tools.config.fix import fix_config, lint_config, write_corrected

    src = tmp_path / "c.yaml"
    src.write_text(MERGED + "train_dataset:\n  max_length: 4096\ngconfig:\n  max_new_tokens: 1024\n")
    result = fix_config(src, confinement=ANYWHERE)
    write_corrected(src, tmp_path / "fixed.yaml", result.changes, confinement=Confinement.for_paths([src]))
    assert {c.key for c in result.changes} == {"actor.mb_spec.max_tokens_per_mb", "ref.mb_spec.max_tokens_per_mb"}
    assert result.fixed_valid and lint_config(tmp_path / "fixed.yaml", confinement=ANYWHERE).valid
