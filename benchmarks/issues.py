"""Issue-thread benchmark: indexing speed of many threads, and search latency before/after.

Usage: python benchmarks/issues.py [--threads 10000] [--rounds 3]

Generates synthetic upstream threads (the export-file format, deterministic), indexes
../shared/seeds and ../shared/corpus into a temporary index, measures search latency
over the retrieval questions (cards, docs, every kind), then indexes the threads and
measures again, plus: a no-change re-index, issue-only searches, and a log whose error
line matches one thread (is it first, and how fast).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

REPOS = ["inclusionAI/AReaL", "THUDM/slime", "sgl-project/sglang", "volcengine/verl"]
PARTS = ["rollout worker", "SGLang server", "weight update", "FSDP engine", "Megatron backend", "reward function",
         "checkpoint saver", "Ray scheduler", "data loader", "tokenizer", "vLLM engine", "critic", "ref model",
         "async rollout", "NCCL group", "CUDA graph capture", "KV cache", "LoRA adapter", "evaluation loop", "launcher"]
SYMPTOMS = ["crashes after {n} steps", "hangs at startup", "runs out of memory with {n}k context", "gives NaN loss",
            "is {n}x slower than expected", "fails to resume", "returns empty responses", "deadlocks on {n} nodes",
            "ignores the config flag", "throws on multi-turn data", "leaks GPU memory", "times out after {n} minutes"]
ERRORS = [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {f} GiB. GPU {g} has a total capacity of 79.15 GiB",
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:{n}, unhandled system error",
    "ValueError: {key} must be divisible by {k}, got {n}",
    "KeyError: '{key}'",
    "AssertionError: {key} mismatch: expected {n} got {k}",
    "TimeoutError: Timed out waiting for {part} after {n} seconds",
    "ModuleNotFoundError: No module named '{mod}'",
    "ImportError: cannot import name '{sym}' from '{mod}'",
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:{g} and cpu",
    "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task (worker {n})",
    "requests.exceptions.ConnectionError: Max retries exceeded with url: /{route}",
]
KEYS = ["train_batch_size", "ppo_mini_batch_size", "max_tokens_per_gpu", "rollout_batch_size", "n_samples_per_prompt",
        "global_batch_size", "micro_batch_size", "max_new_tokens", "mem_fraction_static", "tensor_parallel_size"]
MODS = ["flash_attn", "sglang.srt.layers", "megatron.core", "transformer_engine", "vllm.worker", "areal.api", "slime.utils"]
SYMS = ["get_tokenizer", "FusedAdam", "ParallelState", "LLMEngine", "SamplingParams", "init_process_group"]
ROUTES = ["generate", "get_model_info", "flush_cache", "update_weights_from_distributed", "health"]
WORDS = ("the run works on one node but fails on two; we use the default config with a larger batch and the "
         "latest main branch; memory grows slowly until the crash; it happens only with long prompts; "
         "setting the flag back to its default makes it go away; logs from every rank are attached below").split()

#: The error line of the log used for the "same error" query (put into one thread only).
NEEDLE = "AssertionError: rollout_batch_size * n_samples_per_prompt must be divisible by global_batch_size, got 4099"


def synthetic_threads(n: int, seed: int = 0) -> list[dict]:
    from rlmedic.knowledge.threads import FORMAT

    rnd = random.Random(seed)
    out = []
    for i in range(n):
        repo = REPOS[i % len(REPOS)]
        part = rnd.choice(PARTS)
        num = rnd.randint(2, 512)
        fmt = dict(n=num, k=rnd.randint(2, 16), f=f"{rnd.uniform(0.5, 20):.2f}", g=rnd.randint(0, 7), key=rnd.choice(KEYS),
                   mod=rnd.choice(MODS), sym=rnd.choice(SYMS), route=rnd.choice(ROUTES), part=part)
        errors = [rnd.choice(ERRORS).format(**fmt) for _ in range(rnd.randint(0, 3))]
        if i == n // 2:
            errors = [NEEDLE]
        problem = f"The {part} {rnd.choice(SYMPTOMS).format(n=num)}. " + " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(60, 180)))
        reply = (f"This comes from the {rnd.choice(PARTS)}: set {rnd.choice(KEYS)}={rnd.randint(1, 64)} or upgrade. "
                 + " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(20, 80))))
        number = 1000 + i
        pr = number + 5000
        merged = f"2025-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}T00:00:00Z"
        out.append({
            "format": FORMAT, "repo": repo, "number": number, "url": f"https://github.com/{repo}/issues/{number}",
            "title": f"{part.capitalize()} {rnd.choice(SYMPTOMS).format(n=num)}", "state_reason": "completed",
            "labels": rnd.sample(["bug", "question", "help wanted", "performance", "sglang", "megatron"], 2),
            "created_at": "2025-01-01T00:00:00Z", "updated_at": merged, "closed_at": merged,
            "problem": problem, "error_lines": errors,
            "resolution": [{"association": "MEMBER", "created_at": merged, "body": reply}],
            "workaround": "", "fix_prs": [{"repo": repo, "number": pr, "url": f"https://github.com/{repo}/pull/{pr}",
                                           "title": f"Fix {part}", "merged_at": merged}],
            "fix_commit": "", "fixed_in": f"v0.{rnd.randint(1, 9)}.{rnd.randint(0, 9)}", "fixed_in_basis": "release notes",
        })
    return out


def latency(kb, queries: list[str], kind: str | None, rounds: int) -> tuple[float, float]:
    """Median milliseconds per search (the query embedding included): wall clock, and CPU
    time of this process (all its threads), which a machine shared with other jobs
    distorts less than the wall clock."""
    wall, cpu = [], []
    for _ in range(rounds):
        for q in queries:
            t, c = time.perf_counter(), time.process_time()
            kb.search(q, 5, kind=kind)
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    return statistics.median(wall) * 1000, statistics.median(cpu) * 1000


def main() -> None:
    sys.path.insert(0, str(REPO))
    from rlmedic.agent.offline import answer_offline
    from rlmedic.knowledge.embeddings import default_embedder
    from rlmedic.knowledge.evaluate import load_questions
    from rlmedic.knowledge.index import KnowledgeBase

    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--docs", nargs="+", default=[str(SHARED / "seeds"), str(SHARED / "corpus")], help="Docs indexed first.")
    parser.add_argument("--questions", default=str(REPO / "tests" / "data" / "retrieval_questions.yaml"))
    args = parser.parse_args()
    queries = [q.question for q in load_questions(args.questions)]
    log = "[rank0] Traceback (most recent call last):\n[rank0]   File \"train.py\", line 12\n[rank0] " + NEEDLE.replace("4099", "4097") + "\n"

    default_embedder().embed(["warm up"])
    threads = synthetic_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase(Path(tmp) / "index")
        t = time.perf_counter()
        docs = kb.index(args.docs)
        print(f"docs: {len(docs.added)} files, {docs.total_chunks} chunks indexed in {time.perf_counter() - t:.0f} s", flush=True)
        kb.search("warm up", 1)
        before = {kind or "all": latency(kb, queries, kind, args.rounds) for kind in ("card", "doc", None)}
        t = time.perf_counter()
        ask_before = [answer_offline(q, kb) for q in queries[:10]]
        ask_before_ms = (time.perf_counter() - t) / len(ask_before) * 1000

        t, cpu = time.perf_counter(), time.process_time()
        report = kb.index_threads(threads)
        index_s, index_cpu = time.perf_counter() - t, time.process_time() - cpu
        t = time.perf_counter()
        again = KnowledgeBase(Path(tmp) / "index").index_threads(threads)
        noop_s = time.perf_counter() - t
        assert again.chunks_embedded == 0

        kb = KnowledgeBase(Path(tmp) / "index")
        kb.search("warm up", 1)
        after = {kind or "all": latency(kb, queries, kind, args.rounds) for kind in ("card", "doc", None)}
        issue_ms = latency(kb, queries, "issue", args.rounds)
        t = time.perf_counter()
        ask_after = [answer_offline(q, kb) for q in queries[:10]]
        ask_after_ms = (time.perf_counter() - t) / len(ask_after) * 1000
        t = time.perf_counter()
        hits = kb.search(log, 3, kind="issue")
        needle_ms = (time.perf_counter() - t) * 1000
        needle = next(r for r in threads if r["error_lines"] == [NEEDLE])
        disk = sum(p.stat().st_size for p in (Path(tmp) / "index" / "issues").rglob("*") if p.is_file())

    load = os.getloadavg()[0]
    print(f"threads: {len(threads)} generated, {len(report.added)} indexed in {index_s:.1f} s wall, {index_cpu:.1f} s CPU "
          f"({len(threads) / index_s:.1f} threads/s); no-change re-index {noop_s:.2f} s; "
          f"issue store on disk {disk / 2**20:.0f} MiB; load average now {load:.1f} on {os.cpu_count()} cores")
    print(f"projected for 10,000 threads: {index_s / len(threads) * 10_000 / 60:.1f} min wall as measured, "
          f"{index_cpu / len(threads) * 10_000 / 60 / (os.cpu_count() or 1):.1f} min if every core were ours (CPU time / cores)")
    print("search latency, median ms per query, wall / CPU (before -> after threads):")
    for kind in before:
        (bw, bc), (aw, ac) = before[kind], after[kind]
        print(f"  {kind:5s} wall {bw:7.1f} -> {aw:7.1f} ({(aw / bw - 1) * 100:+.0f}%)   CPU {bc:7.1f} -> {ac:7.1f} ({(ac / bc - 1) * 100:+.0f}%)")
    print(f"  issue wall {issue_ms[0]:7.1f}   CPU {issue_ms[1]:7.1f}")
    print(f"offline ask (10 questions), ms each: {ask_before_ms:.0f} -> {ask_after_ms:.0f} ({(ask_after_ms / ask_before_ms - 1) * 100:+.0f}%)")
    print(f"log with a known error line: top hit {hits[0].source} (expected {needle['repo']}#{needle['number']}), "
          f"matched={bool(hits[0].matched_error)}, {needle_ms:.0f} ms")


if __name__ == "__main__":
    main()
