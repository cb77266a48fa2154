"""Benchmark: a cold ``rlmedic diagnose`` against ``LC_ALL=C grep -E -c`` and ``rg -c`` on realistic log shapes.

Run: ``python benchmarks/logscan.py [--size-mb 256] [--seed 1] [--shapes areal-mixed,...] [--warn-mb 64]
[--kv-mb 64] [--ranks 16] [--rank-mb 16] [--runs 1] [--dir /tmp/x] [--keep]``

The logs (``benchmarks/mixedlogs.py``: lines shaped like the fixtures' AReaL, SGLang, slime and verl
lines, values from a seeded generator; each shape gets its own seed, ``--seed`` shifts them all):

* ``areal-mixed``: Ray-prefixed StatsLogger tables, rollout throughput lines, SGLang decode and
  prefill lines, HTTP access lines, tqdm bars; ``areal-dense``: a stats table every ~40 lines;
  ``slime`` and ``verl``: their metric dicts among SGLang lines; ``sparse``: a table every ~1500
  lines of noise that names no metric. Each ends with a CUDA OOM traceback and NCCL cascades;
* ``gzip``: ``areal-mixed`` gzipped (anchors: ``zgrep``, ``rg -z``);
* ``warnings``: 10% of the lines are matching warnings (SGLang KV-cache retractions);
* ``kv``: issue 31's gzip of 64 MiB of ``key=value`` lines (about 4 MB compressed), a NaN late in
  it; its target is under 10 s, not a ratio;
* ``N-ranks``: a folder of per-rank logs, the OOM in one of them (wall time: all cores).

Every tool runs as a fresh process, start-up included, on the same pattern file (with ``--runs N``
the tools take turns, N rounds, the best of each counts): the catalog's
regexes rewritten as EREs (:func:`ere_patterns`, 211 patterns today). CPU time (user + system of
the process and its children, from ``os.wait4``) and wall time are both printed, with the load
average before each row; the ratio is the anchor's time over rlmedic's (>= 1: rlmedic is at least
as fast), CPU for single files, wall for the folder. The anchors run in the C locale (no UTF-8
decoding: their fastest mode). rlmedic does more than count lines (findings, root cause, metric
series); a wrong root cause fails the run.
"""

from __future__ import annotations

# Child processes write and reuse bytecode (.pyc) as on any installed copy; a shell that sets
# PYTHONDONTWRITEBYTECODE (some containers do) would make every cold run recompile rlmedic's modules.
import os as _os

_os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import random
import tempfile
import time
from pathlib import Path

_STATS_KEYS = (
    "grpo_actor/task_reward/avg",
    "grpo_actor/task_reward/max",
    "grpo_actor/task_reward/min",
    "grpo_actor/update/actor_loss/avg",
    "grpo_actor/update/grad_norm",
    "grpo_actor/update/entropy/avg",
    "grpo_actor/update/importance_weight/avg",
    "grpo_actor/update/clip_ratio/avg",
    "grpo_actor/no_eos_ratios/avg",
    "grpo_actor/seq_len/avg",
    "timeperf/rollout",
    "timeperf/train_step",
)


