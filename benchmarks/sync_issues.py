"""Benchmark: ``rlmedic sync-issues`` of 10,000 threads from a GitHub API on loopback: time and peak memory.

Usage: python benchmarks/sync_issues.py [--threads 10000] [--dir /tmp/x] [--keep]

Serves ``--threads`` closed issues (the synthetic threads of ``benchmarks/issues.py``: a problem,
error lines, a maintainer's reply and a merged fix PR each) from ``tests/fake_github.py``, the
loopback server that speaks GitHub's paging, ETag and rate-limit protocol, 100 issues a page.
Then runs the real command line as a fresh process, start-up included:

1. ``sync-issues --export FILE``: the REST walk alone (list pages + one timeline per issue), the anchor;
2. ``sync-issues`` into a new index: the walk, filtering, shaping, embedding and storing;
3. ``sync-issues`` again with nothing changed (conditional requests only, nothing embedded).

Prints wall and CPU seconds and the peak RSS of each process (``os.wait4``). The fake server runs
in this process, so its CPU is not counted. Target: 10,000 threads in under 10 minutes and 500 MB.
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
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT / "tests"), str(REPO_ROOT / "benchmarks")]

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False",
       "TOKENIZERS_PARALLELISM": "false"}
TRACKER = "acme/trainer"


def serve(fake, threads: list[dict]) -> None:
    """The export-format threads as GitHub issues and timelines."""
    for t in threads:
        body = t["problem"]
        if t["error_lines"]:
            body += "\n```\nTraceback (most recent call last):\n" + "\n".join(t["error_lines"]) + "\n```\n"
        reply = t["resolution"][0]
        pr = t["fix_prs"][0]
        timeline = [
            {"event": "commented", "user": {"login": "maintainer"}, "actor": {"login": "maintainer"},
             "author_association": reply["association"], "created_at": reply["created_at"], "body": reply["body"], "reactions": {}},
            {"event": "cross-referenced", "created_at": pr["merged_at"], "source": {"type": "issue", "issue": {
                "number": pr["number"], "title": pr["title"], "html_url": pr["url"], "repository": {"full_name": TRACKER},
                "pull_request": {"html_url": pr["url"], "merged_at": pr["merged_at"]}}}},
            {"event": "closed", "commit_id": "", "created_at": t["closed_at"]},
        ]
        fake.add_issue(TRACKER, t["number"], title=t["title"], body=body, labels=[{"name": n} for n in t["labels"]],
                       updated_at=t["updated_at"], closed_at=t["closed_at"], html_url=f"https://github.com/{TRACKER}/issues/{t['number']}",
                       comments=1, timeline=timeline)


def run(cmd: list[str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, stdout) of one fresh process."""
    out_file = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out_file, stderr=subprocess.PIPE, env=ENV)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    out_file.seek(0)
    out = out_file.read().decode()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def main(argv: list[str] | None = None) -> int:
    from fake_github import FakeGitHub, FakeGitHubServer
    from issues import synthetic_threads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=10_000)
    ap.add_argument("--dir", default=None, help="work folder (default: a temp dir, removed after)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="rlmedic-sync-"))
    index, export = work / "index", work / "threads.jsonl"
    shutil.rmtree(index, ignore_errors=True)
    export.unlink(missing_ok=True)
    fake = FakeGitHub(page_size=100)
    serve(fake, synthetic_threads(args.threads, seed=3))
    rl = [sys.executable, "-m", "rlmedic", "sync-issues", TRACKER, "--max", str(args.threads * 2), "--json"]
    print(f"{args.threads} closed issues served on loopback; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    rows = []
    with FakeGitHubServer(fake) as running:
        url = ["--api-url", running.url]
        rows.append(("--export (REST walk only; anchor)", *run([*rl, *url, "--export", str(export)])))
        rows.append(("sync into a new index", *run([*rl, *url, "--index-dir", str(index)])))
        requests_before = len(fake.log)
        rows.append(("sync again, nothing changed", *run([*rl, *url, "--index-dir", str(index)])))
        conditional = sum(r.conditional for r in fake.log[requests_before:])
    synced = json.loads(rows[1][4])
    again = json.loads(rows[2][4])
    print()
    print("Each a fresh process (start-up and model load included).")
    print(f"{'run':38s} {'wall s':>8s} {'CPU s':>8s} {'peak MB':>8s}")
    for label, wall, cpu, rss, _out in rows:
        print(f"{label:38s} {wall:8.1f} {cpu:8.1f} {rss:8.0f}")
    print(f"kept {synced.get('kept')} of {synced.get('listed')} listed; embedded {synced.get('embedded')}; "
          f"{synced.get('kept', 0) / rows[1][1]:.0f} threads/s wall; targets: < 600 s and < 500 MB")
    print(f"re-sync: embedded {again.get('embedded')}; {conditional} of {len(fake.log) - requests_before} requests conditional")
    if not (args.keep or args.dir):
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
