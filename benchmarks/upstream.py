"""Upstream fixes on real history: how often `ask` names the commit that fixed a real traceback, and how fast.

Usage: python benchmarks/upstream.py verl-project/verl=/path/to/verl.git [THUDM/slime=PATH ...]
           [--cases tests/data/upstream_cases.jsonl] [--runs 3]

The mirrors are public clones (bare is fine); a mirror that is absent is skipped with one line
(CI has none: the tests use repositories made with git). In one process it:

- syncs each mirror into a fresh index (wall and CPU seconds, git's own included) and again with
  nothing new; the anchor is ``git log -p -U0`` of the same mirror to /dev/null (the reading
  sync cannot avoid), and each sync is printed as a ratio to it;
- for every case (a real traceback from the fix's PR, and the user's version: the release before
  the fix) matches the traceback against the index and reads the answer lines: **named** = the
  fixing commit is among the matches, **leads** = the answer's first line names it as the fix after
  the user's version; dev and held-out side by side;
- does it twice: with the index as synced, and **blind**: every case commit's own description
  removed from the index (the PR quoted the traceback; a user's failure is rarely quoted so
  exactly), so only its subject, files and functions can match;
- prints the match latency (median and worst per case).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "data" / "upstream_cases.jsonl"


def cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn):
    w, c = time.perf_counter(), cpu()
    out = fn()
    return out, time.perf_counter() - w, cpu() - c


def anchor(path: str) -> tuple[float, float]:
    def run() -> None:
        subprocess.run(["git", "-C", path, "log", "HEAD", "-p", "-U0", "--no-color", "--no-renames", "--format=%H%s%b"],
                       stdout=subprocess.DEVNULL, check=True)
    _, wall, c = timed(run)
    return wall, c


def blind(history, cases: list[dict]) -> None:
    """Remove each case commit's description from the index (subject, files and functions stay)."""
    for case in cases:
        row = history.db.execute("SELECT id, subject, symbols FROM commits WHERE repo=? AND sha=?",
                                 (case["repo"], case["commit"])).fetchone()
        if not row:
            continue
        history.db.execute("UPDATE commits SET body='' WHERE id=?", (row[0],))
        history.db.execute("DELETE FROM commit_words WHERE rowid=?", (row[0],))
        history.db.execute("INSERT INTO commit_words (rowid, subject, body, symbols) VALUES (?,?,?,?)",
                           (row[0], row[1], "", row[2]))
    history.db.commit()


def evaluate(index: Path, cases: list[dict]) -> tuple[dict, list[float], list[dict]]:
    from rlmedic.agent.upstream import upstream_lines
    from rlmedic.tools.upstream import for_traceback
    from rlmedic.types import Evidence

    tally: dict[str, dict[str, int]] = {}
    latencies: list[float] = []
    misses = []
    for case in cases:
        t = tally.setdefault(case["split"], {"cases": 0, "named": 0, "leads": 0})
        t["cases"] += 1
        text = "Traceback (most recent call last):\n" + "\n".join(case["traceback"])
        started = time.perf_counter()
        fixes, _versions, _query = for_traceback(text, index, {case["package"]: case["version"]}, [case["repo"]])
        latencies.append(time.perf_counter() - started)
        shas = [f.commit for f in fixes]
        named = case["commit"] in shas
        lines = upstream_lines([Evidence(subject="logs", upstream_fixes=fixes)], lambda c: 1)
        ref = f"{case['repo']}#{case['pr']}" if case.get("pr") else case["commit"][:10]
        leads = bool(lines) and lines[0].startswith(("Fixed upstream", "Likely fixed")) and f"{ref} " in lines[0]
        t["named"] += named
        t["leads"] += leads
        if not named:
            misses.append({"id": case["id"], "split": case["split"], "frames": case["frames"],
                           "top": shas[0][:10] if shas else ""})
    return tally, latencies, misses


def pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "0/0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors", nargs="*", metavar="OWNER/REPO=PATH")
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from rlmedic.knowledge.history import History, sync_clone

    present = {}
    for spec in args.mirrors:
        repo, _, path = spec.partition("=")
        if not Path(path).exists():
            print(f"skipped {repo}: mirror {path} absent")
            continue
        present[repo] = path
    if not present:
        print("skipped: no mirror present (give OWNER/REPO=PATH of a public clone)")
        return
    cases = [json.loads(line) for line in args.cases.read_text().splitlines() if line.strip()]
    cases = [c for c in cases if c["repo"] in present]
    report: dict = {"sync": {}, "cases": len(cases)}
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp)
        with History(index / "history.sqlite") as history:
            for repo, path in present.items():
                a_wall, a_cpu = anchor(path)
                first, wall, c = timed(lambda: sync_clone(history, path, name=repo))
                _again, wall2, c2 = timed(lambda: sync_clone(history, path, name=repo))
                report["sync"][repo] = {"commits": first.total_commits, "tags": first.tags, "wall_s": round(wall, 2),
                                        "cpu_s": round(c, 2), "anchor_cpu_s": round(a_cpu, 2),
                                        "ratio_cpu": round(c / a_cpu, 2) if a_cpu else None,
                                        "resync_wall_s": round(wall2, 3)}
                print(f"sync {repo}: {first.total_commits} commits, {first.tags} tags: {wall:.1f} s wall, {c:.1f} s CPU "
                      f"({c / a_cpu:.2f}x the anchor `git log -p -U0` at {a_cpu:.1f} s CPU); re-sync with nothing new "
                      f"{wall2 * 1000:.0f} ms")
        for mode in ("as synced", "blind"):
            if mode == "blind":
                with History(index / "history.sqlite") as history:
                    blind(history, cases)
            tally, lat, misses = evaluate(index, cases)
            report[mode] = {"tally": tally, "latency_ms_median": round(1000 * statistics.median(lat), 1),
                            "latency_ms_max": round(1000 * max(lat), 1), "misses": misses}
            row = "  ".join(f"{s}: named {pct(t['named'], t['cases'])}, leads {pct(t['leads'], t['cases'])}"
                            for s, t in sorted(tally.items()))
            print(f"{mode:9}  {row}  | match {1000 * statistics.median(lat):.0f} ms median, {1000 * max(lat):.0f} ms max")
    if args.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