def _noise_pool(rng: random.Random, size: int = 4000) -> list[str]:
    """Healthy lines without timestamps; a timestamp prefix is added when written."""
    pool = []
    for _ in range(size):
        kind = rng.random()
        tp = rng.randrange(8)
        if kind < 0.55:
            pool.append(
                f"[TP{tp}] Decode batch. #running-req: {rng.randrange(1, 256)}, #token: {rng.randrange(1000, 90000)}, "
                f"token usage: {rng.random():.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(500, 9000):.2f}, "
                f"#queue-req: {rng.randrange(0, 4)}"
            )
        elif kind < 0.70:
            pool.append(
                f"[TP{tp}] Prefill batch. #new-seq: {rng.randrange(1, 64)}, #new-token: {rng.randrange(100, 16000)}, "
                f"#cached-token: {rng.randrange(0, 9000)}, token usage: {rng.random():.2f}, #running-req: {rng.randrange(0, 200)}, "
                f"#queue-req: {rng.randrange(0, 10)}"
            )
        elif kind < 0.85:
            pool.append(f'INFO:     10.0.0.{rng.randrange(2, 9)}:{rng.randrange(30000, 60000)} - "POST /generate HTTP/1.1" 200 OK')
        elif kind < 0.92:
            pid = rng.randrange(1000, 99999)
            pool.append(
                f"(RolloutWorker pid={pid}) [AReaL] RemoteSGLangEngine INFO: Rollout submitted {rng.randrange(1, 512)} "
                f"requests, {rng.randrange(0, 64)} running, version {rng.randrange(0, 300)}"
            )
        elif kind < 0.97:
            done = rng.randrange(0, 64)
            pool.append(
                f"actor_train:  {done * 100 // 64:3d}%|{'#' * (done // 7):<10}| {done}/64 [00:{done:02d}<00:{64 - done:02d},  1.{rng.randrange(10, 99)}s/it]"
            )
        else:
            rank = rng.randrange(8)
            pool.append(
                f"(TrainWorker pid={rng.randrange(1000, 99999)}) [AReaL] [FSDPEngine Rank {rank}] INFO: Microbatch #tokens "
                f"(rank {rank}): [{rng.randrange(4000, 8192)}, {rng.randrange(4000, 8192)}], padded to: [8192, 8192]"
            )
    return pool


def _stats_table(rng: random.Random, step: int, total: int, reward: float) -> list[str]:
    values = {
        "grpo_actor/task_reward/avg": reward,
        "grpo_actor/task_reward/max": 1.0,
        "grpo_actor/task_reward/min": 0.0,
        "grpo_actor/update/actor_loss/avg": rng.uniform(-0.05, 0.05),
        "grpo_actor/update/grad_norm": rng.uniform(0.05, 0.4),
        "grpo_actor/update/entropy/avg": rng.uniform(0.3, 0.6),
        "grpo_actor/update/importance_weight/avg": rng.uniform(0.98, 1.02),
        "grpo_actor/update/clip_ratio/avg": rng.uniform(0.0, 0.01),
        "grpo_actor/no_eos_ratios/avg": rng.uniform(0.0, 0.05),
        "grpo_actor/seq_len/avg": rng.uniform(200, 900),
        "timeperf/rollout": rng.uniform(20, 60),
        "timeperf/train_step": rng.uniform(10, 30),
    }
    items = list(values.items())
    rows = (len(items) + 1) // 2
    width = 40
    lines = [
        f"Epoch 1/5 Step {step}/{total} Train step {step}/{total} done.",
        "Stats (1/1):",
        "╒" + "═" * width + "╤" + "═" * 13 + "╤" + "═" * width + "╤" + "═" * 13 + "╕",
    ]
    for r in range(rows):
        cells = []
        for c in range(2):
            i = r + c * rows
            if i < len(items):
                k, v = items[i]
                cells.append(f" {k:<{width - 2}} │ {v:11.4e} ")
        lines.append("│" + "│".join(cells) + "│")
    lines.append("╘" + "═" * width + "╧" + "═" * 13 + "╧" + "═" * width + "╧" + "═" * 13 + "╛")
    return lines


_FAILURE = """\
(TrainWorker pid=48213, ip=10.0.0.5) Traceback (most recent call last):
(TrainWorker pid=48213, ip=10.0.0.5)   File "/usr/local/lib/python3.11/site-packages/areal/engine/ppo/actor.py", line 312, in ppo_update
(TrainWorker pid=48213, ip=10.0.0.5)     loss.backward()
(TrainWorker pid=48213, ip=10.0.0.5)   File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward
(TrainWorker pid=48213, ip=10.0.0.5)     torch.autograd.backward(
(TrainWorker pid=48213, ip=10.0.0.5) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 3 has a total capacity of 79.11 GiB of which 1.02 GiB is free. Process 48213 has 78.07 GiB memory in use. Of the allocated memory 71.20 GiB is allocated by PyTorch, and 5.31 GiB is reserved by PyTorch but unallocated.
"""

_CASCADE = (
    "(TrainWorker pid={pid}, ip=10.0.0.5) [rank{rank}]:[E1122 {clock}.123456 ProcessGroupNCCL.cpp:616] [Rank {rank}] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600021 milliseconds before timing out."
)


#: SGLang's KV-cache retraction warning: printed on many lines of an overloaded server.
_RETRACT = "[TP{tp}] KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_token_ratio: 0.{r:04d} -> 1.0000"


