"""Cold start of the commands users wait on, in CPU time and peak RSS, next to their anchors.

Run: ``python benchmarks/coldstart.py [--docs DIR] [--runs 3]``

Each command runs as a fresh process (start-up included); its CPU time (user + system)
and peak RSS come from ``os.wait4``'s rusage of that very child, so other load on the
machine adds wall time but little CPU. Anchors, run in the same invocation:
``python -c pass`` (the interpreter alone) and ``rlmedic --help`` (the CLI's own imports).
Measured: ``search`` and ``ask --offline`` on an index of ``--docs`` (default
``../shared/corpus/areal`` when present, else a few generated docs; the index is built
first, untimed), and ``diagnose`` of a 10 MB log. Targets (issue 20): search and
ask --offline < 1 s CPU and < 200 MB; diagnose of 10 MB < 0.3 s CPU.
The best of ``--runs`` runs is printed.

``ask --offline, fresh RLMEDIC_HOME`` is the first answer after an install: each run gets an
empty data dir, so it builds the index of the built-in cards first (from their shipped vectors,
knowledge/prebuilt.py). Target (issue 30): < 5 s; it took ~13 s of CPU (37 s wall on a busy
2-core machine) when every card was embedded at that moment. Its wall time is printed too.
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

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
ENV = os.environ | {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False", "TOKENIZERS_PARALLELISM": "false",
}
RLMEDIC = [sys.executable, "-m", "rlmedic"]


def measure(cmd: list[str], runs: int, env: dict[str, str], fresh_home: Path | None = None) -> tuple[float, float, float]:
    """Best (CPU seconds, peak RSS MB, wall seconds) of ``runs`` fresh processes.

    ``fresh_home``: each run gets a new empty ``RLMEDIC_HOME`` under it (a fresh install's first command).
    """
    best_cpu, best_rss, best_wall = float("inf"), float("inf"), float("inf")
    for run in range(runs):
        if fresh_home is not None:
            env = env | {"RLMEDIC_HOME": str(fresh_home / f"home{run}")}
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
        best_wall = min(best_wall, time.perf_counter() - start)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.returncode not in (0, 1):  # diagnose exits 1 when it finds a problem
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-500:]}")
        best_cpu = min(best_cpu, usage.ru_utime + usage.ru_stime)
        best_rss = min(best_rss, usage.ru_maxrss / 1024)
    return best_cpu, best_rss, best_wall


def _docs(arg: str | None, tmp: Path) -> Path:
    if arg:
        return Path(arg)
    if (SHARED / "corpus" / "areal").is_dir():
        return SHARED / "corpus" / "areal"
    root = tmp / "docs"
    root.mkdir()
    for i in range(40):
        (root / f"doc{i}.md").write_text(
            f"# Guide {i}\n\n## Memory {i}\n\nLower mem_fraction_static when SGLang runs out of memory ({i}).\n\n"
            f"## Network {i}\n\nA NCCL watchdog timeout means a rank never joined collective {i}.\n"
        )
    return root


def _log(tmp: Path, mb: int = 10) -> Path:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from logscan import write_log  # the same realistic synthetic log as the scan benchmark

    path = tmp / "train.log"
    write_log(path, mb * 1024 * 1024)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", help="docs to index (default: ../shared/corpus/areal or generated)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlmedic-cold-") as t:
        tmp = Path(t)
        env = ENV | {"RLMEDIC_HOME": str(tmp / "home")}
        index = tmp / "index"
        subprocess.run([*RLMEDIC, "index", "--index-dir", str(index), str(_docs(args.docs, tmp))], env=env, check=True,
                       capture_output=True)
        log = _log(tmp)
        rows = [
            ("python -c pass (anchor)", [sys.executable, "-c", "pass"], None),
            ("rlmedic --help (anchor)", [*RLMEDIC, "--help"], None),
            ("rlmedic search", [*RLMEDIC, "search", "--index-dir", str(index), "CUDA out of memory during weight update"],
             (1.0, 200)),
            ("rlmedic ask --offline", [*RLMEDIC, "ask", "--offline", "--index-dir", str(index),
                                       "NCCL watchdog timeout after the weight update"], (1.0, 200)),
            ("rlmedic ask --offline, fresh RLMEDIC_HOME", [*RLMEDIC, "ask", "--offline",
                                                          "SGLang runs out of memory during rollout"], (5.0, None)),
            ("rlmedic diagnose 10 MB (first run)", [*RLMEDIC, "diagnose", "--json", str(log)], None),
            ("rlmedic diagnose 10 MB", [*RLMEDIC, "diagnose", "--json", str(log)], (0.3, None)),
        ]
        anchor = None
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (CPU time grows on a busy machine too)")
        print(f"{'command':42} {'CPU s':>7} {'wall s':>7} {'RSS MB':>7} {'x --help':>9}  target")
        for name, cmd, target in rows:
            runs = 1 if "first run" in name else args.runs
            fresh = tmp / "fresh" if "fresh" in name else None
            cpu, rss, wall = measure(cmd, runs, env, fresh)
            if name.startswith("rlmedic --help"):
                anchor = cpu
            ratio = f"{cpu / anchor:8.1f}x" if anchor else " " * 9
            goal = ""
            if target:
                ok = cpu < target[0] and (target[1] is None or rss < target[1])
                goal = f"< {target[0]} s" + (f", < {target[1]} MB" if target[1] else "") + ("  ok" if ok else "  MISSED")
            print(f"{name:42} {cpu:7.2f} {wall:7.2f} {rss:7.0f} {ratio}  {goal}")


if __name__ == "__main__":
    main()
