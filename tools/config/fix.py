"""Lint a config and produce the corrected one: smallest change set, every change explained and cited.

``lint_config`` checks an AReaL YAML or a slime launch script/argument list.
``fix_config`` additionally takes a log's findings (what broke, in which phase) and a
GPU snapshot (what the machine has), picks the changes, applies them to a copy as
text patches, re-lints the result and returns it with a unified diff. The input file
is never written; output goes to a new path or to the caller.

Change selection:

1. For each failure phase seen in the log (root first), the first remedy of that
   phase's list in ``data/config_rules.yaml`` that can change something in this
   config, in the seeds' effectiveness order; the remaining applicable remedies are
   returned as ``alternatives``, not applied.
2. The fix of every rule or schema problem of severity warning or worse.

Changes to the same key are applied once (the first wins).
"""

from __future__ import annotations


import dataclasses
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.confine import REDACTED, Confinement, redact, redact_value, write_new_text
from rlmedic.errors import UserError
from rlmedic.tools.config.rules import LintContext, Remedy, load_remedies
from rlmedic.tools.config.checks import lint_areal, lint_slime
from rlmedic.types import Finding, Fix, severity_rank

FIX_SEVERITIES = ("critical", "error", "warning")
MAX_ROUNDS = 3


@dataclass
class LintResult:
    path: str
    framework: str
    problems: list[Finding]

    @property
    def valid(self) -> bool:
        return not any(severity_rank(p.severity) <= severity_rank("error") for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        return redact_value({"path": self.path, "framework": self.framework, "valid": self.valid,
                             "problems": [p.to_dict() for p in self.problems]})


@dataclass
class FixResult:
    path: str
    framework: str
    problems: list[Finding]  # found in the input
    changes: list[Fix]  # applied, in order
    alternatives: list[Fix] = field(default_factory=list)  # further remedies, not applied
    actions: list[Fix] = field(default_factory=list)  # things to do outside the config
    remaining: list[Finding] = field(default_factory=list)  # problems the corrected config still has
    text: str = ""  # the corrected config, secrets and all (it is what -o writes); show ``diff`` instead
    diff: str = ""  # unified diff input -> corrected, redacted
    output: str | None = None
    phases: list[str] = field(default_factory=list)
    #: changes lint proposed that were already in effect when their turn came (an earlier change
    #: made them true): not applied, not listed as changes
    settled: list[Fix] = field(default_factory=list)
    #: the input's values in effect (:func:`rlmedic.tools.config.keys.settings_in_effect`), redacted
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        """The input config has no error-level problem."""
        return not any(severity_rank(p.severity) <= severity_rank("error") for p in self.problems)

    @property
    def fixed_valid(self) -> bool:
        return not any(severity_rank(p.severity) <= severity_rank("error") for p in self.remaining)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract; secrets in messages, values and the diff are redacted (``text`` is not included)."""
        return redact_value({
            "path": self.path,
            "framework": self.framework,
            "valid": self.valid,
            "problems": [p.to_dict() for p in self.problems],
            "changes": [c.to_dict() for c in self.changes],
            "output": self.output,
            "fixed_valid": self.fixed_valid,
            "remaining": [p.to_dict() for p in self.remaining],
            "alternatives": [c.to_dict() for c in self.alternatives],
            "actions": [c.to_dict() for c in self.actions],
            "settled": [c.to_dict() for c in self.settled],
            "phases": self.phases,
            "diff": self.diff,
        })


# --------------------------------------------------------------------------- loading


def detect_framework(path: str, text: str) -> str:
    from rlmedic.tools.config.slime import looks_like_slime

    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "areal"
    if suffix in (".sh", ".bash", ".args", ".txt") or looks_like_slime(text):
        return "slime"
    return "areal"


def load_config(path: str | os.PathLike[str], *, confinement: Confinement) -> tuple[str, Any]:
    """(framework, parsed config) for an AReaL YAML or a slime script / argument file."""
    text = confinement.read_text(path, whole=True)
    framework = detect_framework(str(path), text)
    if framework == "slime":
        from rlmedic.tools.config.slime import parse_slime_launch

        return framework, parse_slime_launch(text, str(path))
    from rlmedic.tools.config.areal import parse_areal_config

    if Path(str(path)).suffix.lower() in (".yaml", ".yml"):
        return framework, parse_areal_config(text, str(path))
    try:
        return framework, parse_areal_config(text, str(path))
    except UserError as exc:
        # not named .yaml and not YAML (or not a mapping): most often a log given to the wrong command;
        # "invalid YAML at line 3" would send the user looking for a typo in a file that is no config
        if "invalid YAML" not in str(exc) and "YAML mapping" not in str(exc):
            raise  # a refusal (aliases, depth, tags) keeps its own reason
        raise UserError(
            f"{path}: not an AReaL config (a YAML mapping) or a slime launch script; "
            f"for a training log use `rlmedic diagnose {path}`"
        ) from None


def lint_parsed(framework: str, config: Any, ctx: LintContext) -> list[Finding]:
    return lint_slime(config, ctx) if framework == "slime" else lint_areal(config, ctx)


def lint_config(
    path: str | os.PathLike[str],
    *,
    snapshot: Any = None,
    findings: Iterable[Finding] = (),
    spot: bool = False,
    confinement: Confinement,
) -> LintResult:
    """Check a config (no changes). ``snapshot`` adds the hardware checks."""
    framework, config = load_config(path, confinement=confinement)
    ctx = LintContext(snapshot=snapshot, findings=list(findings), spot=spot, confinement=confinement)
    return LintResult(str(path), framework, lint_parsed(framework, config, ctx))


def findings_from_logs(paths: Iterable[str | os.PathLike[str]], *, confinement: Confinement) -> list[Finding]:
    """Run the log diagnosis (``rlmedic.tools.logs.diagnose``) and return its findings."""
    paths = list(paths)
    if not paths:
        return []
    try:
        from rlmedic.tools.logs.diagnose import diagnose
    except ImportError as exc:  # pragma: no cover - depends on the build
        raise UserError("log diagnosis (rlmedic.tools.logs.diagnose) is not available in this installation") from exc
    return list(diagnose(paths, confinement=confinement).findings)


# --------------------------------------------------------------------------- remedies

RemedyFn = Callable[[Any, LintContext, Remedy], "list[Fix] | None"]
REMEDIES: dict[str, RemedyFn] = {}


def remedy(name: str) -> Callable[[RemedyFn], RemedyFn]:
    def register(fn: RemedyFn) -> RemedyFn:
        REMEDIES[name] = fn
        return fn

    return register


def _action(remedy_: Remedy, reason: str) -> list[Fix]:
    return [remedy_.change("", None, None, reason, op="action")]


def as_number(value: Any) -> float | None:
    """A config value as a number (``None`` for booleans, ``None`` and what does not parse)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@remedy("kill-leftover-processes")
def _r_kill(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    snap = ctx.snapshot
    if snap is not None and snap.has_gpus:
        leftovers = snap.leftovers()
        if not leftovers:
            return None
        pids = " ".join(str(p.pid) for _g, p in leftovers)
        return _action(r, f"GPU memory is held by leftover processes ({pids}): `kill {pids}` (or `ray stop --force` "
                          "on a Ray cluster) before restarting")
    return _action(r, "check `nvidia-smi` for idle processes from an earlier run before restarting: `pkill -f sglang` "
                      "on one machine, `ray stop --force` on a Ray cluster (or save a snapshot with `rlmedic gpu --save`)")


def _fsdp_switch(cfg: Any, r: Remedy, reason: str) -> list[Fix] | None:
    """Turn on an FSDP-only option (None when it is on already or the trainer is not FSDP)."""
    if cfg.get(r.key) is True or not str(cfg.get("actor.backend") or "fsdp").startswith("fsdp"):
        return None
    return [r.change(r.key, cfg.get(r.key), True, reason)]


@remedy("memory-efficient-load")
def _r_mem_efficient_load(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    return _fsdp_switch(cfg, r, "load weights on CPU and broadcast after sharding, lowering peak memory at start-up")


@remedy("reduce-concurrent-rollouts")
def _r_concurrent(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    key = r.key if cfg.has(r.key) else ("max_concurrent_rollouts" if cfg.has("max_concurrent_rollouts") else r.key)
    value = as_number(cfg.get(key))
    if value is None or value <= 1:
        return None
    new = max(1, int(value * 3 // 4))
    return [r.change(key, int(value), new, "fewer parallel generation requests directly lower the inference servers' memory")]


@remedy("rollout-tensor-parallel")
def _r_rollout_tp(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    from rlmedic.tools.config.areal import parse_backend

    raw = cfg.get(r.key)
    if not isinstance(raw, str):
        return None
    try:
        spec = parse_backend(raw)
    except ValueError:
        return None
    if spec.d < 2 or spec.d % 2:
        return None
    new = spec.with_dims(d=spec.d // 2, t=spec.t * 2)
    return [r.change(r.key, raw, new.raw, f"shard each server's weights over {spec.t * 2} GPUs (same {spec.world} GPUs, "
                    "lower throughput)")]


@remedy("lower-mem-fraction")
def _r_lower_mem_fraction(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    from rlmedic.tools.config.areal import default_of

    value = as_number(cfg.get(r.key))
    value = value if value is not None else as_number(default_of(r.key, 0.9))
    if value is None or value <= 0.5:
        return None
    new = round(max(0.5, value - 0.1), 2)
    return [r.change(r.key, cfg.get(r.key), new, "leave headroom outside SGLang's static pool for activations and CUDA graphs")]


@remedy("min-tokens-per-mb")
def _r_min_tokens(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    length, new_tokens = as_number(cfg.get("train_dataset.max_length")), as_number(cfg.get("gconfig.max_new_tokens"))
    value = as_number(cfg.get(r.key))
    if length is None or new_tokens is None or value is None:
        return None
    floor = int(length + new_tokens)
    if value <= floor:
        return None
    return [r.change(r.key, int(value), floor, f"the smallest safe micro-batch: max_length {int(length)} + max_new_tokens {int(new_tokens)}")]


@remedy("gradient-checkpointing")
def _r_grad_ckpt(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    if cfg.get(r.key) is True:
        return None
    return [r.change(r.key, cfg.get(r.key), True, "recompute activations in the backward pass instead of storing them")]


@remedy("ulysses-context-parallel")
def _r_ulysses(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    from rlmedic.tools.config.areal import parse_backend
    from rlmedic.tools.config.checks import areal_model

    raw = cfg.get(r.key)
    model = areal_model(cfg, ctx)
    if not isinstance(raw, str) or model is None:
        return None
    try:
        spec = parse_backend(raw)
    except ValueError:
        return None
    if spec.hybrid or spec.d < 2 or spec.d % 2 or model.heads % (spec.c * 2):
        return None
    new = spec.with_dims(d=spec.d // 2, c=spec.c * 2)
    return [r.change(r.key, raw, new.raw, f"split long sequences over {spec.c * 2} GPUs with Ulysses; "
                    f"{spec.c * 2} divides {model.name}'s {model.heads} attention heads")]


@remedy("per-layer-optim-step")
def _r_per_layer(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    return _fsdp_switch(cfg, r, "stream optimizer states layer by layer instead of holding them all on the GPU")


@remedy("lightweight-optimizer")
def _r_optimizer(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    if cfg.get(r.key) not in ("adam", None) or cfg.get("actor.optimizer") is None:
        return None
    return [r.change(r.key, cfg.get(r.key), "adam_bf16", "bf16 optimizer states use half the memory of fp32 Adam")]


@remedy("disk-weight-update")
def _r_disk_update(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    if cfg.get(r.key) == "disk":
        return None
    return [r.change(r.key, cfg.get(r.key), "disk", "send weights through cluster.fileroot instead of NCCL buffers "
                    "(fileroot must be shared by all nodes)")]


@remedy("smaller-weight-chunks")
def _r_chunks(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    return _action(r, r.action)


@remedy("more-worker-memory")
def _r_worker_mem(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    value = as_number(cfg.get(r.key))
    if value is None or cfg.get(r.key, resolve=False) != cfg.get(r.key):
        return None
    return [r.change(r.key, int(value), int(value * 2), "data transfer between workers runs out of host memory; give "
                    "each worker twice as much")]


@remedy("colocated-mem-fraction")
def _r_colocated_fraction(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    from rlmedic.tools.config.areal import default_of
    from rlmedic.tools.config.checks import colocation_report

    value = as_number(cfg.get(r.key))
    value = value if value is not None else as_number(default_of(r.key, 0.9))
    fit = colocation_report(cfg, ctx)
    if fit is not None and fit.max_mem_fraction is not None:
        if fit.max_mem_fraction >= value:
            return None
        return [r.change(r.key, cfg.get(r.key), fit.max_mem_fraction, f"largest share that leaves the trainer room: {fit.reason}")]
    if value is None or value <= 0.5:
        return None
    return [r.change(r.key, cfg.get(r.key), 0.5, "SGLang and the trainer share the GPU; 0.5 is the share that fits on "
                    "48 GB cards (A40) in the seed's memory breakdown")]


@remedy("request-timeouts")
def _r_timeouts(cfg: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    from rlmedic.tools.config.rules import LONG_RUN_REQUEST_RETRIES, LONG_RUN_REQUEST_TIMEOUT

    out = []
    timeout, retries = as_number(cfg.get("rollout.request_timeout")), as_number(cfg.get("rollout.request_retries"))
    if timeout is None or timeout < LONG_RUN_REQUEST_TIMEOUT:
        out.append(r.change("rollout.request_timeout", cfg.get("rollout.request_timeout"), LONG_RUN_REQUEST_TIMEOUT,
                           "wait out slow generations and server restarts instead of failing the rollout"))
    if retries is None or retries < LONG_RUN_REQUEST_RETRIES:
        out.append(r.change("rollout.request_retries", cfg.get("rollout.request_retries"), LONG_RUN_REQUEST_RETRIES,
                           "retry transient disconnects"))
    return out or None


# ---- slime


@remedy("slime-lower-mem-fraction")
def _r_slime_mem(launch: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    value = as_number(launch.get(r.flag))
    if value is None:
        return [r.change(r.flag, None, 0.7, "SGLang's default share is too large here; slime's examples use 0.7", op="add_flag")]
    if value <= 0.4:
        return None
    return [r.change(r.flag, value, round(max(0.4, value - 0.1), 2), "leave headroom outside SGLang's static pool")]


@remedy("slime-more-gpus-per-engine")
def _r_slime_tp(launch: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    per = launch.get_int(r.flag) or 1
    total = launch.get_int("--rollout-num-gpus")
    if total is None and launch.has("--colocate"):
        total = (launch.get_int("--actor-num-nodes") or 1) * (launch.get_int("--actor-num-gpus-per-node") or 8)
    if not total or total % (per * 2):
        return None
    return [r.change(r.flag, per, per * 2, "shard each SGLang engine over twice as many GPUs", op="set" if launch.has(r.flag) else "add_flag")]


@remedy("slime-max-tokens-per-gpu")
def _r_slime_max_tokens(launch: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    resp = launch.get_int("--rollout-max-response-len")
    cp = launch.get_int("--context-parallel-size") or 1
    value = launch.get_int(r.flag)
    if not resp:
        return None
    target = max(1, resp // cp)
    out = []
    if value is None or value > target:
        out.append(r.change(r.flag, value, target, f"start at rollout_max_response_len / context_parallel_size = {resp} / {cp}",
                           op="set" if value is not None else "add_flag"))
    if out and not launch.has("--use-dynamic-batch-size"):
        out.append(r.change("--use-dynamic-batch-size", None, True, "--max-tokens-per-gpu only acts with dynamic batch size", op="add_flag"))
    return out or None


@remedy("slime-recompute-activations")
def _r_slime_recompute(launch: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    if launch.has("--recompute-granularity") or launch.has("--recompute-activations"):
        return None
    reason = "recompute activations in the backward pass (Megatron recomputation)"
    return [r.change("--recompute-granularity", None, "full", reason, op="add_flag"),
            r.change("--recompute-method", None, "uniform", reason, op="add_flag"),
            r.change("--recompute-num-layers", None, 1, reason, op="add_flag")]


@remedy("slime-context-parallel-size")
def _r_slime_cp(launch: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    cp = launch.get_int(r.flag) or 1
    tp = launch.get_int("--tensor-model-parallel-size") or 1
    pp = launch.get_int("--pipeline-model-parallel-size") or 1
    world = (launch.get_int("--actor-num-nodes") or 1) * (launch.get_int("--actor-num-gpus-per-node") or 8)
    if world % (tp * pp * cp * 2):
        return None
    return [r.change(r.flag, cp, cp * 2, "split each long sequence over twice as many GPUs", op="set" if launch.has(r.flag) else "add_flag")]


@remedy("slime-colocated-mem-fraction")
def _r_slime_colocated(launch: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    value = as_number(launch.get(r.flag))
    if value is not None and value <= 0.4:
        return None
    return [r.change(r.flag, value, 0.4, "in colocated mode Megatron keeps memory next to SGLang; the slime guide lowers "
                    "the share to 0.4", op="set" if value is not None else "add_flag")]


@remedy("slime-fault-tolerance")
def _r_slime_ft(launch: Any, ctx: LintContext, r: Remedy) -> list[Fix] | None:
    if launch.has(r.flag):
        return None
    return [r.change(r.flag, None, True, "restart crashed SGLang engines instead of failing the run", op="add_flag")]


# --------------------------------------------------------------------------- applying

#: Where a new slime flag goes: next to a related flag, when the script has it.
_NEAR = {
    "--use-dynamic-batch-size": "--max-tokens-per-gpu",
    "--sglang-mem-fraction-static": "--rollout-num-gpus-per-engine",
    "--load": "--save",
    "--save-interval": "--save",
    "--rollout-num-gpus": "--actor-num-gpus-per-node",
    "--recompute-method": "--recompute-granularity",
    "--recompute-num-layers": "--recompute-method",
    "--recompute-granularity": "--tensor-model-parallel-size",
    "--context-parallel-size": "--tensor-model-parallel-size",
    "--max-tokens-per-gpu": "--use-dynamic-batch-size",
}


def _near(launch: Any, flag: str) -> str | None:
    preferred = _NEAR.get(flag)
    if preferred and launch.has(preferred):
        return preferred
    prefix = "--" + flag[2:].split("-", 1)[0] + "-"
    related = [f.flag for f in launch.flags if f.flag.startswith(prefix)]
    return related[-1] if related else None


def apply_changes(framework: str, config: Any, changes: list[Fix]) -> None:
    """Apply changes in order to a parsed config (text patches)."""
    for change in changes:
        if framework == "slime":
            if change.op == "remove_flag":
                config.remove_flag(change.key)
            elif change.op == "add_flag":
                config.add_flag(change.key, None if change.new is True else change.new, near=_near(config, change.key))
            elif change.op == "rename":
                config.rename_flag(change.key, change.new)
            elif change.op == "remove_value":
                config.remove_value(change.key)
            else:
                config.set_flag(change.key, change.new)
        else:
            if change.op == "delete":
                config.delete(change.key)
            elif change.op == "rename":
                config.rename(change.key, change.new)
            else:
                config.set(change.key, change.new)


#: A colocated run on GPUs up to this size (24-48 GB cards: RTX 4090/5090, A40, L40S; a 48 GB card reports
#: ~44.5 GiB, an 80 GB one ~79) that runs out of memory in training also gets the colocated remedies:
#: there the trainer's room is what SGLang's share leaves (seed 004, "CUDA Out of Memory on A40/RTX 5090").
SMALL_GPU_GIB = 50.0


def _gpu_gib(ctx: LintContext) -> float | None:
    """The GPU's memory in GiB: the snapshot's smallest GPU, else the OOM message's total capacity."""
    from rlmedic.tools.gpu.advice import smallest_gpu

    gpu = smallest_gpu(ctx.snapshot)
    if gpu is not None and gpu.memory_total:
        return gpu.memory_total / 2**30
    sizes = [as_number((f.evidence.get("numbers") or {}).get("total_capacity_gib")) for f in ctx.findings
             if isinstance(f.evidence.get("numbers"), dict)]
    sizes = [s for s in sizes if s]
    return min(sizes) if sizes else None


def _phases(framework: str, config: Any, ctx: LintContext) -> list[str]:
    """The log's failure phases, plus ``colocated`` for a training OOM of a colocated AReaL run on a small GPU."""
    phases = list(ctx.phases)
    if framework != "areal" or "training" not in phases or "colocated" in phases:
        return phases
    from rlmedic.tools.config.checks import areal_layout

    gib = _gpu_gib(ctx)
    if areal_layout(config).colocated and gib is not None and gib <= SMALL_GPU_GIB:
        phases.append("colocated")
    return phases


def _remedy_changes(framework: str, config: Any, ctx: LintContext) -> tuple[list[Fix], list[Fix], list[Fix]]:
    """(applied, alternatives, actions) from the log's failure phases."""
    table = load_remedies().get(framework, {})
    applied: list[Fix] = []
    alternatives: list[Fix] = []
    actions: list[Fix] = []
    for phase in _phases(framework, config, ctx):
        chosen = False
        for entry in table.get(phase, []):
            fn = REMEDIES.get(entry.id)
            result = fn(config, ctx, entry) if fn else None
            if not result:
                continue
            if all(c.op == "action" for c in result):
                actions += result
                if entry.id == "kill-leftover-processes" and ctx.snapshot is not None and ctx.snapshot.has_gpus:
                    chosen = True  # leftovers explain the OOM: no config change needed
                continue
            if not chosen or entry.also:
                applied += result
                chosen = True
            else:
                alternatives += result
    return applied, alternatives, actions


def fix_parsed(framework: str, config: Any, ctx: LintContext) -> FixResult:
    """Choose, apply and verify changes on an already parsed config (the input object is left untouched)."""
    problems = lint_parsed(framework, config, ctx)
    remedy_applied, alternatives, actions = _remedy_changes(framework, config, ctx)
    chosen: list[Fix] = []
    seen: set[str] = set()
    for change in remedy_applied + [c for p in problems if p.severity in FIX_SEVERITIES for c in p.fixes]:
        if change.key in seen:
            continue
        seen.add(change.key)
        chosen.append(change)
    work = config.copy() if framework == "areal" else _copy_launch(config)
    applied: list[Fix] = []
    satisfied: list[Fix] = []  # changes whose value was already in effect when their turn came

    def apply_or_hand(change: Fix) -> None:
        """Apply ``change`` to ``work``; one the config cannot take becomes an action to do by hand."""
        try:
            apply_changes(framework, work, [change])
        except UserError as exc:
            actions.append(dataclasses.replace(change, op="action", why=f"apply by hand: {exc}"))
            return
        applied.append(change)

    # Renames of misspelt options first, then the rules are asked again: their changes were worked
    # out on the misspelt config (gconfig.max_new_token unknown -> max_new_tokens' default 16384
    # asked for a 17408-token micro-batch the renamed config does not need)
    renames = [c for c in chosen if c.op == "rename"]
    if renames and framework == "areal":
        for change in renames:
            apply_or_hand(change)
        seen = {c.key for c in renames}
        chosen = []
        relinted = lint_parsed(framework, work, ctx)
        for change in [c for c in remedy_applied if c.op != "rename"] + [
                c for p in relinted if p.severity in FIX_SEVERITIES for c in p.fixes]:
            if change.key not in seen:
                seen.add(change.key)
                chosen.append(change)
    chosen.sort(key=lambda c: c.op != "rename")
    # Fixes can expose new problems (fewer GPUs -> SGLang and trainer now share one): re-lint and
    # fix again, a few rounds at most, never touching a key twice.
    for _round in range(MAX_ROUNDS):
        for change in chosen:
            change = in_effect(framework, work, change)
            if change.op == "set" and change.old is not None and change.old == change.new:
                satisfied.append(change)  # already what is in effect: listing "5.0 -> 5.0" helps nobody
                continue
            apply_or_hand(change)
        remaining = lint_parsed(framework, work, ctx)
        chosen = []
        for problem in remaining:
            if problem.severity not in FIX_SEVERITIES:
                continue
            for change in problem.fixes:
                if change.key not in seen:
                    seen.add(change.key)
                    chosen.append(change)
        if not chosen:
            break
    alternatives = [a for a in alternatives if a.key not in seen]
    # a problem of the input that the changes made go away (a rename fixed what a rule measured):
    # its own proposal is settled, not work left by hand
    left = {(p.rule, p.key) for p in remaining}
    done = {(c.key, c.op) for c in applied + satisfied}
    for problem in problems:
        if (problem.rule, problem.key) not in left and problem.severity in FIX_SEVERITIES:
            for change in problem.fixes:
                if (change.key, change.op) not in done:
                    done.add((change.key, change.op))
                    satisfied.append(change)
    actions += _by_hand(problems, applied + satisfied, actions)
    return FixResult(
        path=config.path, framework=framework, problems=problems, changes=applied, alternatives=alternatives,
        actions=actions, remaining=remaining, text=work.dump(), diff=redact(work.diff()), phases=_phases(framework, config, ctx),
        settled=satisfied, settings=_settings(framework, config),
    )


def _settings(framework: str, config: Any) -> dict[str, Any]:
    from rlmedic.tools.config.keys import settings_in_effect

    return {k: redact_value(v) if isinstance(v, str) else v for k, v in settings_in_effect(framework, config).items()}


def in_effect(framework: str, config: Any, change: Fix) -> Fix:
    """``change`` with ``old`` set to the value in effect where it applies (after earlier renames,
    documented defaults included). A rename's old value is the old name; a switch's stray value stays as written."""
    if change.op in ("rename", "action", "remove_value"):
        return change
    return dataclasses.replace(change, old=config.value(change.key))


def _by_hand(problems: list[Finding], applied: list[Fix], actions: list[Fix]) -> list[Fix]:
    """Every change lint offered that was not applied, listed for the user with the reason."""
    done = {(c.key, c.op) for c in applied} | {(c.key, "action") for c in actions}
    touched = {c.key for c in applied}
    out: list[Fix] = []
    for problem in problems:
        for change in problem.fixes:
            if (change.key, change.op) in done or (change.key, "action") in done:
                continue
            if problem.severity not in FIX_SEVERITIES:
                why = f"not applied automatically ({problem.severity} only): {change.why}"
            elif change.key in touched:
                why = f"not applied: another fix already changes {change.key}"
            else:
                why = f"not applied: {change.why}"
            out.append(dataclasses.replace(change, op="action", action="",
                                           why=f"edit by hand if you want it: {change}; {why}"))
            done.add((change.key, "action"))
    return out


def _copy_launch(launch: Any) -> Any:
    from rlmedic.tools.config.slime import SlimeLaunch

    return SlimeLaunch(path=launch.path, original=launch.original, text=launch.text)


def fix_config(
    path: str | os.PathLike[str],
    *,
    log_paths: Iterable[str | os.PathLike[str]] = (),
    findings: Iterable[Finding] = (),
    snapshot: Any = None,
    spot: bool = False,
    fileroot: str = "",
    confinement: Confinement,
) -> FixResult:
    """Lint ``path`` and choose changes (log findings and hardware included); return the corrected copy.

    Reads only: the input is opened read-only and nothing is written. Writing the
    corrected file is a front-door action (:func:`write_corrected`, the CLI's ``-o``).
    """
    log_paths = list(log_paths)
    framework, config = load_config(path, confinement=confinement)
    all_findings = list(findings) + findings_from_logs(log_paths, confinement=confinement)
    ctx = LintContext(snapshot=snapshot, findings=all_findings, spot=spot, fileroot=fileroot, confinement=confinement)
    return fix_parsed(framework, config, ctx)


def corrected_text(path: str | os.PathLike[str], changes: list[Fix], *, confinement: Confinement) -> str:
    """The corrected config with the user's own values (secrets included): ``changes`` re-applied to the input.

    Tool results are redacted for every consumer; only the file the user asked for
    (``-o``) keeps the original text, so it is rebuilt here from the input and the
    applied changes.
    """
    framework, config = load_config(path, confinement=confinement)
    work = config.copy() if framework == "areal" else _copy_launch(config)
    for change in changes:
        if REDACTED in str(change.new):
            raise UserError(f"{change.key}: the new value is a redacted secret; apply this change by hand")
    apply_changes(framework, work, changes)
    return work.dump()


def write_corrected(source: str | os.PathLike[str], output: str | os.PathLike[str], changes: list[Fix], *,
                    confinement: Confinement, force: bool = False) -> Path:
    """Front-door action: write the corrected config to a new file.

    Never the input, also through links, and never any other file read through
    ``confinement`` (pass the one the tool ran in: its logs and snapshot count too).
    """
    text = corrected_text(source, changes, confinement=confinement)
    return write_output(source, output, text, force=force, confinement=confinement)


def write_output(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    text: str,
    *,
    force: bool = False,
    confinement: Confinement | None = None,
) -> Path:
    """Write the corrected config to a new file.

    Refused, ``force`` or not: the input config itself (by path, through links, by hard
    link) and any other file the command read through ``confinement`` (a log, a snapshot).
    """
    src = Path(source).expanduser().resolve()
    dst = Path(output).expanduser()
    try:
        same = dst.resolve() == src or (dst.exists() and src.exists() and os.path.samefile(dst, src))
    except OSError as exc:
        raise UserError(f"{output}: cannot write ({exc.strerror or exc})") from exc
    if same:
        raise UserError(f"{output}: is the input file; rlmedic never overwrites your config, choose another -o path")
    return write_new_text(dst, text, force=force, force_option="--force", inputs=confinement)
