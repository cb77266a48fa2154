"""Training curves for the run-health tests and the detectors' evaluation: healthy runs and one
pathology each, under verl's, slime's and AReaL's real key names, written to disk by the real
libraries (wandb offline, TensorBoard's writer through torch) or as JSONL.

``curves(pathology, framework, seed=..., onset=...)`` is deterministic for a seed; the held-out
evaluation (benchmarks/runs_detectors.py) draws seeds, onsets, noise and lengths the tests never use.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: concept -> the key each framework logs it under (tools/runs/vocabulary.yaml cites the sources)
KEYS: dict[str, dict[str, str]] = {
    "verl": {
        "reward": "critic/score/mean", "val_score": "val-core/openai/gsm8k/reward/mean@1", "entropy": "actor/entropy",
        "kl": "actor/kl_loss", "clip_fraction": "actor/pg_clipfrac", "response_length": "response_length/mean",
        "response_length_max": "response_length/max", "truncation_ratio": "response_length/clip_ratio",
        "grad_norm": "actor/grad_norm", "loss": "actor/pg_loss", "logprob_diff": "training/rollout_probs_diff_mean",
        "throughput": "perf/throughput", "step_time": "timing_s/step",
        "staleness": "training/off_policy/trajectory_staleness/mean",
    },
    "slime": {
        "reward": "rollout/raw_reward", "val_score": "eval/gsm8k", "entropy": "train/entropy_loss",
        "kl": "train/kl_loss", "clip_fraction": "train/pg_clipfrac", "response_length": "rollout/response_len/mean",
        "response_length_max": "rollout/response_len/max", "truncation_ratio": "rollout/truncated_ratio",
        "grad_norm": "train/grad_norm", "loss": "train/loss", "logprob_diff": "train/train_rollout_logprob_abs_diff",
        "throughput": "perf/tokens_per_gpu_per_sec", "step_time": "perf/step_time",
    },
    "areal": {
        "reward": "ppo_actor/task_reward/avg", "val_score": "eval-rollout/reward", "entropy": "ppo_actor/update/entropy/avg",
        "kl": "ppo_actor/update/approx_kl/avg", "clip_fraction": "ppo_actor/update/clip_ratio/avg",
        "response_length": "ppo_actor/seq_len/avg", "truncation_ratio": "ppo_actor/no_eos_ratios/avg",
        "grad_norm": "ppo_actor/update/grad_norm", "loss": "ppo_actor/update/actor_loss/avg",
        "logprob_diff": "ppo_actor/update/behave_approx_kl/avg", "throughput": "perf/throughput",
        "step_time": "timeperf/train_step", "staleness": "ppo_actor/update/version_stats/sample_staleness_theta_avg",
    },
}
#: the detector rule each pathology should fire first (its root)
PATHOLOGIES = {
    "entropy_collapse": "entropy-collapse", "kl_blowup": "kl-blowup", "length_cap": "length-cap",
    "zero_reward": "zero-reward", "flat_reward": "flat-reward", "reward_val_divergence": "reward-val-divergence",
    "grad_spike": "grad-norm-spike", "nan": "nonfinite", "logprob_mismatch": "logprob-mismatch",
    "throughput_drop": "throughput-drop", "step_time_rise": "step-time-rise", "stale_samples": "stale-samples",
}
#: frameworks that log a pathology's metric (slime logs no staleness)
LOGGED_BY = {"stale_samples": ("verl", "areal")}
CAP = 1024
VAL_EVERY = 10


def curves(pathology: str, framework: str = "verl", *, steps: int = 200, seed: int = 0, onset: int | None = None,
           noise: float = 1.0) -> tuple[dict[str, tuple[list[int], list[float]]], int]:
    """``(key -> (steps, values), onset step)`` for a run with ``pathology`` ("healthy" for none)."""
    rng = np.random.default_rng(seed)
    n = steps
    t = np.arange(1, n + 1)
    on = onset if onset is not None else int(n * rng.uniform(0.45, 0.7))
    after = t >= on

    def jitter(scale: float) -> Any:
        return rng.normal(0, scale * noise, n)

    reward = np.clip(0.2 + 0.35 * (1 - np.exp(-t / (n / 3))) + jitter(0.03), 0, 1)
    entropy = 0.9 - 0.25 * t / n + jitter(0.02)
    kl = 0.002 + 0.01 * t / n + np.abs(jitter(0.001))
    clipfrac = 0.01 + np.abs(jitter(0.003))
    truncation = np.clip(0.02 + np.abs(jitter(0.01)), 0, 1)
    length = 300 + 150 * t / n + jitter(15)
    longest = np.minimum(CAP, length * 2.0 + np.abs(jitter(30)))
    grad = 0.8 + np.abs(jitter(0.15))
    loss = jitter(0.05)
    lpdiff = 0.01 + np.abs(jitter(0.002))
    thr = 1000 + jitter(40)
    step_time = 30 + jitter(1.5)
    val_steps = t[t % VAL_EVERY == 0]
    val = np.clip(0.25 + 0.3 * (1 - np.exp(-val_steps / (n / 3))) + rng.normal(0, 0.01 * noise, len(val_steps)), 0, 1)

    if pathology == "entropy_collapse":
        entropy = np.where(after, 0.01 + np.abs(jitter(0.003)), entropy)
    elif pathology == "kl_blowup":
        kl = np.where(after, 0.5 + 1.5 * rng.random(n), kl)
    elif pathology == "length_cap":
        truncation = np.where(after, np.clip(0.85 + jitter(0.04), 0, 1), truncation)
        length = np.where(after, CAP * 0.97 + jitter(5), length)
        longest = np.where(after, float(CAP), longest)
        reward = np.where(t >= on + 10, np.abs(jitter(0.005)) * 0, reward)
    elif pathology == "zero_reward":
        reward = np.where(after, 0.0, reward)
    elif pathology == "flat_reward":
        reward = np.where(after, 0.25, reward)
    elif pathology == "reward_val_divergence":
        reward = np.where(after, reward + 0.3 * (t - on) / n, reward)
        val = np.where(val_steps >= on, val[np.searchsorted(val_steps, on) - 1] - 0.4 * (val_steps - on) / n, val)
    elif pathology == "grad_spike":
        grad = grad.copy()
        grad[on - 1] = 60.0
    elif pathology == "nan":
        loss = loss.copy()
        loss[on - 1:] = np.nan
        grad = grad.copy()
        grad[on - 1:] = np.nan
    elif pathology == "logprob_mismatch":
        lpdiff = np.where(after, 0.08 + 0.4 * (t - on) / n + np.abs(jitter(0.01)), lpdiff)
    elif pathology == "throughput_drop":
        thr = np.where(after, 350 + jitter(20), thr)
    elif pathology == "step_time_rise":
        step_time = np.where(after, 95 + jitter(3), step_time)
    # staleness (versions behind) from its own generator: the other curves stay as they were before it was added
    srng = np.random.default_rng(seed + 7_000_003)
    staleness = np.clip(1.5 + srng.normal(0, 0.3 * noise, n), 0, None)
    if pathology == "stale_samples":
        staleness = np.where(after, 14 + np.abs(srng.normal(0, 1.5 * noise, n)), staleness)
    elif pathology not in ("healthy", "entropy_collapse", "kl_blowup", "length_cap", "zero_reward", "flat_reward",
                           "reward_val_divergence", "grad_spike", "nan", "logprob_mismatch", "throughput_drop",
                           "step_time_rise"):
        raise ValueError(pathology)

    keys = KEYS[framework]
    values = {"reward": reward, "entropy": entropy, "kl": kl, "clip_fraction": clipfrac, "truncation_ratio": truncation,
              "response_length": length, "response_length_max": longest, "grad_norm": grad, "loss": loss,
              "logprob_diff": lpdiff, "throughput": thr, "step_time": step_time, "staleness": staleness}
    out: dict[str, tuple[list[int], list[float]]] = {}
    for concept, arr in values.items():
        if concept in keys:
            out[keys[concept]] = (t.tolist(), [float(v) for v in arr])
    out[keys["val_score"]] = (val_steps.tolist(), [float(v) for v in val])
    return out, on


def rows(series: dict[str, tuple[list[int], list[float]]]) -> list[tuple[int, dict[str, float]]]:
    """Per step, the metrics logged at it (what a logger's ``log(data, step)`` gets)."""
    by_step: dict[int, dict[str, float]] = {}
    for key, (steps, values) in series.items():
        for s, v in zip(steps, values):
            by_step.setdefault(s, {})[key] = v
    return sorted(by_step.items())


def write_jsonl(path: Path, series: dict[str, tuple[list[int], list[float]]], *, t0: float | None = None) -> Path:
    with open(path, "w") as fh:
        for step, data in rows(series):
            row: dict[str, Any] = {"step": step, **{k: (v if math.isfinite(v) else None) for k, v in data.items()}}
            if t0 is not None:
                row["_timestamp"] = t0 + 30 * step
            fh.write(json.dumps(row) + "\n")
    return path


def write_tensorboard(logdir: Path, series: dict[str, tuple[list[int], list[float]]]) -> Path:
    """Through torch.utils.tensorboard's SummaryWriter: the writer verl's and AReaL's trackers use."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(logdir))
    for step, data in rows(series):
        for key, v in data.items():
            writer.add_scalar(key, v, step)
    writer.close()
    return logdir


_WANDB_SCRIPT = r"""
import json, os, sys
import wandb
jobs = json.load(open(sys.argv[1]))
for job in jobs:
    os.chdir(job["dir"])
    run = wandb.init(project="rlmedic-test", name=job["name"], config=job["config"], dir=job["dir"],
                     settings=wandb.Settings(mode="offline", console="off", x_disable_stats=True,
                                             x_disable_machine_info=True, disable_git=True, disable_code=True))
    for step, data in job["rows"]:
        run.log({**{k: (float("nan") if v is None else v) for k, v in data.items()}, **job.get("extra", {})}, step=step)
    if job["crash"]:
        import time
        time.sleep(2)  # what was sent reaches the log (a real preemption may lose the last records too)
        sys.stdout.flush()
        os._exit(0)  # the process dies: no finish(), no exit record
    run.finish(exit_code=job.get("exit_code", 0))
"""


def write_wandb(jobs: list[dict[str, Any]], workdir: Path, timeout: float = 300) -> list[Path]:
    """Runs through the real wandb SDK in offline mode, in a child process (``crash``: it dies mid-run,
    as a preempted spot instance does, and the last job only); the run folders they wrote."""
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true",
               WANDB_DISABLE_CODE="true", WANDB_CONSOLE="off", WANDB_ERROR_REPORTING="false",
               WANDB_DIR=str(workdir), WANDB_CONFIG_DIR=str(workdir / ".config"),
               WANDB_CACHE_DIR=str(workdir / ".cache"), WANDB_DATA_DIR=str(workdir / ".data"))
    spec = []
    for job in jobs:
        d = Path(job["dir"])
        d.mkdir(parents=True, exist_ok=True)
        spec.append({"dir": str(d), "name": job["name"], "config": job.get("config", {}), "crash": job.get("crash", False),
                     "exit_code": job.get("exit_code", 0), "extra": job.get("extra", {}),
                     "rows": [(s, {k: (v if math.isfinite(v) else None) for k, v in data.items()})
                              for s, data in rows(job["series"])]})
    jobs_file = workdir / "jobs.json"
    jobs_file.write_text(json.dumps(spec))
    script = workdir / "write_runs.py"
    script.write_text(_WANDB_SCRIPT)
    subprocess.run([sys.executable, str(script), str(jobs_file)], env=env, check=True, timeout=timeout,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out = []
    for job in spec:
        runs = sorted((Path(job["dir"]) / "wandb").glob("offline-run-*"))
        out.append(runs[-1])
    return out
