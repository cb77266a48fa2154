"""Benchmark: indexing speed in chunks per second, and a re-index after editing 10 of 2,000 documents.

Usage: python benchmarks/reindex.py [--docs 2000] [--edited 10] [--dir /tmp/x] [--keep]

Writes ``--docs`` synthetic Markdown documents (troubleshooting notes: a title and two or three
sections of a few sentences each, deterministic), then runs the real command line, each a fresh
process (start-up, imports and the model load included), the way a user does:

1. ``rlmedic index DOCS`` from scratch: chunks per second (wall, and per CPU-second);
2. ``rlmedic index DOCS`` with nothing changed (the anchor: what every re-index pays to find out
   what changed: hashing, the manifest);
3. ``--edited`` documents edited (one sentence added to one section each), then ``rlmedic index DOCS``:
   wall and CPU time, chunks re-embedded.

Anchors in the same run: ``rlmedic --help`` (the CLI's start-up) and the no-change re-index.
Targets: indexing >= 100 chunks/s on 2 cores; the edited re-index < 2 s.
"""

from __future__ import annotations

# Child processes write and reuse bytecode (.pyc) as on any installed copy; a shell that sets
# PYTHONDONTWRITEBYTECODE (some containers do) would make every cold run recompile rlmedic's modules.
import os as _os

_os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False",
       "TOKENIZERS_PARALLELISM": "false"}

TOPICS = ["rollout worker", "SGLang server", "weight update", "FSDP engine", "Megatron backend", "reward function",
          "checkpoint saver", "Ray scheduler", "data loader", "tokenizer", "KV cache", "NCCL group", "CUDA graph"]
SYMPTOMS = ["runs out of memory", "hangs at start-up", "times out", "returns empty responses", "fails to resume",
            "crashes after a few hundred steps", "gets slower every step", "reports NaN loss"]
ADVICE = ["lower the micro-batch token budget", "raise the NCCL timeout", "check the mem-fraction-static value",
          "turn on gradient checkpointing", "pin the SGLang version the framework names", "free the cache before the update",
          "set the recover mode to auto", "make the batch size divisible by the data-parallel size"]


def write_docs(folder: Path, count: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        topic, symptom = rng.choice(TOPICS), rng.choice(SYMPTOMS)
        parts = [f"# The {topic} {symptom} (note {i})\n"]
        for s in range(rng.randint(2, 3)):
            parts.append(f"## {['Symptom', 'Cause', 'Fix'][s]}\n")
            sentences = [f"When the {rng.choice(TOPICS)} {rng.choice(SYMPTOMS)}, {rng.choice(ADVICE)} "
                         f"and watch step {rng.randint(1, 5000)}." for _ in range(rng.randint(2, 5))]
            parts.append(" ".join(sentences) + "\n")
        (folder / f"note-{i:05d}.md").write_text("\n".join(parts), encoding="utf-8")


def edit_docs(folder: Path, count: int) -> list[Path]:
    files = sorted(folder.glob("*.md"))
    step = max(1, len(files) // count)
    edited = files[::step][:count]
    for path in edited:
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace("## Cause\n", "## Cause\nThis also happened after an upgrade of the image.\n", 1)
                        if "## Cause\n" in text else text + "\nThis also happened after an upgrade of the image.\n",
                        encoding="utf-8")
    return edited


class _Children:
    """CPU time of finished children, as differences of RUSAGE_CHILDREN around each command."""

    def __enter__(self):
        import resource

        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu0 = ru.ru_utime + ru.ru_stime
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        import resource

        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = ru.ru_utime + ru.ru_stime - self.cpu0
        self.wall = time.perf_counter() - self.t0


def timed(cmd: list[str]) -> tuple[float, float, str]:
    with _Children() as c:
        proc = subprocess.run(cmd, capture_output=True, env=ENV, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return c.wall, c.cpu, proc.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--edited", type=int, default=10)
    ap.add_argument("--dir", default=None, help="work folder (default: a temp dir, removed after)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="rlmedic-reindex-"))
    docs, index = work / "docs", work / "index"
    shutil.rmtree(docs, ignore_errors=True)
    shutil.rmtree(index, ignore_errors=True)
    write_docs(docs, args.docs)
    rl = [sys.executable, "-m", "rlmedic"]
    precision = os.environ.get("RLMEDIC_EMBED_PRECISION", "fp32")
    print(f"{args.docs} documents in {docs}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; "
          f"RLMEDIC_EMBED_PRECISION={precision}")

    help_wall, help_cpu, _ = timed([*rl, "--help"])
    wall, cpu, out = timed([*rl, "index", str(docs), "--index-dir", str(index), "--json"])
    report = json.loads(out)
    chunks = report["chunks_embedded"]
    noop_wall, noop_cpu, out = timed([*rl, "index", str(docs), "--index-dir", str(index), "--json"])
    assert json.loads(out)["chunks_embedded"] == 0, "a no-change re-index embedded something"
    edit_docs(docs, args.edited)
    ed_wall, ed_cpu, out = timed([*rl, "index", str(docs), "--index-dir", str(index), "--json"])
    edited = json.loads(out)
    print()
    print("Each command a fresh process (start-up and model load included); wall and CPU seconds.")
    print(f"{'command':44s} {'wall s':>7s} {'CPU s':>7s}  notes")
    print(f"{'rlmedic --help (anchor)':44s} {help_wall:7.2f} {help_cpu:7.2f}")
    print(f"{'index from scratch':44s} {wall:7.2f} {cpu:7.2f}  {chunks} chunks: {chunks / wall:.0f} chunks/s wall, "
          f"{chunks / cpu:.0f} per CPU-s (target >= 100/s)")
    print(f"{'re-index, nothing changed (anchor)':44s} {noop_wall:7.2f} {noop_cpu:7.2f}")
    print(f"{f're-index, {args.edited} of {args.docs} documents edited':44s} {ed_wall:7.2f} {ed_cpu:7.2f}  "
          f"{edited['chunks_embedded']} chunks re-embedded, {len(edited['updated'])} files updated (target < 2 s); "
          f"{ed_wall / noop_wall:.1f}x the no-change run")
    if not (args.keep or args.dir):
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
