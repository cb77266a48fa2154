"""CPU and memory of ``rlmedic watch``: idle on large rank logs, and busy while they grow.

Prints, for a few intervals, the share of one core the watch process used while the
logs were idle and while every rank log gained lines, and its resident memory.
Run: ``.venv/bin/python benchmarks/watch.py [--ranks 8] [--seconds 30]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def step_lines(first: int, count: int) -> str:
    return "".join(
        f"[2025-11-22 10:00:00] train.py:100 - rollout {i}: {{'rollout/raw_reward': 0.5}}\n"
        f"[2025-11-22 10:00:00] train.py:101 - step {i}: {{'train/loss': 0.1, 'train/grad_norm': 0.2}}\n"
        + "INFO some worker chatter that is neither an error nor a metric, padded to look real........\n" * 8
        for i in range(first, first + count)
    )


def cpu_share(proc: psutil.Process, seconds: float, during: object = None) -> float:
    before, start = proc.cpu_times(), time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        if callable(during):
            during()
        time.sleep(0.1)
    after = proc.cpu_times()
    return (after.user + after.system - before.user - before.system) / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--intervals", default="10,1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        for r in range(args.ranks):
            (logs / f"rank{r}.log").write_text(step_lines(1, 2000))
        size = sum(p.stat().st_size for p in logs.iterdir())
        print(f"{args.ranks} rank logs, {size / 2**20:.0f} MiB in all")
        env = {**os.environ, "RLMEDIC_HOME": str(Path(tmp) / "home")}
        env.pop("SLACK_BOT_TOKEN", None)
        for interval in [float(x) for x in args.intervals.split(",")]:
            proc = subprocess.Popen([sys.executable, "-m", "rlmedic", "watch", str(logs), "--interval", str(interval),
                                     "--stall-minutes", "0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ps = psutil.Process(proc.pid)
            time.sleep(max(8.0, interval + 3))  # imports and the first look at what is there
            idle = cpu_share(ps, args.seconds)
            step = [3000]

            def grow() -> None:  # ~10 steps (100 lines) per rank per second
                for r in range(args.ranks):
                    with open(logs / f"rank{r}.log", "a") as fh:
                        fh.write(step_lines(step[0], 1))
                step[0] += 1

            busy = cpu_share(ps, args.seconds, grow)
            rss = ps.memory_info().rss / 2**20
            proc.terminate()
            proc.wait(timeout=30)
            print(f"--interval {interval:g}: idle {idle:.2%} of a core, busy (every rank growing) {busy:.2%}, "
                  f"RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
