"""Realistic mixed training logs for the scan benchmark and the scan equivalence test.

Run: ``python benchmarks/mixedlogs.py OUT_DIR [--mb 16] [--seed 1] [--shapes areal-mixed,...]``

Each shape is a log as a real run writes it, its lines taken from the fixtures in
``tests/fixtures/logs`` (AReaL with Ray actor prefixes, SGLang's scheduler, uvicorn's access
log, tqdm bars, slime and verl metric dicts), the values drawn from a seeded generator so
that two seeds give two different logs of the same shape:

* ``areal-mixed``: Ray-prefixed ``StatsLogger`` tables (one per step, the rows prefixed too),
  rollout-worker throughput lines, SGLang ``Decode batch`` / ``Prefill batch`` lines, HTTP
  access lines and tqdm bars;
* ``areal-dense``: the same with a stats table every ~40 lines (metrics at every short step);
* ``slime``: ``rollout N: {...}`` / ``step N: {...}`` dicts among SGLang lines and tqdm bars;
* ``verl``: ``step:N - actor/pg_loss:... - ...`` lines of 23 pairs among SGLang lines and tqdm bars;
* ``sparse``: a stats table every ~1500 lines of noise that names no metric;
* ``kv``: nothing but ``step=N loss=... reward=...`` lines, few distinct values (issue 31's 64 MiB gzip: about 4 MB).

Every shape but ``kv`` ends with the run dying of a CUDA OOM on one rank (a traceback through
``ppo_update``/``train_step``), then NCCL watchdog timeouts on the others: the root cause a
diagnosis must name is ``cuda-oom``. ``kv`` hides one ``loss=nan`` late in the file.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

SHAPES = ("areal-mixed", "areal-dense", "slime", "verl", "sparse", "kv")
#: The root a diagnosis must name on each shape.
EXPECTED_ROOT = {shape: "cuda-oom" for shape in SHAPES} | {"kv": None}

_AREAL_KEYS = (
    "grpo_actor/task_reward/avg", "grpo_actor/task_reward/max", "grpo_actor/task_reward/min",
    "grpo_actor/update/actor_loss/avg", "grpo_actor/update/grad_norm", "grpo_actor/update/entropy/avg",
    "grpo_actor/update/importance_weight/avg", "grpo_actor/update/clip_ratio/avg", "grpo_actor/no_eos_ratios/avg",
    "grpo_actor/seq_len/avg", "grpo_actor/prompt_len/avg", "grpo_actor/advantages/avg", "timeperf/rollout",
    "timeperf/train_step", "timeperf/update_weights", "grpo_actor/update/lr",
)
_TRAIN = "(TrainWorker pid={pid}, ip=10.0.0.5)"
_ROLLOUT = "(RolloutWorker pid={pid}, ip=10.0.0.{ip})"


class _Clock:
    """Wall time of the run, advanced a little per line (timestamps in AReaL's and SGLang's formats)."""

    def __init__(self) -> None:
        self.s = 10 * 3600

    def tick(self, rng: random.Random) -> None:
        self.s += rng.random() < 0.05

    def sglang(self) -> str:
        return f"2025-11-22 {self.s // 3600 % 24:02d}:{self.s // 60 % 60:02d}:{self.s % 60:02d}"

    def areal(self, rng: random.Random) -> str:
        return f"20251122-{self.s // 3600 % 24:02d}:{self.s // 60 % 60:02d}:{self.s % 60:02d}.{rng.randrange(1000):03d}"


def _decode(rng: random.Random, clock: _Clock, prefix: str) -> str:
    return (f"{prefix} [{clock.sglang()} TP{rng.randrange(4)}] Decode batch. #running-req: {rng.randrange(1, 256)}, "
            f"#token: {rng.randrange(1000, 90000)}, token usage: {rng.random():.2f}, cuda graph: True, "
            f"gen throughput (token/s): {rng.uniform(500, 9000):.2f}, #queue-req: {rng.randrange(0, 4)}")


def _prefill(rng: random.Random, clock: _Clock, prefix: str) -> str:
    return (f"{prefix} [{clock.sglang()} TP{rng.randrange(4)}] Prefill batch. #new-seq: {rng.randrange(1, 64)}, "
            f"#new-token: {rng.randrange(100, 16000)}, #cached-token: {rng.randrange(0, 9000)}, token usage: "
            f"{rng.random():.2f}, #running-req: {rng.randrange(0, 200)}, #queue-req: {rng.randrange(0, 10)}")


def _http(rng: random.Random, clock: _Clock, prefix: str) -> str:
    return (f'{prefix} [{clock.sglang()}] INFO:     10.0.0.{rng.randrange(2, 9)}:{rng.randrange(30000, 60000)} - '
            f'"POST /generate HTTP/1.1" 200 OK')


def _tqdm(rng: random.Random, _clock: _Clock, prefix: str) -> str:
    done = rng.randrange(0, 17)
    bar = "█" * (done * 10 // 16)
    return f"{prefix} actor_train: {done * 100 // 16:3d}%|{bar:<10}| {done}/16 [00:{done:02d}<00:{16 - done:02d},  1.{rng.randrange(10, 99)}s/it]"


def _throughput(rng: random.Random, clock: _Clock, prefix: str) -> str:
    """The rollout worker's periodic summary: it names the reward, so every one is a metric line."""
    return (f"{prefix} [AReaL] {clock.areal(rng)} WorkflowExecutor INFO: rollout throughput: "
            f"{rng.uniform(800, 9000):.1f} tokens/s, {rng.randrange(64, 1024)} samples accepted, "
            f"avg reward={rng.random():.4f}, avg seq_len={rng.randrange(200, 4000)}, staleness={rng.randrange(0, 4)}")


