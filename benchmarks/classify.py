"""Benchmark: does ``diagnose`` name the right category on real cases, seen and unseen?

Run: ``python benchmarks/classify.py [--show-dev]``

Reads the shared dev cases (``../shared/cases/dev_cases.jsonl``, when present) and the
mined cases (``tests/data/known_cases/*.jsonl``, each line with ``"split": "dev"`` or
``"heldout"``), runs :func:`rlmedic.tools.logs.diagnose.diagnose_text` on each case's
``user_input`` and compares the root finding's category (the first finding when there is
no root; ``none`` when nothing was found) with the case's ``category``.

Prints the accuracy per split side by side, over all cases and over ``kind: log`` cases
(pasted logs and tracebacks, what ``diagnose`` is for). Tuning looks at the dev split
only: ``--show-dev`` lists its misses; held-out cases are only ever counted, never shown.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from cases import load_cases


def predict(case: dict) -> tuple[str, str]:
    from rlmedic.tools.logs.diagnose import diagnose_text

    diag = diagnose_text(case["user_input"], str(case.get("id", "case")))
    finding = diag.root_finding or (diag.findings[0] if diag.findings else None)
    return (finding.category, finding.id) if finding else ("none", "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--show-dev", action="store_true", help="list the dev split's misses (never the held-out ones)")
    args = parser.parse_args()
    cases = load_cases()
    if not cases:
        print("no cases found (../shared/cases, tests/data/known_cases)")
        return 1
    right: Counter[tuple[str, str]] = Counter()
    total: Counter[tuple[str, str]] = Counter()
    misses = []
    started = time.perf_counter()
    for case in cases:
        category, fid = predict(case)
        ok = category == case["category"]
        for scope in ("all", "log") if case.get("kind") == "log" else ("all",):
            total[(case["split"], scope)] += 1
            right[(case["split"], scope)] += ok
        if not ok and case["split"] == "dev":
            misses.append((case.get("id", "?"), case.get("kind", "?"), case["category"], category, fid))
    elapsed = time.perf_counter() - started
    print(f"{len(cases)} cases in {elapsed:.1f} s")
    print(f"{'':12}{'dev':>16}{'heldout':>16}")
    for scope in ("all", "log"):
        cells = []
        for split in ("dev", "heldout"):
            n = total[(split, scope)]
            cells.append(f"{right[(split, scope)]}/{n} ({100 * right[(split, scope)] / n:.0f}%)" if n else "-")
        print(f"{scope + ' cases':12}{cells[0]:>16}{cells[1]:>16}")
    if args.show_dev:
        for cid, kind, want, got, fid in misses:
            print(f"  dev miss {cid} [{kind}]: want {want}, got {got} ({fid})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
