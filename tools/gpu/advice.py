"""Advice that needs the hardware: leftovers, attention backend, colocation memory budget.

Everything here takes a :class:`~rlmedic.tools.gpu.snapshot.GpuSnapshot` (live or loaded from a
file) plus plain numbers, and returns data. The memory model is deliberately simple and
written out in :class:`TrainerMemory.assumptions`, so users can see why a budget fails.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rlmedic.bounded import load_json
from rlmedic.confine import Confinement
from rlmedic.errors import UserError
from rlmedic.tools.citations import card_citation
from rlmedic.tools.gpu.snapshot import (
    GIB,
    ROLE_SGLANG,
    ROLE_TRAINER,
    SLOWDOWN_REASONS,
    GpuInfo,
    GpuSnapshot,
)
from rlmedic.types import Citation, Finding, Fix

MODEL_SPECS_PATH = Path(__file__).parent / "model_specs.yaml"

#: Memory the budget keeps free on a shared GPU: CUDA contexts of two processes, NCCL
#: buffers and allocator fragmentation.
HEADROOM_BYTES = 2 * GIB
#: SGLang needs room for the weights plus some KV cache inside its static share.
MIN_KV_CACHE_BYTES = 1 * GIB
#: Memory below which seed configs call for the memory-optimised settings.
LARGE_GPU_BYTES = 80 * 10**9

DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "float8": 1, "fp8": 1}
#: Optimizer state bytes per parameter (AReaL's optimizer.type values).
OPTIMIZER_STATE_BYTES = {"adam": 8, "adamw": 8, "adam_bf16": 4, "sgd": 0}


# --------------------------------------------------------------------------- model facts


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params_b: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    intermediate: int = 0
    source: str = "table"

    @property
    def params(self) -> int:
        return int(self.params_b * 1e9)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@functools.cache
def _model_table() -> dict[str, Any]:
    with open(MODEL_SPECS_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _table_key(name: str) -> str:
    base = name.rstrip("/").split("/")[-1].lower()
    for suffix in _model_table().get("strip_suffixes", []):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def model_spec(path_or_name: str | None, *, confinement: Confinement | None = None) -> ModelSpec | None:
    """Architecture facts for a model: its local ``config.json`` if readable, else the shipped table."""
    if not path_or_name or "${" in str(path_or_name):
        return None
    name = str(path_or_name)
    local = Path(name).expanduser() / "config.json"
    if confinement is not None and confinement.allows(local):
        try:
            spec = _from_hf_config(name, load_json(confinement.read_text(local, max_bytes=1024 * 1024, whole=True), str(local)))
        except UserError:
            spec = None
        if spec:
            return spec
    entry = _model_table()["models"].get(_table_key(name))
    if not entry:
        return None
    return ModelSpec(name=name, source="table", **entry)


def _from_hf_config(name: str, data: dict[str, Any]) -> ModelSpec | None:
    try:
        hidden = int(data["hidden_size"])
        layers = int(data["num_hidden_layers"])
        heads = int(data["num_attention_heads"])
        vocab = int(data.get("vocab_size", 0))
        inter = int(data.get("intermediate_size", 4 * hidden))
    except (KeyError, TypeError, ValueError):
        return None
    kv = int(data.get("num_key_value_heads", heads))
    head_dim = int(data.get("head_dim", hidden // heads))
    # Dense decoder estimate: attention (q, o + k, v) + SwiGLU MLP + norms, plus embeddings.
    per_layer = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2 + 3 * hidden * inter
    embed = vocab * hidden * (1 if data.get("tie_word_embeddings") else 2)
    params = per_layer * layers + embed
    return ModelSpec(
        name=name, params_b=round(params / 1e9, 3), layers=layers, hidden=hidden, heads=heads, kv_heads=kv,
        vocab=vocab, intermediate=inter, source="config.json",
    )


# --------------------------------------------------------------------------- attention backend


@dataclass
class AttentionAdvice:
    gpu: str
    sm: int | None
    recommended: str
    acceptable: tuple[str, ...]
    reason: str
    citation: Citation

    def allows(self, backend: str | None) -> bool:
        return (backend or "").lower() in self.acceptable

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "sm": self.sm,
            "recommended": self.recommended,
            "acceptable": list(self.acceptable),
            "reason": self.reason,
            "citation": self.citation.to_dict(),
        }


def attention_backend_advice(gpu: GpuInfo) -> AttentionAdvice | None:
    """Which SGLang ``attention_backend`` suits this architecture (seed 004's table)."""
    sm = gpu.sm
    if sm is None:
        return None
    cite = card_citation("attention-backend-selection")
    if sm >= 100:
        return AttentionAdvice(
            gpu.name, sm, "flashinfer", ("flashinfer",),
            f"{gpu.name} is SM{sm} (Blackwell); SGLang's fa3 kernels do not run there, use flashinfer", cite,
        )
    if sm >= 90:
        return AttentionAdvice(
            gpu.name, sm, "fa3", ("fa3", "flashinfer"),
            f"{gpu.name} is SM{sm} (Hopper): the default fa3 works, flashinfer too", cite,
        )
    return AttentionAdvice(
        gpu.name, sm, "flashinfer", ("flashinfer", "triton", "torch_native"),
        f"{gpu.name} is SM{sm}; fa3 targets Hopper, flashinfer works on every architecture", cite,
    )


# --------------------------------------------------------------------------- memory budget


@dataclass
class TrainerMemory:
    """Per-GPU training memory, by component, in bytes."""

    components: dict[str, int]
    assumptions: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.components.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_gib": round(self.total / GIB, 2),
            "components_gib": {k: round(v / GIB, 2) for k, v in self.components.items()},
            "assumptions": self.assumptions,
        }