def _submitted(rng: random.Random, clock: _Clock, prefix: str) -> str:
    return (f"{prefix} [AReaL] {clock.areal(rng)} RemoteSGLangEngine INFO: Rollout submitted {rng.randrange(1, 512)} "
            f"requests, {rng.randrange(0, 64)} running, version {rng.randrange(0, 300)}")


def _microbatch(rng: random.Random, clock: _Clock, prefix: str) -> str:
    rank = rng.randrange(8)
    return (f"{prefix} [AReaL] {clock.areal(rng)} [FSDPEngine Rank {rank}] INFO: Microbatch #tokens (rank {rank}): "
            f"[{rng.randrange(4000, 8192)}, {rng.randrange(4000, 8192)}], padded to: [8192, 8192]")


def _stats_table(rng: random.Random, clock: _Clock, prefix: str, step: int, total: int) -> list[str]:
    """AReaL's StatsLogger: the step line, then a two-column grid, every row carrying the Ray prefix."""
    values = {k: rng.uniform(-0.05, 0.05) if "loss" in k or "advantages" in k else rng.uniform(0.0, 1.0) for k in _AREAL_KEYS}
    values["grpo_actor/task_reward/avg"] = min(0.9, 0.1 + step * 0.002) + rng.uniform(-0.05, 0.05)
    values["grpo_actor/update/grad_norm"] = rng.uniform(0.05, 0.4)
    items = list(values.items())
    rows, width = (len(items) + 1) // 2, 40
    stamp = f"{prefix} [AReaL] {clock.areal(rng)} StatsLogger INFO: "
    out = [stamp + f"Epoch 1/5 Step {step}/{total} Train step {step}/{total} done.", stamp + "Stats (1/1):",
           f"{prefix} ╒" + "═" * width + "╤" + "═" * 13 + "╤" + "═" * width + "╤" + "═" * 13 + "╕"]
    for r in range(rows):
        cells = [f" {k:<{width - 2}} │ {v:11.4e} " for k, v in (items[r], items[r + rows])]
        out.append(f"{prefix} │" + "│".join(cells) + "│")
    out.append(f"{prefix} ╘" + "═" * width + "╧" + "═" * 13 + "╧" + "═" * width + "╧" + "═" * 13 + "╛")
    return out


