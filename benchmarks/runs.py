"""Read and check a 100,000-step run of 50 metrics: a JSONL dump, a TensorBoard event file, a W&B run.

Target: under 2 s each for the read and all the health checks (``diagnose_runs``), measured
here against an anchor run in the same command: the time Python's own readers take just to
get at the numbers (``json.loads`` of every line; the framing of every TensorBoard record;
wandb's ``Record`` parse of every W&B record), and a plain read of the same bytes in a fresh
process (start-up included), printed as ratios, so a loaded machine shows in both.

The runs are written once by the real libraries and cached (``--data``, default under the
temporary folder): the JSONL with ``json``, the event file by tensorboard's ``RecordWriter``
(its pure-Python CRC makes that take minutes), the W&B run by the wandb SDK in offline mode
(about 4 ms a step: minutes too). ``--steps`` makes smaller ones.

    python benchmarks/runs.py [--steps 100000] [--metrics 50] [--only jsonl,tensorboard,wandb] [--before DIR]
                              [--repeat N]

``--before DIR`` (a ``tools/runs`` folder, e.g. ``git archive <commit> tools/runs | tar -x -C /tmp/b``, then
``/tmp/b/tools/runs``) times those readers first in the same command and says whether their findings are
identical; each measure prints wall (start-up included), the child's CPU and its peak RSS. ``--repeat N``
measures each (before and after alternately) N times and prints the least CPU and the range: on a
shared machine one measure moves by a third.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

#: verl's keys for the checked concepts; the rest of the 50 are other actor/critic metrics
BASE_KEYS = ["critic/score/mean", "actor/entropy", "actor/kl_loss", "actor/pg_clipfrac", "response_length/mean",
             "response_length/max", "response_length/clip_ratio", "actor/grad_norm", "actor/pg_loss",
             "training/rollout_probs_diff_mean", "perf/throughput", "timing_s/step"]


def series(steps: int, metrics: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A run whose responses hit the length cap at 70% of its steps (one finding to make)."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, steps + 1, dtype=np.float64)
    on = int(steps * 0.7)
    after = t >= on
    out = {
        "critic/score/mean": np.where(t >= on + 10, 0.0, 0.2 + 0.3 * (1 - np.exp(-t / (steps / 3))) + rng.normal(0, .03, steps)),
        "actor/entropy": 0.9 - 0.2 * t / steps + rng.normal(0, 0.02, steps),
        "actor/kl_loss": 0.002 + 0.01 * t / steps + np.abs(rng.normal(0, 0.001, steps)),
        "actor/pg_clipfrac": 0.01 + np.abs(rng.normal(0, 0.003, steps)),
        "response_length/mean": np.where(after, 1000.0, 300 + 200 * t / steps) + rng.normal(0, 5, steps),
        "response_length/max": np.where(after, 1024.0, 800.0),
        "response_length/clip_ratio": np.where(after, 0.85, 0.02) + np.abs(rng.normal(0, 0.01, steps)),
        "actor/grad_norm": 0.8 + np.abs(rng.normal(0, 0.15, steps)),
        "actor/pg_loss": rng.normal(0, 0.05, steps),
        "training/rollout_probs_diff_mean": 0.01 + np.abs(rng.normal(0, 0.002, steps)),
        "perf/throughput": 1000 + rng.normal(0, 40, steps),
        "timing_s/step": 30 + rng.normal(0, 1.5, steps),
    }
    for i in range(metrics - len(out)):
        out[f"actor/extra_{i}"] = rng.normal(0, 1, steps)
    return out


def build_jsonl(path: Path, data: dict[str, np.ndarray]) -> None:
    keys = list(data)
    cols = [data[k].tolist() for k in keys]
    with open(path, "w") as fh:
        for i in range(len(cols[0])):
            row = {"step": i + 1, "_timestamp": 1.7e9 + 30 * i}
            row.update({k: c[i] for k, c in zip(keys, cols)})
            fh.write(json.dumps(row) + "\n")


def build_tensorboard(folder: Path, data: dict[str, np.ndarray]) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    folder.mkdir(parents=True, exist_ok=True)
    keys = list(data)
    cols = [data[k].tolist() for k in keys]
    with open(folder / "events.out.tfevents.1700000000.bench.1.0", "wb") as fh:
        writer = RecordWriter(fh)
        writer.write(event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString())
        for i in range(len(cols[0])):
            for k, c in zip(keys, cols):
                ev = event_pb2.Event(wall_time=1.7e9 + 30 * i, step=i + 1, summary=summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag=k, simple_value=c[i])]))
                writer.write(ev.SerializeToString())


def build_wandb(folder: Path, data: dict[str, np.ndarray]) -> None:
    from runs_data import write_wandb

    folder.mkdir(parents=True, exist_ok=True)
    steps = len(next(iter(data.values())))
    series_ = {k: (list(range(1, steps + 1)), v.tolist()) for k, v in data.items()}
    write_wandb([{"dir": str(folder / "run"), "name": "bench", "series": series_,
                  "config": {"data": {"max_response_length": 1024}}}], folder, timeout=3 * 3600)


# ------------------------------------------------------------------ anchors --


def anchor_jsonl(path: Path) -> float:
    t = time.perf_counter()
    loads = json.loads
    with open(path, "rb") as fh:
        for line in fh:
            loads(line)
    return time.perf_counter() - t


def anchor_tensorboard(folder: Path) -> float:
    """Framing only: the length of every record, as any reader must walk them."""
    t = time.perf_counter()
    for f in folder.iterdir():
        data = f.read_bytes()
        pos, n, unpack = 0, 0, struct.Struct("<Q").unpack_from
        while pos + 12 <= len(data):
            pos += 16 + unpack(data, pos)[0]
            n += 1
    return time.perf_counter() - t


def anchor_wandb(folder: Path) -> float:
    """What any reader built on wandb's classes does at least: frame every record and parse it into a Record."""
    from rlmedic.tools.runs import wandb as wb

    record = wb._pb().Record()
    t = time.perf_counter()
    for f in folder.rglob("run-*.wandb"):
        for payload in wb.records(f.read_bytes()):
            record.ParseFromString(payload)
    return time.perf_counter() - t


