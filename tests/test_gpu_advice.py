"""Advice that needs the hardware: attention backend, colocation budget (seed 004's A40 table), snapshot advice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ANYWHERE, FIXTURES
from rlmedic.confine import Confinement
from rlmedic.tools.gpu.snapshot import GIB, load_snapshot
from rlmedic.tools.gpu.advice import (
    attention_backend_advice,
    colocation_fit,
    estimate_trainer_memory,
    gpu_advice,
    model_spec,
)

GPU = FIXTURES / "gpu"


@pytest.mark.parametrize(
    ("snapshot", "recommended", "fa3_ok"),
    [("rtx5090", "flashinfer", False), ("h200_idle", "fa3", True), ("h100x8_running", "fa3", True),
     ("a40_idle", "flashinfer", False)],
)
def test_attention_backend_by_architecture(snapshot: str, recommended: str, fa3_ok: bool) -> None:
    advice = attention_backend_advice(load_snapshot(GPU / f"{snapshot}.json", confinement=ANYWHERE).gpus[0])
    assert advice.recommended == recommended
    assert advice.allows("fa3") is fa3_ok
    assert advice.allows("flashinfer")
    assert advice.citation.ref == "attention-backend-selection"


def test_seed_a40_table() -> None:
    """Seed 004: default (SGLang 80%) OOMs on an A40; memory-optimised (50%, checkpointing) fits."""
    a40 = load_snapshot(GPU / "a40_idle.json", confinement=ANYWHERE).gpus[0]
    model = model_spec("Qwen/Qwen2.5-0.5B-Instruct")
    default_trainer = estimate_trainer_memory(model, gradient_checkpointing=False, max_tokens_per_mb=5120)
    default = colocation_fit(a40.memory_total, 0.8, default_trainer, model=model)
    assert not default.fits
    assert round(default.sglang_bytes / GIB) == 36  # "~36GB (80%)"
    optimised_trainer = estimate_trainer_memory(model, gradient_checkpointing=True, max_tokens_per_mb=4096)
    optimised = colocation_fit(a40.memory_total, 0.5, optimised_trainer, model=model)
    assert optimised.fits
    assert 22 <= optimised.sglang_bytes / GIB <= 23  # "~22GB (50%)"
    assert optimised_trainer.total < default_trainer.total
    # the largest share that still fits is offered, in 0.05 steps
    assert default.max_mem_fraction is not None and 0.5 <= default.max_mem_fraction < 0.8
    again = colocation_fit(a40.memory_total, default.max_mem_fraction, default_trainer, model=model)
    assert again.fits


def test_memory_estimate_components_behave() -> None:
    model = model_spec("Qwen/Qwen3-8B")
    base = estimate_trainer_memory(model, max_tokens_per_mb=8192)
    assert set(base.components) == {"weights", "gradients", "optimizer_states", "activations", "logits"}
    assert estimate_trainer_memory(model, max_tokens_per_mb=8192, shards=8).total < base.total
    assert estimate_trainer_memory(model, max_tokens_per_mb=8192, optimizer="adam_bf16").total < base.total
    assert estimate_trainer_memory(model, max_tokens_per_mb=8192, offload=True).components["optimizer_states"] == 0
    assert estimate_trainer_memory(model, max_tokens_per_mb=8192, optimizer=None).components["gradients"] == 0
    assert base.to_dict()["assumptions"]


def test_sglang_share_too_small_for_the_weights() -> None:
    model = model_spec("Qwen/Qwen3-32B")
    fit = colocation_fit(80 * GIB, 0.5, 1 * GIB, model=model)
    assert not fit.fits and "cannot hold the weights" in fit.reason
    # a 1 GiB trainer leaves room: a larger share than 0.5 would hold the weights
    assert fit.max_mem_fraction is not None and fit.max_mem_fraction * 80 * GIB >= fit.sglang_min_bytes > 0.5 * 80 * GIB


def test_model_spec_table_and_local_config(tmp_path: Path) -> None:
    assert model_spec("Qwen/Qwen2.5-1.5B-Instruct").heads == 12
    assert model_spec("/models/qwen3-4b").heads == 32
    assert model_spec("someone/unknown-model") is None
    assert model_spec("${actor.path}") is None
    local = tmp_path / "my-model"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({
        "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 4,
        "vocab_size": 32000, "intermediate_size": 5632, "tie_word_embeddings": False,
    }))
    spec = model_spec(str(local), confinement=Confinement.for_paths([tmp_path]))
    assert spec.source == "config.json" and spec.heads == 16 and 0.9 < spec.params_b < 1.3
    # outside the allowed roots the local file is not read
    assert model_spec(str(local), confinement=Confinement(roots=[tmp_path / "other"])) is None


def test_snapshot_advice() -> None:
    ids = lambda name: [(a.id, a.severity) for a in gpu_advice(load_snapshot(GPU / f"{name}.json", confinement=ANYWHERE))]  # noqa: E731
    leftovers = ids("a40_leftovers")
    assert leftovers.count(("leftover-process", "warning")) == 2
    assert ("consumer-gpu-memory", "info") in leftovers
    running = ids("h100x8_running")
    assert ("ecc-errors", "error") in running and ("clocks-slowdown", "warning") in running
    assert ("leftover-process", "warning") not in running
    assert [a.id for a in gpu_advice(load_snapshot(GPU / "h200_idle.json", confinement=ANYWHERE))] == ["attention-backend"]
    assert ids("no_gpu") == [("no-gpu", "info")]


def test_unattributed_memory_is_reported() -> None:
    data = json.loads((GPU / "h200_idle.json").read_text())
    data["gpus"][0]["memory_used"] = 40 * GIB
    path = FIXTURES / "gpu" / "h200_idle.json"
    from rlmedic.tools.gpu.snapshot import GpuSnapshot

    snap = GpuSnapshot.from_dict(data, where=str(path))
    advice = [a for a in gpu_advice(snap) if a.id == "unattributed-memory"]
    assert advice and "40.0 GiB" in advice[0].message


def test_advice_as_findings() -> None:
    from rlmedic.types import CATEGORIES

    findings = gpu_advice(load_snapshot(GPU / "a40_leftovers.json", confinement=ANYWHERE))
    assert all(f.category in CATEGORIES for f in findings)
    leftover = next(f for f in findings if f.id == "leftover-process" and f.evidence["gpu"] == 0)
    assert leftover.card == "oom-initialization" and "kill 4121" in leftover.fixes[0].action
    assert leftover.evidence["pid"] == 4121 and leftover.fixes[0].citations == (leftover.citation,)
    data = leftover.to_dict()
    assert data["citations"][0]["kind"] == "card" and data["citations"][0]["text"].startswith("card:oom-initialization (")
    assert data["fixes"] == [str(leftover.fixes[0])] and data["message"] == leftover.message
