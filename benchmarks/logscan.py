"""Benchmark: rlmedic's log scan vs ``grep -E -c`` (same patterns) vs ``cat`` (the disk limit).

Run: ``python benchmarks/logscan.py [--size-mb 1024] [--dir /tmp] [--keep]``

It writes a realistic synthetic log (healthy AReaL/SGLang noise - decode lines, HTTP access
lines, tqdm bars, per-step stats tables - with a CUDA OOM and NCCL cascades at the end),
then measures in one run: ``cat > /dev/null``, ``grep -E -c -f <catalog patterns>``, rlmedic's
full diagnosis (scan + metrics + findings) with its peak RSS, and a cold
``rlmedic diagnose --json`` on a 10 MB log. Targets: throughput >= grep, peak RSS < 150 MB,
cold diagnose on 10 MB < 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import random
import tempfile
import time
from pathlib import Path

_STATS_KEYS = (
    "grpo_actor/task_reward/avg",
    "grpo_actor/task_reward/max",
    "grpo_actor/task_reward/min",
    "grpo_actor/update/actor_loss/avg",
    "grpo_actor/update/grad_norm",
    "grpo_actor/update/entropy/avg",
    "grpo_actor/update/importance_weight/avg",
    "grpo_actor/update/clip_ratio/avg",
    "grpo_actor/no_eos_ratios/avg",
    "grpo_actor/seq_len/avg",
    "timeperf/rollout",
    "timeperf/train_step",
)


def _noise_pool(rng: random.Random, size: int = 4000) -> list[str]:
    """Healthy lines without timestamps; a timestamp prefix is added when written."""
    pool = []
    for _ in range(size):
        kind = rng.random()
        tp = rng.randrange(8)
        if kind < 0.55:
            pool.append(
                f"[TP{tp}] Decode batch. #running-req: {rng.randrange(1, 256)}, #token: {rng.randrange(1000, 90000)}, "
                f"token usage: {rng.random():.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(500, 9000):.2f}, "
                f"#queue-req: {rng.randrange(0, 4)}"
            )
        elif kind < 0.70:
            pool.append(
                f"[TP{tp}] Prefill batch. #new-seq: {rng.randrange(1, 64)}, #new-token: {rng.randrange(100, 16000)}, "
                f"#cached-token: {rng.randrange(0, 9000)}, token usage: {rng.random():.2f}, #running-req: {rng.randrange(0, 200)}, "
                f"#queue-req: {rng.randrange(0, 10)}"
            )
        elif kind < 0.85:
            pool.append(f'INFO:     10.0.0.{rng.randrange(2, 9)}:{rng.randrange(30000, 60000)} - "POST /generate HTTP/1.1" 200 OK')
        elif kind < 0.92:
            pid = rng.randrange(1000, 99999)
            pool.append(
                f"(RolloutWorker pid={pid}) [AReaL] RemoteSGLangEngine INFO: Rollout submitted {rng.randrange(1, 512)} "
                f"requests, {rng.randrange(0, 64)} running, version {rng.randrange(0, 300)}"
            )
        elif kind < 0.97:
            done = rng.randrange(0, 64)
            pool.append(
                f"actor_train:  {done * 100 // 64:3d}%|{'#' * (done // 7):<10}| {done}/64 [00:{done:02d}<00:{64 - done:02d},  1.{rng.randrange(10, 99)}s/it]"
            )
        else:
            rank = rng.randrange(8)
            pool.append(
                f"(TrainWorker pid={rng.randrange(1000, 99999)}) [AReaL] [FSDPEngine Rank {rank}] INFO: Microbatch #tokens "
                f"(rank {rank}): [{rng.randrange(4000, 8192)}, {rng.randrange(4000, 8192)}], padded to: [8192, 8192]"
            )
    return pool


def _stats_table(rng: random.Random, step: int, total: int, reward: float) -> list[str]:
    values = {
        "grpo_actor/task_reward/avg": reward,
        "grpo_actor/task_reward/max": 1.0,
        "grpo_actor/task_reward/min": 0.0,
        "grpo_actor/update/actor_loss/avg": rng.uniform(-0.05, 0.05),
        "grpo_actor/update/grad_norm": rng.uniform(0.05, 0.4),
        "grpo_actor/update/entropy/avg": rng.uniform(0.3, 0.6),
        "grpo_actor/update/importance_weight/avg": rng.uniform(0.98, 1.02),
        "grpo_actor/update/clip_ratio/avg": rng.uniform(0.0, 0.01),
        "grpo_actor/no_eos_ratios/avg": rng.uniform(0.0, 0.05),
        "grpo_actor/seq_len/avg": rng.uniform(200, 900),
        "timeperf/rollout": rng.uniform(20, 60),
        "timeperf/train_step": rng.uniform(10, 30),
    }
    items = list(values.items())
    rows = (len(items) + 1) // 2
    width = 40
    lines = [
        f"Epoch 1/5 Step {step}/{total} Train step {step}/{total} done.",
        "Stats (1/1):",
        "╒" + "═" * width + "╤" + "═" * 13 + "╤" + "═" * width + "╤" + "═" * 13 + "╕",
    ]
    for r in range(rows):
        cells = []
        for c in range(2):
            i = r + c * rows
            if i < len(items):
                k, v = items[i]
                cells.append(f" {k:<{width - 2}} │ {v:11.4e} ")
        lines.append("│" + "│".join(cells) + "│")
    lines.append("╘" + "═" * width + "╧" + "═" * 13 + "╧" + "═" * width + "╧" + "═" * 13 + "╛")
    return lines


_FAILURE = """\
(TrainWorker pid=48213, ip=10.0.0.5) Traceback (most recent call last):
(TrainWorker pid=48213, ip=10.0.0.5)   File "/usr/local/lib/python3.11/site-packages/areal/engine/ppo/actor.py", line 312, in ppo_update
(TrainWorker pid=48213, ip=10.0.0.5)     loss.backward()
(TrainWorker pid=48213, ip=10.0.0.5)   File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward
(TrainWorker pid=48213, ip=10.0.0.5)     torch.autograd.backward(
(TrainWorker pid=48213, ip=10.0.0.5) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 3 has a total capacity of 79.11 GiB of which 1.02 GiB is free. Process 48213 has 78.07 GiB memory in use. Of the allocated memory 71.20 GiB is allocated by PyTorch, and 5.31 GiB is reserved by PyTorch but unallocated.
"""

_CASCADE = (
    "(TrainWorker pid={pid}, ip=10.0.0.5) [rank{rank}]:[E1122 {clock}.123456 ProcessGroupNCCL.cpp:616] [Rank {rank}] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600021 milliseconds before timing out."
)


def write_log(
    path: str | Path, size_bytes: int, *, seed: int = 7, failures: bool = True, lines_per_step: int = 1500
) -> int:
    """Write about ``size_bytes`` of log to ``path``; return the number of steps logged.

    With ``failures`` the run dies of a CUDA OOM on rank 3 during ``ppo_update`` at the end
    of the file, followed by NCCL watchdog timeouts from the other ranks. ``lines_per_step``
    sets the density of stats tables: 1500 is a sparse log; 40 makes about every sixth line
    a stats line (a run that logs metrics at every step of a short rollout).
    """
    rng = random.Random(seed)
    pool = _noise_pool(rng)
    est_step_bytes = lines_per_step * 170
    total_steps = max(3, size_bytes // est_step_bytes)
    written = 0
    step = 0
    second = 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < size_bytes:
            step += 1
            second += 37
            hh, mm, ss = 10 + (second // 3600) % 14, (second // 60) % 60, second % 60
            clock = f"{hh:02d}:{mm:02d}:{ss:02d}"
            prefix = f"[2025-11-22 {clock}] "
            block = [prefix + line for line in rng.choices(pool, k=lines_per_step)]
            reward = min(0.9, 0.1 + step * 0.002) + rng.uniform(-0.05, 0.05)
            stamp = f"[AReaL] 20251122-{clock}.{rng.randrange(1000):03d} StatsLogger INFO: "
            table = _stats_table(rng, step, total_steps, reward)
            block.append(stamp + table[0])
            block.append(stamp + table[1])
            block.extend(table[2:])
            text = "\n".join(block) + "\n"
            fh.write(text)
            written += len(text.encode("utf-8"))
        if failures:
            # the run dies here: an OOM on one rank, NCCL timeouts on the others (a
            # failure followed by more training steps would be one the run got past)
            fh.write(f"[AReaL] 20251122-{clock}.500 [FSDPEngine Rank 3] INFO: ppo_update step {step + 1} starting\n")
            fh.write(_FAILURE)
            for rank in (0, 1, 2, 4, 5, 6, 7):
                fh.write(_CASCADE.format(pid=48200 + rank, rank=rank, clock=clock) + "\n")
    return step


# ------------------------------------------------------------------ grep patterns -


def ere_patterns() -> list[str]:
    """The catalog's regexes (and metric keywords) rewritten for ``grep -E``.

    Python-only syntax is translated (``(?:`` groups, ``\d``/``\s``/``\w`` classes,
    ``[^\n]``); a pattern with lookarounds is replaced by its prefilter literals, and
    ``(?i)`` patterns are searched case-sensitively (a small advantage to grep).
    """
    from rlmedic.tools.logs.signatures import builtin_catalog

    catalog = builtin_catalog()
    out: list[str] = []
    for sig in catalog.signatures:
        for p in sig.patterns:
            rx = p.pattern.replace("(?i)", "")
            if "(?=" in rx or "(?!" in rx or "(?<" in rx:
                out += [re.escape(lit.text) for lit in sig.literals]
                continue
            rx = rx.replace("(?:", "(").replace(r"[^\n]", ".").replace(r"\d", "[0-9]")
            rx = rx.replace(r"\s", "[[:space:]]").replace(r"\S", "[^[:space:]]").replace(r"\w", "[[:alnum:]_]")
            out.append(rx)
    out += [re.escape(lit.text) for lit in catalog.metric_literals]
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------ measurements --

_RLMEDIC_RUN = """
import json, resource, sys, time
from rlmedic.confine import Confinement
from rlmedic.tools.logs.diagnose import diagnose
t = time.perf_counter()
d = diagnose([sys.argv[1]], engine=sys.argv[2], confinement=Confinement.for_paths([sys.argv[1]]))
dt = time.perf_counter() - t
root = d.root_finding
print(json.dumps({"seconds": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "engine": d.stats["engine"], "root": root.id if root else None,
                  "root_at": f"{root.file}:{root.line}" if root else None, "findings": len(d.findings)}))
"""


def _timed(cmd: list[str], **kw: object) -> tuple[float, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - t, proc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--dir", default=None, help="where to write the logs (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="reuse/keep the generated logs")
    ap.add_argument("--engine", default="auto", help="auto | hyperscan | python")
    args = ap.parse_args(argv)

    workdir = args.dir or tempfile.mkdtemp(prefix="rlmedic-bench-")
    os.makedirs(workdir, exist_ok=True)
    big = os.path.join(workdir, f"bench-{args.size_mb}mb.log")
    small = os.path.join(workdir, "bench-10mb.log")
    for path, size in ((big, args.size_mb << 20), (small, 10 << 20)):
        if not (args.keep and os.path.exists(path)):
            t = time.perf_counter()
            write_log(path, size)
            print(f"generated {path} ({os.path.getsize(path) / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s")
    size = os.path.getsize(big)
    pattern_file = os.path.join(workdir, "patterns.ere")
    pats = ere_patterns()
    with open(pattern_file, "w") as fh:
        fh.write("\n".join(pats) + "\n")

    subprocess.run(["cat", big], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for everyone
    with open(os.devnull, "wb") as null:
        t = time.perf_counter()
        subprocess.run(["cat", big], stdout=null, check=True)
        cat_s = time.perf_counter() - t
    grep_s, grep = _timed(["grep", "-E", "-c", "-f", pattern_file, big])
    rl_s, rl = _timed([sys.executable, "-c", _RLMEDIC_RUN, big, args.engine])
    if rl.returncode != 0:
        print(rl.stderr, file=sys.stderr)
        return 1
    res = json.loads(rl.stdout)
    exe = shutil.which("rlmedic") or os.path.join(os.path.dirname(sys.executable), "rlmedic")
    colds = []
    for _ in range(3):
        cold_s, cold = _timed([exe, "diagnose", small, "--json"])
        if cold.returncode != 0:
            print(cold.stderr, file=sys.stderr)
            return 1
        colds.append(cold_s)
    cold_s = sorted(colds)[1]

    mb = size / 1e6
    scan_tput = mb / res["seconds"]
    grep_tput = mb / grep_s
    cat_tput = mb / cat_s
    print()
    print(f"log: {mb:,.0f} MB, {len(pats)} grep -E patterns ({grep.stdout.strip()} matching lines)")
    print(f"cat > /dev/null      {cat_s:7.2f} s  {cat_tput:8.0f} MB/s")
    print(f"grep -E -c           {grep_s:7.2f} s  {grep_tput:8.0f} MB/s")
    print(f"rlmedic ({res['engine']:9s})  {res['seconds']:7.2f} s  {scan_tput:8.0f} MB/s  peak RSS {res['peak_rss_mb']:.0f} MB"
          f"  root={res['root']} at {res['root_at']}")
    print(f"ratio rlmedic/grep   {scan_tput / grep_tput:7.2f}   (target >= 1.0)")
    print(f"ratio rlmedic/cat    {scan_tput / cat_tput:7.2f}")
    print(f"peak RSS             {res['peak_rss_mb']:7.0f} MB (target < 150)")
    print(f"cold `rlmedic diagnose --json` on 10 MB: {cold_s:.2f} s median of 3 (target < 1 s)")
    if not args.keep and not args.dir:
        shutil.rmtree(workdir, ignore_errors=True)
    if res["root"] != "cuda-oom":
        print(f"WRONG ANSWER: the root cause should be cuda-oom, got {res['root']}: the speed figures do not count")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
