"""Retrieval benchmark: quality (BM25 vs dense vs hybrid) and indexing speed.

Usage: python benchmarks/retrieval.py [--questions tests/data/retrieval_questions.yaml]
Indexes ../shared/seeds and ../shared/corpus into a temporary directory and prints:
- Recall@1/3/5 and MRR of each retrieval mode (docs only, then the playbook cards),
- index-from-scratch and no-change re-index times,
- cold `rlmedic --help` time, against `python -c pass` as the baseline in the same run.
"""

from __future__ import annotations

# Child processes write and reuse bytecode (.pyc) as on any installed copy; a shell that sets
# PYTHONDONTWRITEBYTECODE (some containers do) would make every cold run recompile rlmedic's modules.
import os as _os

_os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def cold_start(cmd: list[str], runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    from rlmedic.knowledge.embeddings import default_embedder
    from rlmedic.knowledge.evaluate import evaluate, load_questions
    from rlmedic.knowledge.index import KnowledgeBase

    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", default=str(REPO / "tests" / "data" / "retrieval_questions.yaml"))
    parser.add_argument("--show-misses", action="store_true")
    args = parser.parse_args()
    questions = load_questions(args.questions)

    default_embedder().embed(["warm up the model so index time measures indexing"])
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase(Path(tmp) / "index")
        t = time.perf_counter()
        report = kb.index([SHARED / "seeds", SHARED / "corpus"])
        scratch = time.perf_counter() - t
        t = time.perf_counter()
        again = KnowledgeBase(Path(tmp) / "index").index([SHARED / "seeds", SHARED / "corpus"])
        noop = time.perf_counter() - t
        assert again.chunks_embedded == 0
        t = time.perf_counter()
        kb.search("warm", 1)  # indexes the built-in cards on first use
        cards_time = time.perf_counter() - t

        print(f"questions: {len(questions)}  chunks: {report.total_chunks} from {len(report.added)} files")
        print("\n== docs only, strict (the section of the seed file itself) ==")
        for mode in ("bm25", "dense", "hybrid", "guided"):
            print(evaluate(kb, questions, mode=mode, strict=True).line(mode))
        print("\n== docs only (that section in the seed or in its upstream copy in the corpus) ==")
        for mode in ("bm25", "dense", "hybrid", "guided"):
            scores = evaluate(kb, questions, mode=mode)
            print(scores.line(mode))
            if args.show_misses and mode == "guided":
                for question, got in scores.misses:
                    print(f"   miss: {question}\n         got: {got}")
        print("\n== playbook cards (the card that answers the question) ==")
        for mode in ("bm25", "dense", "hybrid"):
            scores = evaluate(kb, questions, mode=mode, cards=True)
            print(scores.line(mode))
            if args.show_misses and mode == "hybrid":
                for question, got in scores.misses:
                    print(f"   miss: {question}\n         got: {got}")

    print("\n== speed (2-core machine; ratios are within this run) ==")
    print(f"index seeds+corpus from scratch: {scratch:6.1f} s   (target < 60 s)")
    print(f"re-index, nothing changed:       {noop:6.3f} s   (target < 2 s)")
    print(f"first-use indexing of the cards: {cards_time:6.1f} s")
    base = cold_start([sys.executable, "-c", "pass"])
    helpt = cold_start([sys.executable, "-m", "rlmedic", "--help"])
    print(f"cold `rlmedic --help`:           {helpt:6.3f} s   (python -c pass: {base:.3f} s, ratio {helpt / base:.1f}x; target < 0.5 s)")


if __name__ == "__main__":
    main()
