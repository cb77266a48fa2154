"""Benchmark: peak RSS and time of ``rlmedic`` on each hostile input of issues 14 and 31.

Run: ``python benchmarks/hostile.py [--dir /tmp] [--only NAME-PART] [--json]``

The inputs and command lines are the cases of ``tests/hostile_cases.py`` (YAML bombs,
FIFOs, deep nesting, huge numbers, odd names, outputs that are inputs, a slime script with
a million line continuations; issue 31's 3,000-level folder, 20,000 empty step folders, bad
team records, logs crafted against a record's or a redaction pattern, a plausible 195 KB RL
log...). Each runs alone, in its own process, one after another; the peak RSS is that
process's own (``VmHWM`` read at exit: ``getrusage`` children maxrss would also count the
parent's pages copied before ``exec``), the time is wall-clock from start to exit and the
CPU time the process's own (user + system), CLI start-up included. The anchor rows run
first: ``rlmedic --help`` (start-up alone) and ``ask --offline`` on a 2-line log (what every
``ask`` row costs anyway); on a loaded machine every wall time grows with them. Goal: issue 14's rows under 200 MB and 5 s, issue 31's under 10 s and 1 GB (each
row says); the commands that load the embedding model (``index`` of a folder with a real
document) are shown against their own allowance. Exits 1 when a row misses its goal or
behaves wrongly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hostile_cases import MAX_SECONDS, Case, build_cases, judge, remove_deep_folder, run_case  # noqa: E402


def _cleaned(cases: list, deep: Path):  # noqa: ANN202 - the cases, then the deep tree taken apart
    try:
        yield from cases
    finally:
        remove_deep_folder(deep)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where to build the inputs (default: a temporary directory)")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        cases, before = build_cases(Path(tmp) / "inputs")
        rows = []
        small = Path(tmp) / "inputs" / "train.log"  # two lines, an out-of-memory error
        # a data dir of the run's own (never the user's), its index seeded once before anything is timed
        os.environ["RLMEDIC_HOME"] = str(Path(tmp) / "home")
        run_case(Case("warm-up", ["ask", "why did it crash?", "--attach", str(small), "--offline"], expect="ok"), Path(tmp))
        for name, argv in (("rlmedic --help (anchor)", ["--help"]),
                           ("ask on a 2-line log (anchor)", ["ask", "why did it crash?", "--attach", str(small), "--offline"])):
            anchor = run_case(Case(name.split(" (")[0].replace(" ", "-"), argv, expect="ok"), Path(tmp))
            rows.append({"case": name, "exit": anchor.rc, "seconds": round(anchor.seconds, 2), "cpu_s": round(anchor.cpu_s, 2),
                         "peak_rss_mb": round(anchor.rss_mb, 1), "goal_rss_mb": 1000.0, "goal_seconds": 10.0,
                         "ok": anchor.rc == 0, "problems": []})
        for case in _cleaned(cases, Path(tmp) / "inputs" / "deep_tree"):
            if args.only not in case.name:
                continue
            outcome = run_case(case, Path(tmp))
            problems = judge(case, outcome, {p: d for p, d in before.items() if p in case.unchanged})
            ok = not problems and outcome.seconds <= case.max_seconds and outcome.rss_mb <= case.max_rss_mb
            rows.append({"case": case.name, "exit": outcome.rc, "seconds": round(outcome.seconds, 2),
                         "cpu_s": round(outcome.cpu_s, 2), "peak_rss_mb": round(outcome.rss_mb, 1), "goal_rss_mb": case.max_rss_mb, "goal_seconds": case.max_seconds, "ok": ok,
                         "problems": problems})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
        print(f"{'case':<38} {'exit':>4} {'seconds':>8} {'CPU s':>6} {'peak MB':>8}  goal")
        for r in rows:
            goal = f"<{r['goal_seconds']:.0f} s, <{r['goal_rss_mb']:.0f} MB"
            mark = "ok" if r["ok"] else "MISSED"
            print(f"{r['case']:<38} {r['exit']!s:>4} {r['seconds']:>8.2f} {r['cpu_s']:>6.2f} {r['peak_rss_mb']:>8.1f}  "
                  f"{goal} {mark}")
            for p in r["problems"]:
                print(f"    {p}")
        worst_t = max((r["seconds"] for r in rows if r["goal_seconds"] <= MAX_SECONDS), default=0)
        worst_m = max((r["peak_rss_mb"] for r in rows if r["goal_rss_mb"] <= 200), default=0)
        print(f"\n{len(rows)} inputs; among the rows with the 5 s / 200 MB goal: slowest {worst_t:.2f} s, "
              f"largest peak RSS {worst_m:.1f} MB")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