def _slime_rollout(rng: random.Random, clock: _Clock, prefix: str, step: int) -> str:
    return (f"{prefix} [{clock.sglang()}] rollout.py:301 - rollout {step}: {{'rollout/response_len/mean': "
            f"{rng.uniform(200, 900):.1f}, 'rollout/raw_reward': {rng.random():.4f}, 'rollout/truncated': "
            f"{rng.random() / 20:.3f}, 'perf/rollout_time': {rng.uniform(20, 60):.2f}}}")


def _slime_step(rng: random.Random, clock: _Clock, prefix: str, step: int) -> str:
    return (f"{prefix} [{clock.sglang()}] model.py:512 - step {step}: {{'train/loss': {rng.uniform(-0.05, 0.05):.6f}, "
            f"'train/pg_loss': {rng.uniform(-0.05, 0.05):.6f}, 'train/entropy_loss': {rng.uniform(0.2, 0.6):.6f}, "
            f"'train/pg_clipfrac': {rng.random() / 100:.6f}, 'train/ppo_kl': {rng.random() / 1000:.3e}, "
            f"'train/grad_norm': {rng.uniform(0.05, 0.5):.6f}, 'train/lr-pg_0': 1e-06}}")


def _verl_step(rng: random.Random, _clock: _Clock, prefix: str, step: int) -> str:
    keys = ("actor/pg_loss", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "actor/lr",
            "critic/score/mean", "critic/score/max", "critic/score/min", "critic/rewards/mean", "critic/rewards/max",
            "critic/advantages/mean", "critic/returns/mean", "response_length/mean", "response_length/max",
            "response_length/clip_ratio", "prompt_length/mean", "timing_s/gen", "timing_s/update_actor",
            "timing_s/step", "perf/throughput", "perf/total_num_tokens", "perf/max_memory_allocated_gb")
    pairs = " - ".join(f"{k}:{rng.uniform(-1, 1) if 'loss' in k else rng.uniform(0, 900):.6f}" for k in keys)
    return f"{prefix} step:{step} - {pairs}"


_FAILURE = """\
{p} [AReaL] {t} [FSDPEngine Rank 3] INFO: ppo_update step {step} starting
{p} Traceback (most recent call last):
{p}   File "/usr/local/lib/python3.11/site-packages/areal/engine/ppo/actor.py", line 312, in ppo_update
{p}     loss.backward()
{p}   File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward
{p}     torch.autograd.backward(
{p} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 3 has a total capacity of 79.11 GiB of which 1.02 GiB is free. Process 48213 has 78.07 GiB memory in use. Of the allocated memory 71.20 GiB is allocated by PyTorch, and 5.31 GiB is reserved by PyTorch but unallocated.
"""
_CASCADE = (
    "(TrainWorker pid={pid}, ip=10.0.0.5) [rank{rank}]:[E1122 {clock}.123456 ProcessGroupNCCL.cpp:616] [Rank {rank}] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600021 milliseconds before timing out."
)

Noise = Callable[[random.Random, _Clock, str], str]
#: (line maker, weight, whose prefix) of the healthy noise of the AReaL shapes
_AREAL_NOISE: tuple[tuple[Noise, float, str], ...] = (
    (_decode, 0.45, _ROLLOUT), (_prefill, 0.08, _ROLLOUT), (_http, 0.2, _ROLLOUT), (_tqdm, 0.07, _TRAIN),
    (_throughput, 0.08, _ROLLOUT), (_submitted, 0.07, _ROLLOUT), (_microbatch, 0.05, _TRAIN),
)
#: The sparse shape's noise names no metric (no throughput summaries).
_SPARSE_NOISE = tuple(n for n in _AREAL_NOISE if n[0] is not _throughput)
#: slime and verl runs: SGLang's lines and tqdm bars, none of AReaL's own.
_SGLANG_NOISE = tuple(n for n in _AREAL_NOISE if n[0] in (_decode, _prefill, _http, _tqdm))


