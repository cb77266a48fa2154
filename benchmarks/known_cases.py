"""Benchmark: do real users' words find the right known-issue record, and does a wrong one ever lead?

Run: ``python benchmarks/known_cases.py [--show-dev]``

Reads the mined cases (``tests/data/known_cases/*.jsonl``: ``split`` ``dev`` or ``heldout``)
and the shared dev cases (``../shared/cases/dev_cases.jsonl``, when present) and matches each
case's ``user_input`` (the text a user pastes) against the shipped records. A record is *right*
when its sources name the case's thread or one of its refs. Per split it prints:

- ``hit@1`` / ``hit@3``: a right record first / in the top three (only meaningful on ``dev``:
  held-out threads have no record of their own);
- ``leads``: how often a certain match (exact string, regex, exception) would lead the answer,
  and on ``dev`` how often that leader is right (precision);
- ``mentions``: the share of the case's ``must_mention`` terms found in the known-issue lines
  of the answer (``known_lines``), over the cases where there are any.

Tuning looks at the dev split only (``--show-dev`` lists its misses); held-out cases are
only counted, never shown.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from cases import load_cases


def main() -> None:
    from rlmedic.knowledge.known import known_lines, leading, load, match

    parser = argparse.ArgumentParser()
    parser.add_argument("--show-dev", action="store_true", help="list the dev split's misses")
    args = parser.parse_args()
    pack = load()
    cases = load_cases()
    stats: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    misses = []
    start = time.perf_counter()
    for case in cases:
        split = case.get("split", "dev")
        s = stats[split]
        right = {case["source"], *case.get("refs", [])}
        found = match(question=case["user_input"], pack=pack, k=3)
        is_right = [bool(set(m.record.sources) & right) for m in found]
        s["cases"] += 1
        s["hit@1"] += bool(is_right[:1] and is_right[0])
        s["hit@3"] += any(is_right)
        lead = leading(found)[:1]
        if lead:
            s["leads"] += 1
            s["right leads"] += bool(set(lead[0].record.sources) & right)
        text = " ".join(known_lines(found, lambda c: 1)).lower()
        terms = [str(t) for t in case.get("must_mention", [])]
        if text and terms:
            s["with lines"] += 1
            s["mentions"] += sum(t.lower() in text for t in terms) / len(terms)
        if split == "dev" and not (is_right[:1] and is_right[0]):
            got = ", ".join(f"{m.how} {m.record.id} {m.score:.2f}" for m in found) or "nothing"
            misses.append(f"{case['id']}: {got}")
    seconds = time.perf_counter() - start
    print(f"{len(pack.records)} records, {len(cases)} cases, {1000 * seconds / max(len(cases), 1):.1f} ms a case")
    for split, s in sorted(stats.items()):
        n = s["cases"]
        leads = s["leads"]
        line = (f"{split:8s} {int(n):4d} cases  hit@1 {s['hit@1'] / n:5.1%}  hit@3 {s['hit@3'] / n:5.1%}  "
                f"leads {leads / n:5.1%}")
        if split == "dev" and leads:
            line += f" (right {s['right leads'] / leads:5.1%})"
        if s["with lines"]:
            line += f"  mentions {s['mentions'] / s['with lines']:5.1%} of {int(s['with lines'])}"
        print(line)
    if args.show_dev:
        print("\ndev misses:")
        print("\n".join(f"  {m}" for m in misses))


if __name__ == "__main__":
    main()