def estimate_trainer_memory(
    model: ModelSpec,
    *,
    dtype: str = "bfloat16",
    optimizer: str | None = "adam",
    gradient_checkpointing: bool = False,
    max_tokens_per_mb: int = 8192,
    shards: int = 1,
    offload: bool = False,
) -> TrainerMemory:
    """Rough peak memory of one FSDP training rank.

    weights + gradients (param dtype) + optimizer states (fp32 moments for Adam), sharded
    over ``shards`` ranks; activations of one micro-batch (about 34·hidden bytes per token
    per layer without recomputation, one saved input per layer plus one live layer with
    gradient checkpointing); fp32 logits over the vocabulary for the micro-batch.
    """
    width = DTYPE_BYTES.get(str(dtype).lower(), 2)
    shards = max(1, int(shards))
    params = model.params
    opt_name = (optimizer or "none").lower()
    opt_bytes = OPTIMIZER_STATE_BYTES.get(opt_name, 8) if optimizer else 0
    tokens = max(1, int(max_tokens_per_mb))
    components = {
        "weights": params * width // shards,
        "gradients": params * width // shards if optimizer else 0,
        "optimizer_states": 0 if offload else params * opt_bytes // shards,
    }
    per_layer = 34 * model.hidden * tokens
    if gradient_checkpointing:
        components["activations"] = 2 * model.hidden * tokens * model.layers + per_layer
    else:
        components["activations"] = per_layer * model.layers
    components["logits"] = 4 * model.vocab * tokens
    assumptions = [
        f"{model.params_b}B parameters ({model.source}), {dtype} weights and gradients",
        f"optimizer {opt_name}: {opt_bytes} bytes/parameter" + (" (offloaded to CPU)" if offload else ""),
        f"sharded over {shards} rank(s)",
        f"{tokens} tokens per micro-batch, gradient checkpointing {'on' if gradient_checkpointing else 'off'}",
    ]
    return TrainerMemory(components=components, assumptions=assumptions)


@dataclass
class ColocationFit:
    """Does SGLang's static share plus a trainer fit on one shared GPU?"""

    gpu_total: int
    mem_fraction_static: float
    sglang_bytes: int
    trainer_bytes: int
    other_bytes: int
    headroom_bytes: int
    sglang_min_bytes: int
    fits: bool
    max_mem_fraction: float | None  # largest fraction (0.05 steps) that fits; None if none does
    reason: str

    @property
    def free_bytes(self) -> int:
        return self.gpu_total - self.sglang_bytes - self.trainer_bytes - self.other_bytes - self.headroom_bytes

    def to_dict(self) -> dict[str, Any]:
        g = lambda b: round(b / GIB, 1)  # noqa: E731
        return {
            "fits": self.fits,
            "gpu_total_gib": g(self.gpu_total),
            "mem_fraction_static": self.mem_fraction_static,
            "sglang_gib": g(self.sglang_bytes),
            "trainer_gib": g(self.trainer_bytes),
            "other_processes_gib": g(self.other_bytes),
            "headroom_gib": g(self.headroom_bytes),
            "free_gib": g(self.free_bytes),
            "max_mem_fraction": self.max_mem_fraction,
            "reason": self.reason,
        }