def write_log(
    path: str | Path, size_bytes: int, *, seed: int = 7, failures: bool = True, lines_per_step: int = 1500,
    warning_ratio: float = 0.0,
) -> int:
    """Write about ``size_bytes`` of log to ``path``; return the number of steps logged.

    With ``failures`` the run dies of a CUDA OOM on rank 3 during ``ppo_update`` at the end
    of the file, followed by NCCL watchdog timeouts from the other ranks. ``lines_per_step``
    sets the density of stats tables: 1500 is a sparse log; 40 makes about every sixth line
    a stats line (a run that logs metrics at every step of a short rollout).
    """
    rng = random.Random(seed)
    pool = _noise_pool(rng)
    est_step_bytes = lines_per_step * 170
    total_steps = max(3, size_bytes // est_step_bytes)
    written = 0
    step = 0
    second = 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < size_bytes:
            step += 1
            second += 37
            hh, mm, ss = 10 + (second // 3600) % 14, (second // 60) % 60, second % 60
            clock = f"{hh:02d}:{mm:02d}:{ss:02d}"
            prefix = f"[2025-11-22 {clock}] "
            block = [prefix + line for line in rng.choices(pool, k=lines_per_step)]
            if warning_ratio:  # a share of the lines become matching warnings (an overloaded SGLang server)
                for i in range(0, lines_per_step, max(1, round(1 / warning_ratio))):
                    block[i] = prefix + _RETRACT.format(tp=i % 8, n=1 + i % 7, r=(i * 37) % 10000)
            reward = min(0.9, 0.1 + step * 0.002) + rng.uniform(-0.05, 0.05)
            stamp = f"[AReaL] 20251122-{clock}.{rng.randrange(1000):03d} StatsLogger INFO: "
            table = _stats_table(rng, step, total_steps, reward)
            block.append(stamp + table[0])
            block.append(stamp + table[1])
            block.extend(table[2:])
            text = "\n".join(block) + "\n"
            fh.write(text)
            written += len(text.encode("utf-8"))
        if failures:
            # the run dies here: an OOM on one rank, NCCL timeouts on the others (a
            # failure followed by more training steps would be one the run got past)
            fh.write(f"[AReaL] 20251122-{clock}.500 [FSDPEngine Rank 3] INFO: ppo_update step {step + 1} starting\n")
            fh.write(_FAILURE)
            for rank in (0, 1, 2, 4, 5, 6, 7):
                fh.write(_CASCADE.format(pid=48200 + rank, rank=rank, clock=clock) + "\n")
    return step


# ------------------------------------------------------------------ grep patterns -


def _literal_ere(text: str) -> str:
    """A literal as an ERE both grep and ripgrep accept (no escaped spaces or quotes)."""
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in text)


def _to_ere(rx: str) -> str:
    r"""Python regex -> POSIX ERE: ``(?:`` groups, ``\d \s \S \w`` classes (inside brackets too)."""
    out: list[str] = []
    i = 0
    in_class = False
    inside = {"d": "0-9", "s": "[:space:]", "w": "[:alnum:]_"}
    outside = {"d": "[0-9]", "s": "[[:space:]]", "S": "[^[:space:]]", "w": "[[:alnum:]_]", "n": "\\n"}
    while i < len(rx):
        c = rx[i]
        if c == "\\" and i + 1 < len(rx):
            nxt = rx[i + 1]
            table = inside if in_class else outside
            out.append(table.get(nxt, "\\" + nxt if nxt not in " '\"" else nxt))
            i += 2
            continue
        if not in_class and rx.startswith("(?:", i):
            out.append("(")
            i += 3
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            if rx.startswith("[^", i):
                out.append("^")
                i += 1
            i += 1
            if i < len(rx) and rx[i] == "]":  # a leading ] is a literal member
                out.append("]")
                i += 1
            continue
        if c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


def ere_patterns() -> list[str]:
    r"""The catalog's regexes (and metric keywords) rewritten for ``grep -E`` and ``rg``.

    Python-only syntax is translated (``(?:`` groups, ``\d``/``\s``/``\w`` classes); a
    pattern with lookarounds is replaced by its prefilter literals, and ``(?i)`` patterns
    are searched case-sensitively (a small advantage to grep).
    """
    from rlmedic.tools.logs.signatures import builtin_catalog

    catalog = builtin_catalog()
    out: list[str] = []
    for sig in catalog.signatures:
        for p in sig.patterns:
            rx = p.pattern.replace("(?i)", "")
            if "(?=" in rx or "(?!" in rx or "(?<" in rx:
                out += [_literal_ere(lit.text) for lit in sig.literals]
                continue
            out.append(_to_ere(rx.replace(r"[^\n]", ".")))
    out += [_literal_ere(lit.text) for lit in catalog.metric_literals]
    return list(dict.fromkeys(_unicode_classes_as_alternations(rx) for rx in out))


def _unicode_classes_as_alternations(ere: str) -> str:
    """``[-–]`` -> ``([-]|–)``: a bracket class may only hold single bytes in the C locale and in rg --no-unicode."""
    def split(m: re.Match[str]) -> str:
        body = m.group(1)
        wide = [c for c in body if ord(c) > 127]
        if not wide or body.startswith("^"):
            return m.group(0)
        narrow = "".join(c for c in body if ord(c) <= 127)
        return "(" + "|".join(([f"[{narrow}]"] if narrow else []) + wide) + ")"

    return re.sub(r"\[((?:\[:[a-z]+:\]|[^\]])+)\]", split, ere)


def rg_bytes(ere: str) -> str:
    """The pattern for ``rg --no-unicode``, which refuses non-ASCII characters: each one as its UTF-8 bytes."""
    return "".join(c if ord(c) < 128 else "".join(f"(?-u:\\x{b:02X})" for b in c.encode()) for c in ere)


# ------------------------------------------------------------------ the logs ------


def write_shape(path: str | Path, shape: str, size_bytes: int, seed: int) -> None:
    """One of :mod:`mixedlogs`' shapes (gzipped when ``path`` ends in ``.gz``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import mixedlogs

    mixedlogs.write(path, shape, size_bytes, seed)


def write_rank_folder(folder: str | Path, ranks: int, rank_bytes: int, *, failing_rank: int = 3) -> None:
    """``ranks`` per-rank logs of about ``rank_bytes`` each; ``failing_rank`` dies of the OOM.

    The healthy ranks share one generated body (copied), so writing 1 GiB stays quick;
    every byte is still read by each tool.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    healthy = folder / "rank0.log"
    write_log(healthy, rank_bytes, seed=11, failures=False)
    for r in range(1, ranks):
        if r == failing_rank:
            write_log(folder / f"rank{r}.log", rank_bytes, seed=11 + r, failures=True)
        else:
            shutil.copyfile(healthy, folder / f"rank{r}.log")


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


# ------------------------------------------------------------------ measurements --

def _cpu_run(cmd: list[str] | str, env: dict[str, str] | None = None, shell: bool = False) -> tuple[float, float, str]:
    """(CPU seconds of the process and its children, wall seconds, stdout) of one fresh run, start-up included.

    ``os.wait4`` reports the child's rusage including the children it waited for (a
    shell pipeline's ``gzip -dc | grep`` counts whole).
    """
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, shell=shell)
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd}: exit {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall, out


def _best(cmds: dict[str, tuple[list[str] | str, dict[str, str] | None, bool]], runs: int
          ) -> dict[str, tuple[float, float, str]]:
    """Per tool, the lowest CPU and the lowest wall time of ``runs`` runs, the tools taking turns
    (grep, rg, rlmedic, grep, ...): this VM's speed moves by 10-30% within minutes, and tools run
    one after the other in the same minutes see the same machine, so their ratio is fair."""
    results: dict[str, list[tuple[float, float, str]]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, (cmd, env, shell) in cmds.items():
            results[name].append(_cpu_run(cmd, env, shell))
    return {name: (min(r[0] for r in rs), min(r[1] for r in rs), rs[-1][2]) for name, rs in results.items()}


def measure(label: str, path: str, pattern_file: str, runs: int, rg: str | None, expect: str | None = "cuda-oom"
            ) -> dict[str, object]:
    """One log (file, gzip or folder): grep -E -c and rg -c (C locale), rlmedic diagnose, each a fresh process."""
    rg_file = pattern_file[: -len(".ere")] + ".rg"  # written beside it by main()
    size = _size(path)
    files = [os.path.join(path, f) for f in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for everyone
    c_env = {**os.environ, "LC_ALL": "C"}
    row: dict[str, object] = {"label": label, "mb": size / 1e6, "files": len(files), "load": os.getloadavg()[0],
                              "expect": expect}
    cmds: dict[str, tuple[list[str] | str, dict[str, str] | None, bool]] = {}
    if path.endswith(".gz"):  # zgrep is gzip -cdfq | grep: the same pipeline, counted whole
        cmds["grep"] = (["zgrep", "-E", "-c", "-f", pattern_file, path], c_env, False)
        if rg:
            cmds["rg"] = ([rg, "-z", "-c", "--no-unicode", "-f", rg_file, path], c_env, False)
    else:
        cmds["grep"] = (["grep", "-E", "-c", "-f", pattern_file, *files], c_env, False)
        if rg:
            # --no-unicode: with Unicode classes ripgrep's DFA for ~200 patterns blows up (minutes)
            cmds["rg"] = ([rg, "-c", "--no-unicode", "-f", rg_file, path], c_env, False)
    cmds["rlmedic"] = ([sys.executable, "-m", "rlmedic", "diagnose", "--json", path], None, False)
    row.update(_best(cmds, runs))
    out = row["rlmedic"][2]  # type: ignore[index]
    diag = json.loads(out)
    index = diag.get("root")
    root = diag["findings"][index] if isinstance(index, int) else None
    row["root"] = root["id"] if root else None
    row["root_at"] = f"{os.path.basename(root['file'])}:{root['line']}" if root else None
    row["partial"] = diag["stats"].get("partial")
    return row


def report(rows: list[dict[str, object]], rg: str | None) -> None:
    print()
    print("Each tool as a fresh process, start-up included; best of runs. Anchors: grep -E -c (LC_ALL=C; zgrep for")
    print("gzip) and rg -c --no-unicode (-z for gzip), the same pattern file. Ratio = anchor's time / rlmedic's time")
    print("(>= 1: rlmedic is at least as fast), CPU and wall; the folder's figure is wall (all cores). load: 1-min load")
    print("average before the row.")
    head = (f"{'log':12s} {'MB':>5s} {'load':>4s} | {'grep cpu':>8s} {'rg cpu':>6s} {'me cpu':>6s} {'x grep':>6s} {'x rg':>5s} | "
            f"{'grep wall':>9s} {'rg wall':>7s} {'me wall':>7s} {'x grep':>6s} {'x rg':>5s}  root")
    print(head)
    for row in rows:
        g, me = row["grep"], row["rlmedic"]  # type: ignore[index]
        r = row.get("rg")
        cells = []
        for k in (0, 1):
            rg_cell = f"{r[k]:6.2f}" if r else f"{'-':>6s}"  # type: ignore[index]
            rg_ratio = f"{r[k] / me[k]:5.2f}" if r else f"{'-':>5s}"  # type: ignore[index]
            width = 8 if k == 0 else 9
            cells.append(f"{g[k]:{width}.2f} {rg_cell if k == 0 else rg_cell.rjust(7)} {me[k]:{6 if k == 0 else 7}.2f} "  # type: ignore[index]
                         f"{g[k] / me[k]:6.2f} {rg_ratio}")  # type: ignore[index]
        print(f"{row['label']:12s} {row['mb']:5.0f} {row['load']:4.1f} | {cells[0]} | {cells[1]}  {row['root']} at {row['root_at']}"
              + (f"  partial={row['partial']}" if row.get("partial") else ""))
    if not rg:
        print("rg: ripgrep is not installed (apt-get install ripgrep); its column is left empty")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=256, help="MiB of each mixed shape (and of the gzip's inside)")
    ap.add_argument("--seed", type=int, default=1, help="first seed; each shape takes the next one")
    ap.add_argument("--shapes", default="areal-mixed,areal-dense,slime,verl,sparse",
                    help="mixedlogs shapes to measure (comma-separated); the gzip row is areal-mixed gzipped")
    ap.add_argument("--warn-mb", type=int, default=64, help="size of the warning-dense log (10%% matching lines; 0: skip)")
    ap.add_argument("--kv-mb", type=int, default=64, help="size inside the key=value gzip (0: skip)")
    ap.add_argument("--no-gzip", action="store_true", help="leave out the gzipped areal-mixed row")
    ap.add_argument("--ranks", type=int, default=16, help="files in the per-rank folder (0: leave it out)")
    ap.add_argument("--rank-mb", type=int, default=16, help="size of each per-rank file")
    ap.add_argument("--runs", type=int, default=1, help="runs per measurement; the best counts")
    ap.add_argument("--dir", default=None, help="where to write the logs (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="reuse/keep the generated logs")
    args = ap.parse_args(argv)

    workdir = args.dir or tempfile.mkdtemp(prefix="rlmedic-bench-")
    os.makedirs(workdir, exist_ok=True)
    size = args.size_mb << 20
    shapes = [s for s in args.shapes.split(",") if s]
    jobs: list[tuple[str, str, object, str | None]] = []  # (label, path, maker, expected root)
    for n, shape in enumerate(shapes):
        seed = args.seed + n
        path = os.path.join(workdir, f"{shape}-{args.size_mb}mb-s{seed}.log")
        jobs.append((shape, path, lambda p, shape=shape, seed=seed: write_shape(p, shape, size, seed), "cuda-oom"))
    if not args.no_gzip:
        seed = args.seed + len(shapes)
        jobs.append(("gzip", os.path.join(workdir, f"areal-mixed-{args.size_mb}mb-s{seed}.log.gz"),
                     lambda p, seed=seed: write_shape(p, "areal-mixed", size, seed), "cuda-oom"))
    if args.warn_mb:
        jobs.append(("warnings", os.path.join(workdir, f"warnings-{args.warn_mb}mb.log"),
                     lambda p: write_log(p, args.warn_mb << 20, warning_ratio=0.1), "cuda-oom"))
    if args.kv_mb:
        jobs.append(("kv-gzip", os.path.join(workdir, f"kv-{args.kv_mb}mb.log.gz"),
                     lambda p: write_shape(p, "kv", args.kv_mb << 20, args.seed), "nonfinite-loss"))
    if args.ranks:
        jobs.append((f"{args.ranks}-ranks", os.path.join(workdir, f"ranks-{args.ranks}x{args.rank_mb}mb"),
                     lambda p: write_rank_folder(p, args.ranks, args.rank_mb << 20), "cuda-oom"))
    for _label, path, make, _root in jobs:
        if not (args.keep and os.path.exists(path)):
            t = time.perf_counter()
            make(path)  # type: ignore[operator]
            print(f"generated {path} ({_size(path) / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s")
    pattern_file = os.path.join(workdir, "patterns.ere")
    pats = ere_patterns()
    with open(pattern_file, "w") as fh:
        fh.write("\n".join(pats) + "\n")
    with open(pattern_file[: -len(".ere")] + ".rg", "w") as fh:
        fh.write("\n".join(rg_bytes(p) for p in pats) + "\n")
    rg = shutil.which("rg")
    print(f"{len(pats)} patterns; ripgrep {'at ' + rg if rg else 'not installed'}; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}")
    rows = []
    for label, path, _make, root in jobs:
        rows.append(measure(label, path, pattern_file, args.runs, rg, root))
        print(f"  {label}: rlmedic {rows[-1]['rlmedic'][0]:.2f} s CPU, {rows[-1]['rlmedic'][1]:.2f} s wall", flush=True)  # type: ignore[index]
    report(rows, rg)
    if not args.keep and not args.dir:
        shutil.rmtree(workdir, ignore_errors=True)
    wrong = [row for row in rows if row["root"] != row["expect"]]
    for row in wrong:
        print(f"WRONG ANSWER on {row['label']}: the root cause should be {row['expect']}, got {row['root']}: "
              "the speed figures do not count")
    slow = [row for row in rows if row["label"] == "kv-gzip" and row["rlmedic"][1] > 10]  # type: ignore[index]
    for row in slow:
        print(f"kv-gzip took {row['rlmedic'][1]:.1f} s wall: over issue 31's 10 s")  # type: ignore[index]
    return 1 if wrong or slow else 0


if __name__ == "__main__":
    sys.exit(main())