def _noise(rng: random.Random, clock: _Clock, mix: tuple[tuple[Noise, float, str], ...]) -> str:
    make, _w, who = rng.choices(mix, weights=[w for _m, w, _p in mix])[0]
    clock.tick(rng)
    pid = rng.choice((2101, 2102, 2103)) if who is _ROLLOUT else rng.choice((3101, 3102))
    return make(rng, clock, who.format(pid=pid, ip=rng.randrange(2, 6)))


def _lines(shape: str, rng: random.Random, size: int) -> Iterator[str]:
    """The shape's healthy lines, about ``size`` bytes of them, then its ending."""
    clock = _Clock()
    train = _TRAIN.format(pid=3101)
    per_step = {"areal-mixed": 400, "areal-dense": 40, "sparse": 1500, "slime": 300, "verl": 300}.get(shape, 1)
    total = max(3, size // (per_step * 170))
    written, step = 0, 0
    if shape == "kv":
        nan_at = int(size / 60 * 0.9)
        while written < size:
            step += 1
            # a few distinct values, as a run whose metrics are printed rounded: 64 MiB gzip to about 3 MB
            loss = "nan" if step == nan_at else rng.choice(("0.5", "0.51", "0.49", "0.52", "0.48"))
            line = f"step={step} loss={loss} reward={rng.choice(('0.25', '0.5', '0.75'))} grad_norm=1.0 lr=1e-06"
            written += len(line) + 1
            yield line
        return
    mix = {"sparse": _SPARSE_NOISE, "slime": _SGLANG_NOISE, "verl": _SGLANG_NOISE}.get(shape, _AREAL_NOISE)
    while written < size:
        step += 1
        block = [_noise(rng, clock, mix) for _ in range(per_step)]
        if shape in ("areal-mixed", "areal-dense", "sparse"):
            block += _stats_table(rng, clock, train, step, total)
        elif shape == "slime":
            manager = "(RolloutManager pid=1890)"
            block.insert(rng.randrange(len(block)), _slime_rollout(rng, clock, manager, step))
            block.append(_slime_step(rng, clock, "(MegatronTrainRayActor pid=2345)", step))
        elif shape == "verl":
            block.append(_verl_step(rng, clock, "(TaskRunner pid=1024)", step))
        for line in block:
            written += len(line.encode()) + 1
            yield line
    clock.s += 30
    yield _FAILURE.format(p=_TRAIN.format(pid=48213), t=clock.areal(rng), step=step + 1).rstrip("\n")
    hms = clock.sglang().split(" ")[1]
    for rank in (0, 1, 2, 4, 5, 6, 7):
        yield _CASCADE.format(pid=48200 + rank, rank=rank, clock=hms)


def write(path: str | os.PathLike[str], shape: str, size_bytes: int, seed: int = 1) -> Path:
    """Write about ``size_bytes`` of a ``shape`` log to ``path`` (gzipped when it ends in ``.gz``)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; one of {', '.join(SHAPES)}")
    path = Path(path)
    rng = random.Random(f"{shape}:{seed}")
    opener = (lambda: gzip.open(path, "wt", encoding="utf-8", compresslevel=6)) if path.suffix == ".gz" else (
        lambda: open(path, "w", encoding="utf-8"))
    with opener() as fh:
        batch: list[str] = []
        for line in _lines(shape, rng, size_bytes):
            batch.append(line)
            if len(batch) >= 4096:
                fh.write("\n".join(batch) + "\n")
                batch.clear()
        if batch:
            fh.write("\n".join(batch) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="folder to write the logs into")
    ap.add_argument("--mb", type=float, default=16, help="MiB of log per shape")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--gzip", action="store_true", help="write .log.gz files")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for shape in args.shapes.split(","):
        path = write(Path(args.out) / f"{shape}-s{args.seed}.log{'.gz' if args.gzip else ''}", shape,
                     int(args.mb * (1 << 20)), args.seed)
        print(path, path.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
