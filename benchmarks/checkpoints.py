"""Benchmark: ``rlmedic checkpoints`` on a tree of many step folders, CPU time and peak RSS, start-up included.

Run: ``python benchmarks/checkpoints.py [--folders 100000] [--dir /tmp/x] [--keep]``
     ``python benchmarks/checkpoints.py --empty [--folders 100000] [--trials 1]``

``--empty`` (issue 31) writes step folders with no file inside, spread over ``--trials``
trials (100,000 in one trial, or 20,000 across ten): the report must summarise them in
one finding, not one per folder; target < 3 s and < 300 MB.

Writes an AReaL saver tree of ``--folders`` step folders (config.json + model.safetensors
each: the files a real save checks) and runs ``rlmedic checkpoints --json`` on it as a
fresh process; the anchor is ``find ROOT -type f | wc -l`` (a walk that lists every file,
no checks) and ``rlmedic --help`` in the same run; the ratio to ``find``'s CPU is printed, as
absolute seconds move with the machine's load. ``rlmedic checkpoints`` runs twice: ``--json``
and the text report. Target (issue 20): 100,000 folders in < 5 s and < 200 MB. The run fails
when the plan does not resume from the newest step.
"""

from __future__ import annotations

# Child processes write and reuse bytecode (.pyc) as on any installed copy; a shell that sets
# PYTHONDONTWRITEBYTECODE (some containers do) would make every cold run recompile rlmedic's modules.
import os as _os

_os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def make_tree(root: str, folders: int, *, empty: bool = False, trials: int = 1) -> str:
    per = -(-folders // trials)
    for t in range(trials):
        base = os.path.join(root, "checkpoints", "root", "exp", "trial" if trials == 1 else f"trial{t}", "default")
        os.makedirs(base, exist_ok=True)
        for step in range(1, min(per, folders - t * per) + 1):
            d = os.path.join(base, f"epoch0epochstep{step}globalstep{step}")
            os.mkdir(d)
            if not empty:
                _fill(d)
    return root


def _fill(d: str) -> None:
    with open(os.path.join(d, "config.json"), "w") as fh:
        fh.write('{"model_type": "qwen2"}')
    with open(os.path.join(d, "model.safetensors"), "wb") as fh:
        fh.write(b"\x02" * 64)


def run(cmd: list[str] | str, shell: bool = False) -> tuple[float, float, float, str]:
    """(CPU s, wall s, peak RSS MB, stdout) of a fresh process and the children it waited for."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, shell=shell)
    out = proc.stdout.read().decode() if proc.stdout else ""
    _pid, _status, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - t, usage.ru_maxrss / 1024, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folders", type=int, default=100_000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true", help="reuse/keep the generated tree")
    ap.add_argument("--empty", action="store_true", help="step folders with no file inside (issue 31)")
    ap.add_argument("--trials", type=int, default=1, help="spread the folders over this many trials")
    args = ap.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="rlmedic-ckpt-")
    if not (args.keep and os.path.isdir(os.path.join(root, "checkpoints"))):
        t = time.perf_counter()
        make_tree(root, args.folders, empty=args.empty, trials=args.trials)
        print(f"wrote {args.folders} step folders under {root} in {time.perf_counter() - t:.0f} s")
    run(f"find {root} -type f | wc -l", shell=True)  # warm-up: the first walk of a tree pays for a cold dentry cache
    rows = [("find -type f | wc -l (anchor)", run(f"find {root} -type f | wc -l", shell=True)),
            ("rlmedic --help (anchor)", run([sys.executable, "-m", "rlmedic", "--help"])),
            ("rlmedic checkpoints (text)", run([sys.executable, "-m", "rlmedic", "checkpoints", root])),
            ("rlmedic checkpoints --json", run([sys.executable, "-m", "rlmedic", "checkpoints", "--json", root]))]
    anchor = rows[0][1][0]
    print(f"{'command':32} {'CPU s':>7} {'/find':>6} {'wall s':>7} {'RSS MB':>7}   (load average {os.getloadavg()[0]:.1f})")
    for name, (cpu, wall, rss, _out) in rows:
        print(f"{name:32} {cpu:7.2f} {cpu / anchor if anchor else 0:6.2f} {wall:7.2f} {rss:7.0f}")
    report = json.loads(rows[-1][1][3])
    cpu, rss = max(r[1][0] for r in rows[2:]), max(r[1][2] for r in rows[2:])
    if not args.keep and not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    if args.empty:
        summary = [i for i in report["issues"] if i["id"] == "empty-step-folders"]
        ok = cpu < 3 and rss < 300
        print(f"{len(report['issues'])} findings, {report['empty_step_folders']} empty step folders summarised in "
              f"{len(summary)}: {summary[0]['summary'][:90] if summary else '-'}...; "
              f"target < 3 s and < 300 MB: {'ok' if ok else 'MISSED'}")
        return 0 if len(summary) == 1 and report["empty_step_folders"] == args.folders else 1
    step = (report["plan"]["resume_from"] or {}).get("step")
    per = -(-args.folders // args.trials)
    print(f"{report['all_checkpoints']} checkpoints, {len(report['checkpoints'])} listed; plan resumes from step {step}; "
          f"target < 5 s and < 200 MB: {'ok' if cpu < 5 and rss < 200 else 'MISSED'}")
    return 0 if step == per else 1


if __name__ == "__main__":
    sys.exit(main())
