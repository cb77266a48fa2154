"""The run-health detectors on held-out runs: recall, first-step accuracy and false alarms.

Held out from the tests: seeds from 10,000 up (the tests use 0-40), run lengths of 120-2,000
steps, onsets anywhere in 30-85% of the run, noise 0.5-2.5x the tests' level, under verl's,
slime's and AReaL's keys. For each pathology: how often its rule fires, how often at the
onset step exactly (validation is logged every 10 steps and its peak is a 3-point mean: within
two evaluations, 20 steps, counts), and how often it
is the root of the diagnosis. Healthy runs give the false-alarm rate (any finding, and any
serious one).

    python benchmarks/runs_detectors.py [--runs 40]
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from runs_data import LOGGED_BY, PATHOLOGIES, curves  # noqa: E402

from rlmedic.tools.runs.curves import Run, make_curve  # noqa: E402
from rlmedic.tools.runs.detectors import detect  # noqa: E402
from rlmedic.tools.runs.vocabulary import builtin_vocabulary  # noqa: E402
from rlmedic.types import severity_rank  # noqa: E402

FRAMEWORKS = ("verl", "slime", "areal")


def held_out(pathology: str, i: int) -> tuple[Run, int]:
    rng = np.random.default_rng(10_000 + i * 7919 + zlib.crc32(pathology.encode()) % 1000)
    steps = int(rng.integers(120, 2001))
    onset = int(steps * rng.uniform(0.3, 0.85))
    noise = float(rng.uniform(0.5, 2.5))
    logged = LOGGED_BY.get(pathology, FRAMEWORKS)  # slime logs no staleness
    fw = logged[i % len(logged)]
    series, onset = curves(pathology, fw, steps=steps, seed=10_000 + i, onset=onset if pathology != "healthy" else None,
                           noise=noise)
    run = Run(path=f"{pathology}-{i}", source="jsonl", name=f"{pathology}-{i}")
    run.curves = {k: make_curve(k, s, v) for k, (s, v) in series.items()}
    run.framework = builtin_vocabulary().framework_of(list(run.curves))
    return run, onset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40, help="held-out runs per pathology (and healthy)")
    args = ap.parse_args()
    vocab = builtin_vocabulary()
    started = time.perf_counter()
    print(f"{'pathology':<24}{'found':>8}{'at onset':>10}{'root':>8}   (of {args.runs} held-out runs each)")
    total = Counter()
    for pathology, rule in PATHOLOGIES.items():
        found = exact = root = 0
        for i in range(args.runs):
            run, onset = held_out(pathology, i)
            dets, _ = detect(run, vocab)
            hits = [d for d in dets if d.id == rule]
            if not hits:
                continue
            found += 1
            tol = 20 if rule == "reward-val-divergence" else 0  # two evaluations (every 10 steps)
            exact += abs(hits[0].step - onset) <= tol
            serious = [d for d in dets if severity_rank(d.rule["severity"]) <= severity_rank("error")]
            first = min(serious or dets, key=lambda d: (d.step, severity_rank(d.rule["severity"])))
            root += first.id == rule
        total.update(found=found, exact=exact, root=root, n=args.runs)
        print(f"{pathology:<24}{found / args.runs:>8.0%}{exact / args.runs:>10.0%}{root / args.runs:>8.0%}")
    alarms, any_alarm, serious_alarms = Counter(), 0, 0
    for i in range(args.runs * 3):
        run, _ = held_out("healthy", i)
        dets, _ = detect(run, vocab)
        for d in dets:
            alarms[d.id] += 1
        any_alarm += bool(dets)
        serious_alarms += any(severity_rank(d.rule["severity"]) <= severity_rank("error") for d in dets)
    n = total["n"]
    print(f"{'all pathologies':<24}{total['found'] / n:>8.0%}{total['exact'] / n:>10.0%}{total['root'] / n:>8.0%}")
    healthy = args.runs * 3
    print(f"healthy runs: {healthy}; with any finding {any_alarm / healthy:.1%} ({dict(alarms) or 'none'}); "
          f"with a serious one {serious_alarms / healthy:.1%}")
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