def colocation_fit(
    gpu_total: int,
    mem_fraction_static: float,
    trainer: TrainerMemory | int,
    *,
    model: ModelSpec | None = None,
    dtype: str = "bfloat16",
    sglang_tp: int = 1,
    other_used: int = 0,
    headroom: int = HEADROOM_BYTES,
) -> ColocationFit:
    """Budget for SGLang and a trainer sharing one GPU (seed 004's A40 table is the model).

    SGLang reserves ``mem_fraction_static`` of the *total* memory for weights and KV
    cache; the trainer, whatever else already holds memory, and a fixed headroom must fit
    in the rest.
    """
    trainer_bytes = trainer if isinstance(trainer, int) else trainer.total
    sglang_min = 0
    if model is not None:
        sglang_min = model.params * DTYPE_BYTES.get(str(dtype).lower(), 2) // max(1, sglang_tp) + MIN_KV_CACHE_BYTES
    sglang = int(gpu_total * mem_fraction_static)
    rest = gpu_total - sglang - other_used - headroom
    available_fraction = (gpu_total - trainer_bytes - other_used - headroom) / gpu_total
    best = math.floor(available_fraction * 20 + 1e-9) / 20
    if best * gpu_total < sglang_min or best <= 0:
        best_fraction: float | None = None
    else:
        best_fraction = round(min(best, 0.95), 2)
    fits = trainer_bytes <= rest and sglang >= sglang_min
    if sglang < sglang_min:
        reason = (
            f"SGLang's share ({sglang / GIB:.1f} GiB) cannot hold the weights plus a minimal KV cache "
            f"({sglang_min / GIB:.1f} GiB)"
        )
    elif fits:
        reason = (
            f"SGLang {sglang / GIB:.1f} GiB + trainer ~{trainer_bytes / GIB:.1f} GiB + headroom "
            f"{headroom / GIB:.0f} GiB" + (f" + other processes {other_used / GIB:.1f} GiB" if other_used else "")
            + f" fit in {gpu_total / GIB:.1f} GiB"
        )
    else:
        reason = (
            f"SGLang reserves {sglang / GIB:.1f} GiB ({mem_fraction_static:.0%}), leaving {max(rest, 0) / GIB:.1f} GiB "
            f"after headroom" + (f" and other processes ({other_used / GIB:.1f} GiB)" if other_used else "")
            + f" for a trainer that needs ~{trainer_bytes / GIB:.1f} GiB"
        )
    return ColocationFit(
        gpu_total=gpu_total, mem_fraction_static=mem_fraction_static, sglang_bytes=sglang, trainer_bytes=trainer_bytes,
        other_bytes=other_used, headroom_bytes=headroom, sglang_min_bytes=sglang_min, fits=fits,
        max_mem_fraction=best_fraction, reason=reason,
    )


# --------------------------------------------------------------------------- snapshot advice


_ADVICE_CATEGORY = {"clocks-slowdown": "performance", "attention-backend": "install_env",
                    "consumer-gpu-memory": "config_constraint"}


def _advice(id: str, severity: str, message: str, *, gpu: int | None = None, action: str = "",
            citation: Citation | None = None, evidence: dict[str, Any] | None = None) -> Finding:
    """One piece of snapshot advice as a Finding: the GPU index in ``evidence["gpu"]``, the action as its fix."""
    cites = [citation] if citation else []
    return Finding(
        id=id, category=_ADVICE_CATEGORY.get(id, "other"), severity=severity, summary=message,  # type: ignore[arg-type]
        evidence={"gpu": gpu, **(evidence or {})},
        fixes=[Fix(action=action, citations=tuple(cites))] if action else [], citations=cites,
        card=citation.ref if citation and citation.kind == "card" else "",
    )


