"""The config checks: one function per rule in ``config_rules.yaml``, and the lint entry points.

A check takes a parsed config (AReaL YAML or slime launch arguments), the
:class:`~rlmedic.tools.config.rules.LintContext` and its :class:`Rule`, and returns the
problems it finds, each with the change that would fix it. Register a new check with
``@check("name")`` and name it in the table.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlmedic.tools.citations import citation_from
from rlmedic.tools.config.rules import (
    DEFAULT_PERSISTENT_ROOT,
    LONG_RUN_REQUEST_RETRIES,
    LONG_RUN_REQUEST_TIMEOUT,
    SPOT_RECOVER_FREQ_SECS,
    LintContext,
    Rule,
    _float,
    _int,
    _sort,
    _table,
    config_finding,
    parse_rules,
)
from rlmedic.types import Finding, Fix

if TYPE_CHECKING:  # pragma: no cover
    from rlmedic.tools.config.areal import ArealConfig
    from rlmedic.tools.config.slime import SlimeLaunch
    from rlmedic.tools.gpu.advice import ModelSpec


CheckFn = Callable[[Any, "LintContext", Rule], list[Finding]]
CHECKS: dict[str, CheckFn] = {}


def check(name: str) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        CHECKS[name] = fn
        return fn

    return register


def load_rules(path: str | None = None) -> dict[str, Rule]:
    """The rules table, each rule bound to a check that exists here."""
    return parse_rules(CHECKS, path)


def lint_areal(config: ArealConfig, ctx: LintContext | None = None, *, rules: dict[str, Rule] | None = None) -> list[Finding]:
    """Schema check plus every AReaL rule."""
    from rlmedic.tools.config.areal import check_schema

    ctx = ctx or LintContext()
    problems = check_schema(config)
    if not config.data:  # the slime parser says the same of a script without flags
        problems.append(config_finding("", "no settings found: the file is empty or only comments (is this the "
                                       "config the run uses?)", "warning", rule="areal-parse"))
    attach_schema_fixes(config, problems)
    for rule in (rules or load_rules()).values():
        if rule.framework == "areal":
            problems += CHECKS[rule.check](config, ctx, rule)
    return _sort(problems)


def lint_slime(launch: SlimeLaunch, ctx: LintContext | None = None, *, rules: dict[str, Rule] | None = None) -> list[Finding]:
    """Every slime rule over parsed launch arguments."""
    from rlmedic.tools.config.slime_flags import check_flags

    ctx = ctx or LintContext()
    problems = list(launch.problems) + check_flags(launch)
    for rule in (rules or load_rules()).values():
        if rule.framework == "slime":
            problems += CHECKS[rule.check](launch, ctx, rule)
    return _sort(problems)


# =========================================================================== AReaL checks


def load_migrations(path: str | None = None) -> dict[str, Any]:
    return _table(path).get("migrations", {})


def attach_schema_fixes(cfg: ArealConfig, problems: list[Finding]) -> None:
    """Give schema problems their fix: rename a typo, migrate a removed option, correct a choice."""
    migrations = load_migrations()
    for problem in problems:
        last = problem.key.rsplit(".", 1)[-1]
        if problem.rule == "schema-removed":
            problem.fixes = _migrate(cfg, problem, last, migrations.get(last))
        elif problem.rule == "schema-typo" and problem.suggestion:
            if problem.suggestion in migrations:
                problem.fixes = _migrate(cfg, problem, problem.suggestion, migrations[problem.suggestion])
            else:
                problem.fixes = [Fix(op="rename", key=problem.key, old=last, new=problem.suggestion,
                                     why=f"{problem.suggestion} is the AReaL option", rule=problem.rule,
                                     citations=tuple(problem.citations))]
        elif problem.rule == "schema-choice" and problem.suggestion:
            problem.fixes = [Fix(op="set", key=problem.key, old=cfg.get(problem.key), new=problem.suggestion,
                                 why="the closest allowed value", rule=problem.rule, citations=tuple(problem.citations))]


def _migrate(cfg: ArealConfig, problem: Finding, name: str, migration: dict[str, Any] | None) -> list[Fix]:
    if not migration:
        return []
    parent = problem.key.rsplit(".", 1)[0] if "." in problem.key else ""
    prefix = f"{parent}." if parent else ""
    value = _plain_value(cfg.get(problem.key))
    cites = tuple(citation_from(c) for c in migration.get("citations", [])) or tuple(problem.citations)
    changes: list[Fix] = []
    settings: dict[str, Any] | None = {}
    if "to" in migration:
        settings = {migration["to"]: value, **migration.get("also", {})}
    elif "values" in migration:
        if value not in migration["values"]:
            return []
        settings = migration["values"][value]
    for sub, new in (settings or {}).items():
        target = prefix + sub
        if not cfg.has(target):
            changes.append(Fix(op="set", key=target, new=new, rule=problem.rule, citations=cites,
                               why=f"replaces the removed {name}: {problem.key.rsplit('.', 1)[-1]} = {value!r}"))
    changes.append(Fix(op="delete", key=problem.key, old=value, why=f"{name} no longer exists in AReaL", rule=problem.rule,
                       citations=cites))
    return changes


def _plain_value(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def areal_model(cfg: ArealConfig, ctx: LintContext) -> ModelSpec | None:
    """Architecture facts of ``actor.path`` (context override, local config.json, or the shipped table)."""
    if ctx.model is not None:
        return ctx.model
    from rlmedic.tools.gpu.advice import model_spec

    return model_spec(cfg.get("actor.path"), confinement=ctx.confinement)


@dataclass
class ArealLayout:
    rollout: Any  # ParallelSpec | None
    train: Any
    rollout_key: str
    train_key: str
    n_nodes: int
    per_node: int
    colocated: bool  # rollout.scheduling_strategy.type is colocation (default: separation)

    @property
    def cluster_gpus(self) -> int:
        return self.n_nodes * self.per_node


def areal_layout(cfg: ArealConfig) -> ArealLayout:
    """Where rollout and training run, from per-engine backends or the legacy allocation_mode."""
    from rlmedic.tools.config.areal import parse_allocation_mode, parse_backend

    rollout = train = None
    rollout_key = train_key = ""
    for key, kind in (("rollout.backend", "rollout"), ("actor.backend", "train")):
        value = cfg.get(key)
        if isinstance(value, str) and value and "${" not in value:
            try:
                spec = parse_backend(value)
            except ValueError:
                continue
            if kind == "rollout":
                rollout, rollout_key = spec, key
            else:
                train, train_key = spec, key
    legacy = cfg.get("allocation_mode")
    if isinstance(legacy, str) and legacy and (rollout is None or train is None):
        try:
            gen, trn = parse_allocation_mode(legacy)
        except ValueError:
            gen = trn = None
        if rollout is None and gen is not None:
            rollout, rollout_key = gen, "allocation_mode"
        if train is None and trn is not None:
            train, train_key = trn, "allocation_mode"
    n_nodes = _int(cfg.value("cluster.n_nodes")) or 1
    per_node = _int(cfg.value("cluster.n_gpus_per_node"))
    if per_node is None:
        per_node = 8
    # separation unless the config says colocation: AReaL's documented default, applied before any rule
    colocated = cfg.value("rollout.scheduling_strategy.type") == "colocation"
    return ArealLayout(rollout, train, rollout_key, train_key, n_nodes, per_node, colocated)


@check("areal_mb_tokens_cover_sequence")
def _areal_mb_tokens(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    max_length = _int(cfg.value("train_dataset.max_length"))
    new_tokens = _int(cfg.value("gconfig.max_new_tokens"))
    if max_length is None or new_tokens is None:
        return []
    need = max_length + new_tokens
    problems = []
    for role in ("actor", "ref", "critic"):
        key = f"{role}.mb_spec.max_tokens_per_mb"
        raw = cfg.get(key, resolve=False)
        value = _int(cfg.get(key))
        if value is None or value >= need:
            continue
        changes = []
        if not (isinstance(raw, str) and "${" in raw):
            changes.append(rule.change(key, value, need, f"a micro-batch must hold one whole sequence: max_length {max_length} + max_new_tokens {new_tokens} = {need}"))
        problems.append(
            rule.problem(
                ctx, key,
                f"{key} = {value} is below train_dataset.max_length + gconfig.max_new_tokens = {max_length} + {new_tokens} = {need}; "
                "a full-length sequence cannot fit into one micro-batch",
                line=cfg.line(key), changes=changes,
            )
        )
    return problems


_ENGINE_KEYS = ("rollout.backend", "actor.backend", "ref.backend", "critic.backend", "teacher.backend")


def _allocation_dims(cfg: ArealConfig, *, rollout: bool) -> str:
    """The parallel dimensions the legacy ``allocation_mode`` gives the rollout (or training) engine, e.g. ``d4t2``; "" when none."""
    from rlmedic.tools.config.areal import parse_allocation_mode

    legacy = cfg.get("allocation_mode")
    if not isinstance(legacy, str) or not legacy.strip() or "${" in legacy:
        return ""
    try:
        gen, train = parse_allocation_mode(legacy)
    except ValueError:
        return ""
    spec = gen if rollout else train
    if spec is None or spec.hybrid:
        return ""
    return spec.raw.split(":", 1)[1]


@check("areal_backend_syntax")
def _areal_backend_syntax(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    from rlmedic.tools.config.areal import INFERENCE_BACKENDS, TRAIN_BACKENDS, parse_allocation_mode, parse_backend

    problems = []
    for key in _ENGINE_KEYS:
        raw = cfg.get(key, resolve=False)
        if not isinstance(raw, str) or not raw.strip() or "${" in raw:
            continue
        try:
            parse_backend(raw)
        except ValueError as exc:
            changes = []
            default = "sglang" if key.startswith("rollout") else "fsdp"
            bare = raw.strip().lower()
            if ":" not in bare and bare in {**INFERENCE_BACKENDS, **TRAIN_BACKENDS}:
                # a backend name without dimensions: the legacy allocation_mode, when there, says them
                dims = _allocation_dims(cfg, rollout=key.startswith("rollout"))
                proposed = f"{bare}:{dims}" if dims else ""
                try:
                    parse_backend(proposed)
                except ValueError:
                    proposed = ""
                if proposed:
                    changes.append(rule.change(key, raw, proposed, f"allocation_mode {cfg.get('allocation_mode')!r} gives the "
                                               f"{'rollout' if key.startswith('rollout') else 'training'} engine {dims}"))
            else:
                try:
                    parse_backend(f"{default}:{raw.strip()}")
                    changes.append(rule.change(key, raw, f"{default}:{raw.strip()}",
                                               f"backend strings need an explicit backend prefix; {default} is AReaL's usual engine for {key.split('.')[0]}"))
                except ValueError:
                    pass
            problems.append(rule.problem(ctx, key, f"{key} = {raw!r}: {exc}", line=cfg.line(key), changes=changes))
    legacy = cfg.get("allocation_mode", resolve=False)
    if isinstance(legacy, str) and legacy.strip() and "${" not in legacy:
        try:
            parse_allocation_mode(legacy)
        except ValueError as exc:
            problems.append(rule.problem(ctx, "allocation_mode", f"allocation_mode = {legacy!r}: {exc}", line=cfg.line("allocation_mode")))
    return problems


@check("areal_allocation_mode_deprecated")
def _areal_allocation_deprecated(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    legacy = cfg.get("allocation_mode")
    if not isinstance(legacy, str) or not legacy.strip():
        return []
    return [rule.problem(ctx, "allocation_mode",
                         f"allocation_mode ({legacy!r}) is deprecated; newer AReaL reads rollout.backend and actor.backend instead "
                         "(only the legacy SPMD launchers read it)", line=cfg.line("allocation_mode"))]


@check("areal_backend_fits_cluster")
def _areal_backend_fits(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    from rlmedic.tools.gpu.advice import snapshot_gpu_count

    layout = areal_layout(cfg)
    if layout.per_node == 0:  # CPU template
        return []
    problems = []
    visible = snapshot_gpu_count(ctx.snapshot)
    per_node = layout.per_node
    changes: list[Fix] = []
    if visible is not None and layout.n_nodes == 1 and visible < per_node:
        changes.append(rule.change("cluster.n_gpus_per_node", per_node, visible,
                                   f"the GPU snapshot shows {visible} GPU(s) on this machine"))
        problems.append(rule.problem(
            ctx, "cluster.n_gpus_per_node",
            f"cluster.n_gpus_per_node = {per_node} but the snapshot shows {visible} GPU(s)",
            line=cfg.line("cluster.n_gpus_per_node"), changes=changes,
        ))
        per_node = visible
    cluster = layout.n_nodes * per_node
    rollout, train = layout.rollout, layout.train
    separated = not layout.colocated and rollout is not None and train is not None
    strategy_key = "rollout.scheduling_strategy.type"
    how = f"{strategy_key} is separation ({'the default' if not cfg.has(strategy_key) else 'as set'})"

    def split_fix() -> list[Fix]:
        if layout.rollout_key == layout.train_key:  # legacy allocation_mode: one string for both, edit by hand
            return []
        split = _separated_split(rollout, train, cluster)
        if split is None:
            if max(rollout.world, train.world) > cluster:
                return []
            return [rule.change(strategy_key, cfg.value(strategy_key), "colocation",
                                f"{cluster} GPU(s) cannot hold both engines side by side, but each fits alone: colocate them "
                                "(SGLang and the trainer take turns on the same GPUs)")]
        why = (f"separated engines share the {cluster} GPUs: {split[0].raw} ({split[0].world}) + {split[1].raw} "
               f"({split[1].world}); t/p/c kept, data-parallel replicas reduced (or set {strategy_key}: colocation "
               "to run both on the same GPUs)")
        return [rule.change(k, old.raw, new.raw, why) for k, old, new in
                ((layout.rollout_key, rollout, split[0]), (layout.train_key, train, split[1])) if new.raw != old.raw]

    for spec, key in ((rollout, layout.rollout_key), (train, layout.train_key)):
        if spec is None or spec.world <= cluster:
            continue
        fix: list[Fix] = []
        inner = spec.world // spec.d
        if separated:
            fix = split_fix()
        elif key != "allocation_mode" and inner <= cluster:
            new_d = max(1, cluster // inner)
            new = spec.with_dims(d=new_d)
            fix.append(rule.change(key, spec.raw, new.raw, f"{spec.raw} needs {spec.world} GPUs; the cluster has {cluster}: "
                                   f"keep t/p/c and use {new_d} data-parallel replica(s)"))
        shown = spec.raw if key != "allocation_mode" else f"{cfg.get('allocation_mode')} ({spec.backend} part)"
        problems.append(rule.problem(
            ctx, key, f"{key} = {shown!r} needs {spec.world} GPUs but the cluster has {cluster} "
            f"({layout.n_nodes} node(s) x {per_node})", line=cfg.line(key), changes=fix,
        ))
        if separated:
            return problems  # one problem, one fix for both engines
    if problems or not separated or rollout.world + train.world <= cluster:
        return problems
    total = rollout.world + train.world
    problems.append(rule.problem(
        ctx, layout.rollout_key,
        f"{layout.rollout_key} = {rollout.raw!r} ({rollout.world} GPUs) + {layout.train_key} = {train.raw!r} "
        f"({train.world} GPUs): {total} GPUs requested, {cluster} available ({layout.n_nodes} node(s) x {per_node}); "
        f"{how}, so rollout and training each need their own GPUs",
        line=cfg.line(layout.rollout_key), changes=split_fix(),
    ))
    return problems


def _separated_split(rollout: Any, train: Any, cluster: int) -> tuple[Any, Any] | None:
    """Data-parallel sizes that put both separated engines on ``cluster`` GPUs, t/p/c unchanged:
    keep an engine that already leaves room and shrink the other, else split in proportion."""
    r_inner, t_inner = rollout.world // rollout.d, train.world // train.d
    candidates = []
    if train.world < cluster:
        candidates.append((min(rollout.d, (cluster - train.world) // r_inner), train.d))
    if rollout.world < cluster:
        candidates.append((rollout.d, min(train.d, (cluster - rollout.world) // t_inner)))
    r_d = min(rollout.d, max(1, cluster * rollout.world // (rollout.world + train.world) // r_inner))
    candidates.append((r_d, min(train.d, (cluster - r_d * r_inner) // t_inner)))
    fitting = [(r, t) for r, t in candidates if r >= 1 and t >= 1 and r * r_inner + t * t_inner <= cluster]
    if not fitting:
        return None
    r, t = max(fitting, key=lambda rt: rt[0] * r_inner + rt[1] * t_inner)  # first of the fullest
    try:
        return rollout.with_dims(d=r), train.with_dims(d=t)
    except ValueError:  # hybrid (attn|ffn) strings are not rewritten automatically
        return None


_LEGACY_SP_KEYS = ("actor.fsdp.ulysses_sp_size", "fsdp.ulysses_sp_size")


@check("areal_ulysses_sp_divisibility")
def _areal_ulysses(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    layout = areal_layout(cfg)
    model = areal_model(cfg, ctx)
    heads = model.heads if model else None
    problems = []
    train = layout.train
    for legacy_key in _LEGACY_SP_KEYS:
        sp = _int(cfg.get(legacy_key))
        if not sp or sp <= 1:
            continue
        dp = train.d if train else None
        bad = []
        if dp and dp % sp:
            bad.append(f"the FSDP data-parallel degree {dp}")
        if heads and heads % sp:
            bad.append(f"{model.name}'s {heads} attention heads")
        if bad:
            valid = [v for v in range(1, sp + 1) if (not dp or dp % v == 0) and (not heads or heads % v == 0)]
            best = max(valid)
            problems.append(rule.problem(
                ctx, legacy_key, f"{legacy_key} = {sp} does not divide {' and '.join(bad)}; valid sizes: "
                f"{', '.join(map(str, valid))}", line=cfg.line(legacy_key),
                changes=[rule.change(legacy_key, sp, best, f"largest size dividing both ({', '.join(map(str, valid))} are valid)")],
            ))
    if train is not None and train.c > 1 and heads and heads % train.c and layout.train_key != "allocation_mode":
        world = train.world // (train.t * train.p)  # the d x c mesh Ulysses splits
        valid = [v for v in range(1, world + 1) if heads % v == 0 and world % v == 0]
        best = max(valid)
        new = train.with_dims(c=best, d=world // best)
        problems.append(rule.problem(
            ctx, layout.train_key,
            f"{layout.train_key} = {train.raw!r}: Ulysses context-parallel size {train.c} does not divide "
            f"{model.name}'s {heads} attention heads (valid with {world} GPUs: {', '.join(map(str, valid))})",
            line=cfg.line(layout.train_key),
            changes=[rule.change(layout.train_key, train.raw, new.raw,
                                 f"context parallel {best} divides {heads} heads; data parallel {world // best} keeps {train.world} GPUs")],
        ))
    return problems


@check("areal_mem_fraction_range")
def _areal_mem_fraction_range(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    return _mem_fraction_range(cfg, "sglang.mem_fraction_static", " = ", ctx, rule)


def _mem_fraction_range(config: Any, key: str, sep: str, ctx: LintContext, rule: Rule) -> list[Finding]:
    """SGLang's static memory share (AReaL key or slime flag) must be a fraction; 85 means 0.85."""
    value = _float(config.get(key))
    if value is None or 0 < value < 1:
        return []
    new = round(value / 100, 2) if 1 < value < 100 else 0.8
    return [rule.problem(ctx, key, f"{key}{sep}{value:g} is a share of GPU memory and must lie between 0 and 1",
                         line=config.line(key),
                         changes=[rule.change(key, value, new, "a fraction of GPU memory, not a percentage")])]


