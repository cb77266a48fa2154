"""Known-issue engine latency: loading the records and matching a failure, at the shipped size and 10x.

Usage: python benchmarks/known.py [--copies 10] [--runs 5]
Prints, best of ``--runs`` each, in one process:
- load: cold (no cache file, nothing in memory), from the disk cache (new process state), memoised;
- match: an attached log with a known error line (exact), the same line at the end of ~2 MB of
  training log, a question only (similarity);
- the anchor: one playbook-card search (`KnowledgeBase.search(kind="card")`, dense + BM25) in the
  same process, and every figure as a ratio to it;
- the same at ``--copies`` synthetic copies of every record (ids renamed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def best(fn, runs: int) -> float:
    out = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def copies(src: Path, dst: Path, n: int) -> int:
    """``n`` copies of every record under ``src`` in ``dst``, ids (and file names) suffixed."""
    from rlmedic.knowledge.known.load import record_files

    count = 0
    for path in record_files(src):
        text = path.read_text(encoding="utf-8")
        for i in range(n):
            new_id = f"{path.stem}-copy{i}"
            (dst / f"{new_id}.yaml").write_text(text.replace(f"id: {path.stem}", f"id: {new_id}", 1), encoding="utf-8")
            count += 1
    return count


def measure(folder: Path, runs: int, log: str, big_log: str, question: str) -> dict[str, float]:
    from rlmedic.knowledge.known import load as _load
    from rlmedic.knowledge.known import match
    from rlmedic.knowledge.known.load import _MEMO, _cache_path
    from rlmedic.knowledge.known.match import _INDEXES

    dirs = [(folder, "team")]
    cache = _cache_path()

    def cold() -> None:
        _MEMO.clear()
        _INDEXES.clear()
        if cache and cache.exists():
            cache.unlink()
        _load(dirs)

    def disk() -> None:
        _MEMO.clear()
        _INDEXES.clear()
        _load(dirs)

    out = {"records": len(_load(dirs).records)}
    out["load cold"] = best(cold, runs)
    _load(dirs)
    out["load from disk cache"] = best(disk, runs)
    out["load memoised"] = best(lambda: _load(dirs), runs)
    pack = _load(dirs)
    _INDEXES.clear()
    t = time.perf_counter()
    match([log], pack=pack)
    out["first match (builds the matcher's index)"] = time.perf_counter() - t
    out["match: log with a known line"] = best(lambda: match([log], pack=pack), runs)
    out["match: ~2 MB log"] = best(lambda: match([big_log], pack=pack), runs)
    out["match: question only"] = best(lambda: match(question=question, pack=pack), runs)
    return out


def main() -> None:
    from rlmedic.knowledge.index import KnowledgeBase
    from rlmedic.knowledge.known.load import BUILTIN_DIR, load, record_files

    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RLMEDIC_HOME"] = str(Path(tmp) / "home")
        pack = load([(BUILTIN_DIR, "builtin")])
        if not pack.records:
            raise SystemExit("no shipped records to measure")
        # a real symptom line of the first record with a regex-free error string, in a log shape
        record = next(r for r in pack.records if r.symptoms.errors)
        log = f"[2025-05-02 11:09:10] INFO step 12\n[2025-05-02 11:09:11] ERROR {record.symptoms.errors[0]}\n"
        noise = "".join(f"[2025-05-02 11:{i // 60 % 60:02d}:{i % 60:02d}] INFO step {i} loss 0.{i % 97} reward 0.5 "
                        f"throughput 1234.5 tok/s\n" for i in range(25_000))
        big_log = noise + log
        question = "the rollout engine dies with an out of memory error right after the weight update on colocated GPUs"

        kb = KnowledgeBase(Path(tmp) / "index")
        kb.search("warm up: cards are embedded once", 1, kind="card")
        queries = iter(f"sglang runs out of memory during rollout number {i}" for i in range(1000))
        # a new query each time: the embedding of the question is part of a card search
        anchor = best(lambda: kb.search(next(queries), 3, kind="card"), args.runs)

        shipped_dir = Path(tmp) / "shipped"
        shipped_dir.mkdir()
        for path in record_files(BUILTIN_DIR):
            shutil.copy(path, shipped_dir / path.name)
        big_dir = Path(tmp) / f"x{args.copies}"
        big_dir.mkdir()
        copies(BUILTIN_DIR, big_dir, args.copies)

        print(f"anchor: one card search (dense + BM25) {1000 * anchor:.1f} ms  (best of {args.runs})")
        for name, folder in (("shipped", shipped_dir), (f"{args.copies}x synthetic", big_dir)):
            figures = measure(folder, args.runs, log, big_log, question)
            print(f"\n{name}: {figures.pop('records')} records")
            for label, seconds in figures.items():
                print(f"  {label:42s} {1000 * seconds:8.1f} ms  {seconds / anchor:6.2f}x the card search")


if __name__ == "__main__":
    main()