def gpu_advice(snapshot: GpuSnapshot) -> list[Finding]:
    """What the snapshot says before a run: leftovers, foreign memory, faults, backend choice."""
    advice: list[Finding] = []
    if not snapshot.has_gpus:
        advice.append(_advice("no-gpu", "info", f"No GPU visible: {snapshot.message or snapshot.status}."))
        return advice
    init_card = card_citation("oom-initialization")
    for gpu in snapshot.gpus:
        for proc in gpu.processes:
            if proc.leftover:
                mem = f"{proc.used_gpu_memory / GIB:.1f} GiB" if proc.used_gpu_memory else "memory"
                advice.append(
                    _advice(
                        "leftover-process", "warning",
                        f"GPU {gpu.index}: pid {proc.pid} ({proc.role}) holds {mem} and looks like a leftover: "
                        f"{proc.leftover_reason}. It will make the next run OOM at start-up.",
                        gpu=gpu.index,
                        action=f"kill {proc.pid}  (or `ray stop --force` when it belongs to a Ray cluster)",
                        citation=init_card,
                        evidence={"pid": proc.pid, "cmdline": proc.cmdline, "age_s": proc.age_s},
                    )
                )
        attributed = sum(p.used_gpu_memory or 0 for p in gpu.processes)
        if gpu.memory_used - attributed > 2 * GIB and not any(p.used_gpu_memory is None for p in gpu.processes):
            advice.append(
                _advice(
                    "unattributed-memory", "warning",
                    f"GPU {gpu.index}: {(gpu.memory_used - attributed) / GIB:.1f} GiB in use by processes this host "
                    "cannot see (another container or a process in a different PID namespace).",
                    gpu=gpu.index, action="check other containers on the node before starting", citation=init_card,
                )
            )
        busy = [p for p in gpu.processes if not p.leftover and p.role in (ROLE_SGLANG, ROLE_TRAINER)]
        if busy:
            advice.append(
                _advice(
                    "gpu-in-use", "info",
                    f"GPU {gpu.index}: in use by {', '.join(f'{p.role} pid {p.pid}' for p in busy)}.",
                    gpu=gpu.index,
                )
            )
        if gpu.ecc_uncorrected_volatile:
            advice.append(
                _advice(
                    "ecc-errors", "error",
                    f"GPU {gpu.index}: {gpu.ecc_uncorrected_volatile} uncorrected ECC error(s) since the driver loaded; "
                    "results on this GPU cannot be trusted.",
                    gpu=gpu.index, action="move the job to another node (spot: request a new instance)",
                )
            )
        slow = [r for r in gpu.clocks_event_reason_names if r in SLOWDOWN_REASONS]
        if slow:
            advice.append(
                _advice(
                    "clocks-slowdown", "warning",
                    f"GPU {gpu.index}: clocks held back ({', '.join(slow)}); temperature {gpu.temperature} °C.",
                    gpu=gpu.index, action="check cooling and power limits; expect slower steps",
                )
            )
    seen: set[int | None] = set()
    for gpu in snapshot.gpus:
        att = attention_backend_advice(gpu)
        if att and att.sm not in seen:
            seen.add(att.sm)
            advice.append(
                _advice(
                    "attention-backend", "info",
                    f"{att.reason}: set sglang.attention_backend (AReaL) / --sglang-attention-backend (slime) to "
                    f"{att.recommended}.",
                    gpu=gpu.index, citation=att.citation, evidence={"sm": att.sm, "acceptable": list(att.acceptable)},
                )
            )
    small = [g for g in snapshot.gpus if 0 < g.memory_total < LARGE_GPU_BYTES]
    if small:
        g = small[0]
        advice.append(
            _advice(
                "consumer-gpu-memory", "info",
                f"{g.name} has {g.memory_total / GIB:.0f} GiB: with SGLang and the trainer on the same GPU use the "
                "memory-optimised settings (sglang.mem_fraction_static 0.5, gradient checkpointing, smaller "
                "max_tokens_per_mb and max_concurrent_rollouts); check a config with "
                "`rlmedic lint-config CONFIG --snapshot F`.",
                gpu=g.index, citation=card_citation("oom-consumer-gpu"),
            )
        )
    return advice


def snapshot_gpu_count(snapshot: GpuSnapshot | None) -> int | None:
    return len(snapshot.gpus) if snapshot is not None and snapshot.has_gpus else None


def smallest_gpu(snapshot: GpuSnapshot | None) -> GpuInfo | None:
    if snapshot is None or not snapshot.has_gpus:
        return None
    return min(snapshot.gpus, key=lambda g: g.memory_total)


def other_used_bytes(gpu: GpuInfo) -> int:
    """Memory already held on ``gpu`` (by leftovers or anything else) when the snapshot was taken."""
    return int(gpu.memory_used)