def anchor_read(path: Path) -> float:
    """A plain read of the same bytes in a fresh process (start-up included): the least any reader does."""
    code = ("import time,sys,pathlib;t=time.perf_counter();p=pathlib.Path(sys.argv[1]);"
            "fs=[f for f in p.rglob('*') if f.is_file()] if p.is_dir() else [p];n=sum(len(f.read_bytes()) for f in fs);"
            "print(time.perf_counter()-t)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


NOW = time.time()


def measure(kind: str, path: Path, tree: str = "") -> tuple[float, float, float, str, list[str]]:
    """Wall seconds (the fresh process's start-up and imports included), its CPU seconds and peak RSS (MB),
    the root finding, and every finding's summary. ``tree``: another checkout's ``tools/runs`` folder read
    in place of this one's (``--before``: the readers before a change, timed in the same command)."""
    # peak RSS from /proc (VmHWM: this process's own; getrusage's ru_maxrss keeps the parent's peak across exec);
    # one "now" for both runs: the stopped-run finding names the files' age
    code = ("import time,sys,json,resource;t=time.perf_counter();import rlmedic.tools.runs as R;"
            "R.__path__[:0]=[sys.argv[2]] if sys.argv[2] else [];"
            "from rlmedic.tools.runs.diagnose import diagnose_runs;"
            "d=diagnose_runs([sys.argv[1]],now=float(sys.argv[3]));r=d.root_finding;"
            "u=resource.getrusage(resource.RUSAGE_SELF);"
            "hwm=[int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM')] or [u.ru_maxrss];"
            "print(json.dumps([u.ru_utime+u.ru_stime, hwm[0]/1024, r.summary if r else 'healthy', "
            "sum(x['points'] for x in d.stats['runs']), [f.summary for f in d.findings]]))")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, str(path), tree, str(NOW)], capture_output=True, text=True,
                         check=True).stdout
    wall = time.perf_counter() - t
    cpu, rss, root, points, summaries = json.loads(out.strip().splitlines()[-1])
    return wall, cpu, rss, f"{root} [{points:,} points]", summaries


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--metrics", type=int, default=50)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "rlmedic-bench-runs"))
    ap.add_argument("--only", default="jsonl,tensorboard,wandb")
    ap.add_argument("--before", default="", help="another checkout's tools/runs folder, timed first in the same "
                    "command (e.g. one `git archive <commit> tools/runs | tar -x -C DIR` made)")
    ap.add_argument("--repeat", type=int, default=1, help="measures of each (before and after alternately): the "
                    "least CPU is printed, with the range")
    args = ap.parse_args()
    root = Path(args.data) / f"{args.steps}x{args.metrics}"
    root.mkdir(parents=True, exist_ok=True)
    data = series(args.steps, args.metrics)
    targets = {"jsonl": root / "metrics.jsonl", "tensorboard": root / "tensorboard", "wandb": root / "wandb"}
    builders = {"jsonl": build_jsonl, "tensorboard": build_tensorboard, "wandb": build_wandb}
    anchors = {"jsonl": anchor_jsonl, "tensorboard": anchor_tensorboard, "wandb": anchor_wandb}
    print(f"run of {args.steps:,} steps x {args.metrics} metrics ({args.steps * args.metrics:,} points)")
    for kind in args.only.split(","):
        path = targets[kind]
        done = root / f".{kind}.done"
        if not done.exists():
            t = time.perf_counter()
            builders[kind](path, data)
            done.write_text(str(time.perf_counter() - t))
            print(f"  built {kind} in {time.perf_counter() - t:.0f} s")
        target = path / "run" / "wandb" if kind == "wandb" else path
        size = sum(f.stat().st_size for f in (target.rglob("*") if target.is_dir() else [target]) if f.is_file())
        anchor = anchors[kind](target)
        plain = anchor_read(target)
        befores, afters = [], []
        for _ in range(max(1, args.repeat)):
            if args.before:
                befores.append(measure(kind, target, str(Path(args.before).resolve())))
            afters.append(measure(kind, target))
        before = min(befores, key=lambda m: m[1]) if befores else None
        wall, cpu, rss, root_finding, summaries = min(afters, key=lambda m: m[1])
        spread = {"before": befores, "after": afters} if args.repeat > 1 else {}
        if before:
            same = all(b[4] == summaries for b in befores) and all(a[4] == summaries for a in afters)
            print(f"  {kind:<12} before: wall {before[0]:5.2f} s  CPU {before[1]:5.2f} s  RSS {before[2]:4.0f} MB  "
                  f"findings {'identical' if same else 'DIFFER: ' + repr(before[4])}")
        for name, ms in spread.items():
            if ms:
                print(f"  {kind:<12} {name} CPU of {len(ms)} measures: {min(m[1] for m in ms):.2f}-"
                      f"{max(m[1] for m in ms):.2f} s")
        print(f"  {kind:<12} {size / 1e6:7.1f} MB  read+checked: wall {wall:5.2f} s  CPU {cpu:5.2f} s (target 2 s)  "
              f"RSS {rss:4.0f} MB  anchor {anchor:5.2f} s  ratio {wall / anchor if anchor else math.nan:4.2f}x  "
              f"plain read {plain:5.2f} s  ratio {wall / plain if plain else math.nan:4.1f}x  "
              f"load {os.getloadavg()[0]:.1f}\n"
              f"               root: {root_finding}")


if __name__ == "__main__":
    main()
