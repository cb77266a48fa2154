"""Benchmark: the offline answer on real cases: what it says, what it wrongly proposes, how long it is.

Run: ``python benchmarks/answers.py [--rev REV] [--limit N]``

Cases: the shared dev cases (``../shared/cases``, when present) and the mined real cases of
``tests/data/known_cases`` (each ``dev`` or ``heldout``: the split was fixed before any card,
signature or record was written for them; only dev is ever looked at when tuning), plus the case
folders of ``tests/evals`` (questions with attached logs and configs, counted as ``files``).
Per split it prints:

- ``mention``: the share of each case's ``must_mention`` terms in the answer the user reads first
  (the short text, without ``--verbose``), and in brackets with the ``--verbose`` part too;
- ``category``: the case's category named in that text (``rlmedic eval``'s words);
- ``wrong fixes``: fixes shown that cannot apply to the case's framework: tagged for another
  framework, a key shaped like another framework's, or a key that framework's config does not
  have (AReaL's config reference, slime's flags); and known issues of another RL framework cited
  (goal 0);
- ``lines``: the answer's length in lines (median, 90th percentile).

``--rev REV`` runs the same cases through the code of an older commit too (a ``git worktree`` of it,
imported in place of the installed package) and prints both side by side: the anchor is that
commit, in the same process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import ROOT, load_cases  # noqa: E402

def use_code_of(tree: Path) -> None:
    """Import ``rlmedic`` from another work tree (its folders mapped as pyproject maps them)."""
    for name in [m for m in sys.modules if m == "rlmedic" or m.startswith("rlmedic.")]:
        del sys.modules[name]
    for pkg, folder in (("rlmedic", "core"), ("rlmedic.knowledge", "knowledge"), ("rlmedic.tools", "tools"),
                        ("rlmedic.agent", "agent"), ("rlmedic.ui", "ui")):
        path = tree / folder
        spec = importlib.util.spec_from_file_location(pkg, path / "__init__.py", submodule_search_locations=[str(path)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[pkg] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        if "." in pkg:
            setattr(sys.modules["rlmedic"], pkg.split(".")[1], module)


def folder_cases() -> list[dict]:
    import yaml

    out = []
    for case_dir in sorted((ROOT / "tests" / "evals").iterdir()):
        spec = yaml.safe_load((case_dir / "case.yaml").read_text())
        prompt = spec.get("user_prompt") or (case_dir / "prompt.txt").read_text()
        expected = spec.get("expected") or {}
        files = sorted((case_dir / "attachments").iterdir()) if (case_dir / "attachments").is_dir() else []
        out.append({"id": case_dir.name, "user_input": prompt, "must_mention": expected.get("must_mention", []),
                    "category": expected.get("category", ""), "framework": spec.get("framework", ""),
                    "split": "files", "attachments": files})
    return out


#: the judge: today's (set before another commit's code is imported)
INAPPLICABLE = None


def run(cases: list[dict], shown: int) -> dict[str, dict[str, list[float]]]:
    from rlmedic.agent.evaluate import names_category
    from rlmedic.agent.offline import answer_offline
    from rlmedic.knowledge.index import KnowledgeBase
    from rlmedic.tools.registry import ToolContext

    kb = KnowledgeBase()
    stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for case in cases:
        files = case.get("attachments") or []
        ctx = ToolContext.for_roots([str(p) for p in files], env_roots=False) if files else None
        answer = answer_offline(case["user_input"], kb, attachments=files, ctx=ctx)
        text = answer.answer.lower()
        s = stats[case["split"]]
        terms = [str(t).lower() for t in case.get("must_mention", [])]
        full = (text + "\n" + (getattr(answer, "more", "") or "").lower())
        if terms:
            s["mention"].append(sum(t in text for t in terms) / len(terms))
            s["mention with --verbose"].append(sum(t in full for t in terms) / len(terms))
        if case.get("category"):
            s["category"].append(float(names_category(answer.answer, case["category"])))
        s["wrong fixes"].append(INAPPLICABLE(answer, case.get("framework", ""), shown))
        s["lines"].append(len(answer.answer.splitlines()))
    return stats


def summary(s: dict[str, list[float]]) -> str:
    lines = sorted(s["lines"])
    p90 = lines[int(0.9 * (len(lines) - 1))] if lines else 0
    return (f"n={len(lines):3d}  mention {100 * statistics.mean(s['mention'] or [0]):5.1f}% "
            f"({100 * statistics.mean(s['mention with --verbose'] or [0]):5.1f}% with --verbose)  "
            f"category {100 * statistics.mean(s['category'] or [0]):5.1f}%  "
            f"wrong fixes {int(sum(s['wrong fixes'])):3d} (in {sum(1 for x in s['wrong fixes'] if x):3d} answers)  "
            f"lines median {statistics.median(lines) if lines else 0:.0f}, p90 {p90}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rev", help="also run the code of this older commit (the anchor)")
    parser.add_argument("--limit", type=int, default=0, help="at most this many cases per split")
    parser.add_argument("--split", choices=("dev", "heldout", "files"), help="only this split")
    args = parser.parse_args()
    import os

    os.environ.setdefault("RLMEDIC_HOME", tempfile.mkdtemp(prefix="rlmedic-bench-"))
    cases = [c for c in load_cases() + folder_cases() if not args.split or c["split"] == args.split]
    if args.limit:
        per: dict[str, int] = defaultdict(int)
        kept = []
        for c in cases:
            if per[c["split"]] < args.limit:
                per[c["split"]] += 1
                kept.append(c)
        cases = kept
    global INAPPLICABLE
    from rlmedic.agent.evaluate import inapplicable

    INAPPLICABLE = inapplicable
    import rlmedic.agent.fit  # noqa: F401 - loaded now: the judge of an older commit's answers too
    import rlmedic.tools.config.keys  # noqa: F401
    results = {}
    if args.rev:
        tree = Path(tempfile.mkdtemp(prefix="rlmedic-rev-")) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.rev],
                       check=True, capture_output=True)
        try:
            judge = {name: sys.modules[name] for name in ("rlmedic.tools.config.keys", "rlmedic.agent.fit")}
            use_code_of(tree)
            sys.modules.update(judge)  # the judge stays today's, whatever that commit had
            start = time.perf_counter()
            results[f"at {args.rev}"] = (run(cases, shown=8), time.perf_counter() - start)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
        use_code_of(ROOT)
    start = time.perf_counter()
    results["now"] = (run(cases, shown=5), time.perf_counter() - start)
    for name, (stats, seconds) in results.items():
        print(f"== {name} ({seconds:.1f} s)")
        for split in ("dev", "heldout", "files"):
            if split in stats:
                print(f"  {split:8s} {summary(stats[split])}")
    print(json.dumps({name: {split: {k: (sum(v) / len(v) if v else 0) for k, v in s.items()}
                             for split, s in stats.items()} for name, (stats, _) in results.items()}))


if __name__ == "__main__":
    main()