def _sglang_rollout(layout: ArealLayout) -> bool:
    return layout.rollout is not None and layout.rollout.backend == "sglang"


def colocation_report(cfg: ArealConfig, ctx: LintContext, *, mem_fraction: float | None = None,
                      gradient_checkpointing: bool | None = None, max_tokens_per_mb: int | None = None,
                      offload: bool | None = None) -> Any:
    """The colocation budget for this config on the snapshot's smallest GPU (None if unknown)."""
    from rlmedic.tools.config.areal import default_of
    from rlmedic.tools.gpu.snapshot import ROLE_SGLANG, ROLE_TRAINER
    from rlmedic.tools.gpu.advice import (
        colocation_fit,
        estimate_trainer_memory,
        smallest_gpu,
    )

    gpu = smallest_gpu(ctx.snapshot)
    model = areal_model(cfg, ctx)
    if gpu is None or model is None:
        return None
    layout = areal_layout(cfg)
    fraction = mem_fraction if mem_fraction is not None else _float(cfg.value("sglang.mem_fraction_static"))
    if fraction is None:  # explicitly null: SGLang picks its own share, about as greedy as the default
        fraction = float(default_of("sglang.mem_fraction_static", 0.9))
    tokens = max_tokens_per_mb or _int(cfg.get("actor.mb_spec.max_tokens_per_mb"))
    if tokens is None:
        tokens = (_int(cfg.value("train_dataset.max_length")) or 1024) + (_int(cfg.value("gconfig.max_new_tokens")) or 1024)
    ckpt = gradient_checkpointing if gradient_checkpointing is not None else bool(cfg.get("actor.gradient_checkpointing"))
    # actor.optimizer: null means no training; a section without a type means AReaL's default (adam)
    optimizer = None if cfg.get("actor.optimizer") is None else str(cfg.get("actor.optimizer.type") or "adam")
    trainer = estimate_trainer_memory(
        model, dtype=str(cfg.get("actor.dtype") or "bfloat16"), optimizer=optimizer,
        gradient_checkpointing=ckpt, max_tokens_per_mb=tokens,
        shards=layout.train.world if layout.train else 1,
        offload=offload if offload is not None else (bool(cfg.get("actor.offload")) or bool(cfg.get("enable_offload"))),
    )
    if cfg.get("ref") is not None and (_float(cfg.get("actor.kl_ctl")) or 0) > 0:
        trainer.components["ref_weights"] = trainer.components["weights"]
        trainer.assumptions.append("a reference model (actor.kl_ctl > 0) shares the GPU")
    other = sum(p.used_gpu_memory or 0 for p in gpu.processes if p.leftover or p.role not in (ROLE_SGLANG, ROLE_TRAINER))
    return colocation_fit(gpu.memory_total, fraction, trainer, model=model, dtype=str(cfg.get("sglang.dtype") or "bfloat16"),
                          sglang_tp=layout.rollout.t if layout.rollout else 1, other_used=other)


@check("areal_colocated_memory")
def _areal_colocated_memory(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    layout = areal_layout(cfg)
    if not layout.colocated or not _sglang_rollout(layout):
        return []
    fit = colocation_report(cfg, ctx)
    if fit is None or fit.fits:
        return []
    key = "sglang.mem_fraction_static"
    changes: list[Fix] = []
    gpu_name = ctx.snapshot.gpus[0].name if ctx.snapshot and ctx.snapshot.gpus else "this GPU"
    message = f"SGLang and the trainer share {gpu_name}: {fit.reason}"
    if fit.max_mem_fraction is not None:
        changes.append(rule.change(key, fit.mem_fraction_static, fit.max_mem_fraction,
                                   f"largest share that leaves the trainer room on this GPU: {colocation_report(cfg, ctx, mem_fraction=fit.max_mem_fraction).reason}"))
    else:
        levers, found = _colocation_levers(cfg, ctx)
        if found is None:
            tried = ", ".join(lever for lever, *_ in levers) or "nothing left to turn"
            message += (f"; even with every memory lever ({tried}) no share of SGLang fits this model beside the "
                        f"trainer on {gpu_name}: give SGLang and the trainer separate GPUs, or use larger ones")
        else:
            for _lever, change_key, old, new, why in levers[: found[0] + 1]:
                changes.append(rule.change(change_key, old, new, why))
            if not found[1].fits:
                changes.append(rule.change(key, fit.mem_fraction_static, found[1].max_mem_fraction,
                                           "largest share that leaves the trainer room once the changes above are made"))
    return [rule.problem(ctx, key, message, line=cfg.line(key) or cfg.line("sglang"), changes=changes)]


def _colocation_levers(cfg: ArealConfig, ctx: LintContext) -> tuple[list[tuple[str, str, Any, Any, str]], Any]:
    """AReaL's memory levers for a colocated trainer, cheapest first, each added to the ones before:
    gradient checkpointing, micro-batches of one full sequence, optimizer offload. Returns the levers
    not yet pulled and ``(index, report)`` of the first prefix with which some SGLang share fits
    (None when even all of them together leave no room)."""
    levers: list[tuple[str, str, Any, Any, str]] = []
    kwargs: dict[str, Any] = {}
    if not cfg.get("actor.gradient_checkpointing"):
        levers.append(("gradient checkpointing", "actor.gradient_checkpointing", cfg.get("actor.gradient_checkpointing"), True,
                       "recomputing activations shrinks the trainer"))
    sequence = (_int(cfg.value("train_dataset.max_length")) or 1024) + (_int(cfg.value("gconfig.max_new_tokens")) or 1024)
    tokens = _int(cfg.get("actor.mb_spec.max_tokens_per_mb"))
    if tokens is not None and tokens > sequence:
        levers.append(("smaller micro-batches", "actor.mb_spec.max_tokens_per_mb", tokens, sequence,
                       f"one full sequence per micro-batch (max_length + max_new_tokens = {sequence}): "
                       "smaller activations and logits"))
    if not (cfg.get("actor.offload") or cfg.get("enable_offload")):
        levers.append(("optimizer offload", "actor.offload", cfg.get("actor.offload"), True,
                       "keeps the optimizer states in CPU memory (slower steps)"))
    for i, (_lever, change_key, _old, new, _why) in enumerate(levers):
        kwargs[{"actor.gradient_checkpointing": "gradient_checkpointing", "actor.mb_spec.max_tokens_per_mb": "max_tokens_per_mb",
                "actor.offload": "offload"}[change_key]] = new
        report = colocation_report(cfg, ctx, **kwargs)
        if report is not None and report.max_mem_fraction is not None:
            return levers, (i, report)
    return levers, None


@check("areal_colocated_share")
def _areal_colocated_share(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    from rlmedic.tools.config.areal import default_of

    layout = areal_layout(cfg)
    if not layout.colocated or not _sglang_rollout(layout) or (ctx.snapshot is not None and ctx.snapshot.has_gpus):
        return []
    fraction = _float(cfg.value("sglang.mem_fraction_static"))
    if fraction is None:
        fraction = float(default_of("sglang.mem_fraction_static", 0.9))
    if fraction <= 0.5:
        return []
    how = "rollout.scheduling_strategy.type: colocation"
    return [rule.problem(ctx, "sglang.mem_fraction_static",
                         f"SGLang and the trainer share GPUs ({how}) and SGLang reserves {fraction:.0%} of each; on GPUs under "
                         "80 GB that leaves too little for training (0.5 fits an A40). Check with --snapshot F",
                         line=cfg.line("sglang.mem_fraction_static"))]


@check("areal_attention_backend")
def _areal_attention_backend(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    from rlmedic.tools.gpu.advice import attention_backend_advice

    layout = areal_layout(cfg)
    if ctx.snapshot is None or not ctx.snapshot.has_gpus or (layout.rollout is not None and layout.rollout.backend != "sglang"):
        return []
    key = "sglang.attention_backend"
    backend = cfg.value(key)
    if backend is None:
        backend = "fa3"
    problems = []
    seen = set()
    for gpu in ctx.snapshot.gpus:
        advice = attention_backend_advice(gpu)
        if advice is None or advice.sm in seen or advice.allows(str(backend)):
            continue
        seen.add(advice.sm)
        # SM100+ cannot run fa3 at all (error); elsewhere flashinfer is a recommendation (info).
        severity = rule.severity if (advice.sm or 0) >= 100 else "info"
        problems.append(rule.problem(
            ctx, key, f"{key} = {backend!r}" + (" (the default)" if not cfg.has(key) else "") + f": {advice.reason}",
            line=cfg.line(key), severity=severity,
            changes=[rule.change(key, backend, advice.recommended, advice.reason)],
        ))
    return problems[:1]


def _fileroot_keys(cfg: ArealConfig) -> list[str]:
    keys = ["cluster.fileroot"] if cfg.has("cluster.fileroot") else []
    keys += [k for k in cfg.dotted_keys() if k.endswith(".fileroot") and k != "cluster.fileroot" and k.count(".") == 1]
    return keys


def _is_remote(path: str) -> bool:
    return "://" in path


def _persistent_target(ctx: LintContext, current: str) -> str:
    base = ctx.fileroot or DEFAULT_PERSISTENT_ROOT
    tail = current
    if tail.startswith("/tmp/"):
        tail = tail[len("/tmp/"):]
    tail = posixpath.normpath(tail.lstrip("./")) if tail.strip("./") else ""
    if tail.startswith("outputs/") and base.endswith("/outputs"):
        tail = tail[len("outputs/"):]
    return posixpath.join(base, tail) if tail and tail != "." else base


def _persistent_reason(ctx: LintContext) -> str:
    if ctx.fileroot:
        return f"{ctx.fileroot} is the persistent location you named"
    return (f"assumes your network volume is mounted at {posixpath.dirname(DEFAULT_PERSISTENT_ROOT)} (as on RunPod); "
            "pass --fileroot to choose another persistent path")


@check("areal_fileroot_absolute")
def _areal_fileroot_absolute(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    problems = []
    for key in _fileroot_keys(cfg):
        raw = cfg.get(key, resolve=False)
        if not isinstance(raw, str) or "${" in raw or not raw or raw.startswith("/") or _is_remote(raw):
            continue
        new = _persistent_target(ctx, raw)
        problems.append(rule.problem(
            ctx, key, f"{key} = {raw!r} is relative: it resolves against the launch directory, typically the container "
            "disk, and checkpoints are lost with the pod", line=cfg.line(key),
            changes=[rule.change(key, raw, new, f"absolute path on persistent storage; {_persistent_reason(ctx)}")],
        ))
    return problems


@check("areal_fileroot_persistent")
def _areal_fileroot_persistent(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    key = "cluster.fileroot"
    raw = cfg.get(key, resolve=False) if cfg.has(key) else cfg.value(key)  # AReaL's default is /tmp/areal/
    if not isinstance(raw, str) or "${" in raw or not (raw == "/tmp" or raw.startswith("/tmp/")):
        return []
    new = _persistent_target(ctx, raw)
    shown = f"{raw!r}" + ("" if cfg.has(key) else " (the default)")
    return [rule.problem(
        ctx, key, f"{key} = {shown} is under /tmp: checkpoints and recovery info disappear when the machine goes away "
        "(always for spot instances)", line=cfg.line(key) or cfg.line("cluster"),
        changes=[rule.change(key, raw, new, f"keep checkpoints on a mounted volume; {_persistent_reason(ctx)}")],
    )]


@check("areal_weight_update_disk_shared")
def _areal_weight_update_disk(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    if cfg.value("actor.weight_update_mode") != "disk" or (_int(cfg.value("cluster.n_nodes")) or 1) <= 1:
        return []
    root = cfg.value("cluster.fileroot")
    if not isinstance(root, str) or not (root.startswith("/tmp") or not root.startswith("/")):
        return []
    return [rule.problem(ctx, "cluster.fileroot",
                         f"actor.weight_update_mode is disk on {cfg.get('cluster.n_nodes')} nodes, but cluster.fileroot "
                         f"({root}) is node-local: inference servers on other nodes cannot read the weights",
                         line=cfg.line("cluster.fileroot"))]


_RECOVER_ON = ("auto", "on")


@check("areal_recover_mode")
def _areal_recover_mode(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    mode = cfg.value("recover.mode")
    if not cfg.has("recover") or str(mode) in _RECOVER_ON:
        return []
    key = "recover.mode"
    shown = f"{mode} (the default)" if not cfg.has(key) else repr(mode)
    # a log that shows no recovery checkpoint was written makes this at least a warning
    severity = None if ctx.is_spot or not ctx.saw(cards=("recovery-checkpoint-missing",)) else "warning"
    return [rule.problem(ctx, key, f"{key} is {shown}: a restarted run starts from step 0 instead of resuming",
                         line=cfg.line(key) or cfg.line("recover"), severity=severity,
                         changes=[rule.change(key, mode, "auto", "resume from the last recovery checkpoint when restarted "
                                              "with the same experiment_name and trial_name")])]


def _recover_enabled(cfg: ArealConfig) -> bool:
    return str(cfg.value("recover.mode")) in _RECOVER_ON


@check("areal_recover_frequency")
def _areal_recover_frequency(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    if not _recover_enabled(cfg):
        return []
    freqs = [cfg.get(f"recover.freq_{u}") for u in ("epochs", "steps", "secs")]
    if any(f is not None for f in freqs):
        return []
    return [rule.problem(ctx, "recover.freq_secs",
                         "recovery is enabled but recover.freq_epochs, freq_steps and freq_secs are all unset: no recovery "
                         "checkpoint will ever be written", line=cfg.line("recover.mode"),
                         changes=[rule.change("recover.freq_secs", None, SPOT_RECOVER_FREQ_SECS,
                                              "write a recovery checkpoint at least every hour")])]


@check("areal_recover_epoch_only")
def _areal_recover_epoch_only(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    if not _recover_enabled(cfg):
        return []
    if cfg.get("recover.freq_epochs") is None or cfg.get("recover.freq_steps") is not None or cfg.get("recover.freq_secs") is not None:
        return []
    return [rule.problem(ctx, "recover.freq_secs",
                         "recovery checkpoints are written only at epoch ends: an interruption loses up to a whole epoch",
                         line=cfg.line("recover.freq_epochs"),
                         changes=[rule.change("recover.freq_secs", None, SPOT_RECOVER_FREQ_SECS,
                                              "also checkpoint hourly, as the cloud seed's configs do")])]


@check("areal_saver_frequency")
def _areal_saver_frequency(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    if not cfg.has("saver") or cfg.get("saver") is None:
        return []
    if any(cfg.get(f"saver.freq_{u}") is not None for u in ("epochs", "steps", "secs")):
        return []
    return [rule.problem(ctx, "saver.freq_epochs",
                         "saver.freq_epochs, freq_steps and freq_secs are all unset: no Hugging Face checkpoint is saved",
                         line=cfg.line("saver"),
                         changes=[rule.change("saver.freq_epochs", None, 1, "save the model after each epoch")])]


@check("areal_request_timeouts")
def _areal_request_timeouts(cfg: ArealConfig, ctx: LintContext, rule: Rule) -> list[Finding]:
    if not cfg.has("rollout"):
        return []
    timeout = _float(cfg.value("rollout.request_timeout"))
    retries = _int(cfg.value("rollout.request_retries"))
    changes = []
    if timeout is not None and timeout < LONG_RUN_REQUEST_TIMEOUT:
        changes.append(rule.change("rollout.request_timeout", cfg.value("rollout.request_timeout"), LONG_RUN_REQUEST_TIMEOUT,
                                   "long generations and server restarts outlast the default timeout"))
    if retries is not None and retries < LONG_RUN_REQUEST_RETRIES:
        changes.append(rule.change("rollout.request_retries", cfg.value("rollout.request_retries"), LONG_RUN_REQUEST_RETRIES,
                                   "retry transient disconnects instead of scoring the rollout as failed"))
    if not changes:
        return []
    severity = "warning" if ctx.saw(categories=("sglang_connection", "sglang_crash"), cards=("sglang-disconnect-long-run",)) else None
    return [rule.problem(ctx, "rollout.request_timeout",
                         f"rollout.request_timeout {timeout:g} s / request_retries {retries}: on long runs a crashed or slow "
                         "SGLang server turns into failed rollouts and zero rewards (the step-188 collapse)",
                         line=cfg.line("rollout.request_timeout") or cfg.line("rollout"), changes=changes, severity=severity)]


# =========================================================================== slime checks


@check("slime_batch_arithmetic")
def _slime_batch(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    rbs = launch.get_int("--rollout-batch-size")
    n = launch.value_int("--n-samples-per-prompt")  # slime's default: 1
    gbs = launch.get_int("--global-batch-size")
    steps = launch.get_int("--num-steps-per-rollout")
    if rbs is None or n is None or gbs is None:
        return []
    samples = rbs * n
    if steps is None:
        if samples % gbs == 0:
            return []
        msg = (f"rollout_batch_size x n_samples_per_prompt = {rbs} x {n} = {samples} samples per rollout is not a multiple "
               f"of global_batch_size {gbs}")
    elif samples == gbs * steps:
        return []
    else:
        msg = (f"rollout_batch_size x n_samples_per_prompt = {rbs} x {n} = {samples}, but global_batch_size x "
               f"num_steps_per_rollout = {gbs} x {steps} = {gbs * steps}")
    steps_eff = steps or 1
    changes = []
    if samples % steps_eff == 0:
        new = samples // steps_eff
        changes.append(rule.change("--global-batch-size", gbs, new,
                                   f"{rbs} x {n} = {new} x {steps_eff}: keep the rollout and steps, derive the batch"))
    return [rule.problem(ctx, "--global-batch-size", msg, line=launch.line("--global-batch-size"), changes=changes)]


@check("slime_async_colocate")
def _slime_async_colocate(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    if launch.entry != "train_async.py" or not launch.has("--colocate"):
        return []
    return [rule.problem(ctx, "--colocate", "train_async.py does not support --colocate: asynchronous training needs "
                         "separate GPUs for rollout and training", line=launch.line("--colocate"),
                         changes=[rule.change("--colocate", True, None, "async training runs rollout and training on "
                                              "separate GPUs; also set --rollout-num-gpus", op="remove_flag")])]


def slime_gpu_need(launch: SlimeLaunch) -> tuple[int, int, int, bool]:
    """(actor GPUs, rollout GPUs, total needed, colocated)."""
    nodes = launch.value_int("--actor-num-nodes") or 1
    per_node = launch.value_int("--actor-num-gpus-per-node") or 0
    actor = nodes * per_node
    colocated = bool(launch.value("--colocate"))
    rollout = launch.get_int("--rollout-num-gpus")
    if colocated:
        rollout_gpus = rollout if rollout is not None else actor
        need = max(actor, rollout_gpus)
    else:
        rollout_gpus = rollout or 0
        need = actor + rollout_gpus
    return actor, rollout_gpus, need, colocated


@check("slime_gpu_count")
def _slime_gpu_count(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    from rlmedic.tools.gpu.advice import snapshot_gpu_count

    total = launch.cluster_gpus
    source = "ray start --num-gpus" if total is not None else ""
    visible = snapshot_gpu_count(ctx.snapshot)
    if total is None and visible is not None and (launch.get_int("--actor-num-nodes") or 1) == 1:
        total, source = visible, "the GPU snapshot"
    if total is None:
        return []
    actor, rollout, need, colocated = slime_gpu_need(launch)
    if need <= total:
        return []
    if colocated:
        msg = (f"colocated run needs actor_num_nodes x actor_num_gpus_per_node = {actor} GPUs"
               + (f" (rollout {rollout})" if rollout != actor else "") + f", but {source} gives {total}: Ray waits forever")
    else:
        msg = (f"decoupled run needs {actor} actor + {rollout} rollout = {need} GPUs, but {source} gives {total}: "
               "the job stays pending on the Ray submission page")
    changes = []
    per_engine = launch.value_int("--rollout-num-gpus-per-engine") or 1
    if not colocated and total > actor:
        room = (total - actor) // per_engine * per_engine
        if room > 0:
            changes.append(rule.change("--rollout-num-gpus", rollout, room, f"{total} GPUs - {actor} for the actor, "
                                       f"in whole engines of {per_engine}"))
    return [rule.problem(ctx, "--rollout-num-gpus" if not colocated else "--actor-num-gpus-per-node", msg,
                         line=launch.line("--rollout-num-gpus") or launch.line("--actor-num-gpus-per-node"), changes=changes)]


@check("slime_rollout_engine_size")
def _slime_engine_size(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    rollout = launch.get_int("--rollout-num-gpus")
    per_engine = launch.get_int("--rollout-num-gpus-per-engine")
    if not rollout or not per_engine or rollout % per_engine == 0:
        return []
    new = rollout // per_engine * per_engine
    changes = [rule.change("--rollout-num-gpus", rollout, new, f"whole engines of {per_engine} GPUs")] if new else []
    return [rule.problem(ctx, "--rollout-num-gpus", f"--rollout-num-gpus {rollout} is not a multiple of "
                         f"--rollout-num-gpus-per-engine {per_engine}: {rollout % per_engine} GPU(s) cannot form an engine",
                         line=launch.line("--rollout-num-gpus"), changes=changes)]


@check("slime_max_tokens_needs_dynamic_batch")
def _slime_max_tokens_dynamic(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    if not launch.has("--max-tokens-per-gpu") or launch.has("--use-dynamic-batch-size"):
        return []
    return [rule.problem(ctx, "--use-dynamic-batch-size", "--max-tokens-per-gpu is set but has no effect without "
                         "--use-dynamic-batch-size (micro-batches then follow --micro-batch-size)",
                         line=launch.line("--max-tokens-per-gpu"),
                         changes=[rule.change("--use-dynamic-batch-size", None, True,
                                              "make --max-tokens-per-gpu the per-GPU token budget", op="add_flag")])]


def _pow2_at_least(value: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, value))))


@check("slime_context_parallel")
def _slime_context_parallel(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    max_tokens = launch.get_int("--max-tokens-per-gpu")
    resp = launch.get_int("--rollout-max-response-len")
    if not max_tokens or not resp or not launch.has("--use-dynamic-batch-size"):
        return []
    cp = launch.value_int("--context-parallel-size") or 1
    if resp / cp <= max_tokens:
        return []
    want = _pow2_at_least(math.ceil(resp / max_tokens))
    tp = launch.value_int("--tensor-model-parallel-size") or 1
    pp = launch.value_int("--pipeline-model-parallel-size") or 1
    world = (launch.value_int("--actor-num-nodes") or 1) * (launch.value_int("--actor-num-gpus-per-node") or 0)
    changes = []
    if world % (tp * pp * want) == 0:
        changes.append(rule.change("--context-parallel-size", cp, want, f"split each sequence over {want} GPUs so "
                                   f"{resp} / {want} = {resp // want} tokens fit max_tokens_per_gpu {max_tokens}"))
    return [rule.problem(ctx, "--context-parallel-size",
                         f"a {resp}-token response over context parallel {cp} is {resp // cp} tokens per GPU, above "
                         f"--max-tokens-per-gpu {max_tokens}: long samples overflow the budget and OOM",
                         line=launch.line("--max-tokens-per-gpu"), changes=changes)]


SLIME_COLOCATED_MEM_FRACTION = 0.8


@check("slime_colocate_mem_fraction")
def _slime_colocate_mem(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    if not launch.has("--colocate"):
        return []
    value = _float(launch.get("--sglang-mem-fraction-static"))
    if value is not None and value <= SLIME_COLOCATED_MEM_FRACTION:
        return []
    op = "set" if value is not None else "add_flag"
    msg = ("--colocate without --sglang-mem-fraction-static: SGLang takes its default share and Megatron, which keeps "
           "some memory after offloading, runs out") if value is None else (
        f"--sglang-mem-fraction-static {value} with --colocate leaves too little for Megatron")
    return [rule.problem(ctx, "--sglang-mem-fraction-static", msg,
                         line=launch.line("--sglang-mem-fraction-static") or launch.line("--colocate"),
                         changes=[rule.change("--sglang-mem-fraction-static", value, SLIME_COLOCATED_MEM_FRACTION,
                                              "slime recommends 0.8 when training and inference share GPUs", op=op)])]


@check("slime_mem_fraction_range")
def _slime_mem_fraction_range(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    return _mem_fraction_range(launch, "--sglang-mem-fraction-static", " ", ctx, rule)


@check("slime_resume")
def _slime_resume(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    save = launch.get("--save")
    if not save:
        return []
    load = launch.get("--load")
    if load and load.rstrip("/") == save.rstrip("/"):
        return []
    op = "set" if load else "add_flag"
    msg = (f"--save {save} but no --load: a restarted run starts again from --ref-load" if not load else
           f"--load {load} differs from --save {save}: a restarted run will not pick up the checkpoints it saved")
    return [rule.problem(ctx, "--load", msg, line=launch.line("--load") or launch.line("--save"),
                         changes=[rule.change("--load", load, save, "resume by loading the --save directory "
                                              "(slime reads latest_checkpointed_iteration.txt there)", op=op)])]


@check("slime_save_interval")
def _slime_save_interval(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    if not launch.get("--save") or launch.has("--save-interval"):
        return []
    return [rule.problem(ctx, "--save-interval", "--save is set without --save-interval: no checkpoint is written "
                         "during the run", line=launch.line("--save"),
                         changes=[rule.change("--save-interval", None, 20, "checkpoint every 20 rollouts, as slime's "
                                              "example scripts do", op="add_flag")])]


@check("slime_save_absolute")
def _slime_save_absolute(launch: SlimeLaunch, ctx: LintContext, rule: Rule) -> list[Finding]:
    save = launch.get("--save")
    if not save or save.startswith("/") or "$" in save or _is_remote(save):
        return []
    new = _persistent_target(ctx, save)
    changes = [rule.change("--save", save, new, f"absolute path on persistent storage; {_persistent_reason(ctx)}")]
    load = launch.get("--load")
    if load and load.rstrip("/") == save.rstrip("/"):
        changes.append(rule.change("--load", load, new, "keep --load pointing at the --save directory"))
    return [rule.problem(ctx, "--save", f"--save {save} is relative: checkpoints land wherever the job starts, usually "
                         "the container disk", line=launch.line("--save"), changes=changes)]
