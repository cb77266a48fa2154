"""Benchmark: ``rlmedic sync-issues`` against a hostile GitHub (issue 31), time and peak RSS of each case.

Run: ``python benchmarks/hostile_github.py [--only NAME-PART] [--limit 40]``

Each row starts the fake GitHub of ``tests/fake_github.py`` on loopback with one hostile
behaviour (a looping ``Link``, a body trickling one byte a second, a 1.2 GB page, an
endless chunked body, JSON 100,000 levels deep, wrong JSON types, a 401 that echoes the
token, a link from https to http) and runs the real CLI in its own process with the
default bounds, killed at ``--limit`` seconds. Goal: each answered (exit 0) or refused
with one line (exit 2) within 10 s and 1 GB, no traceback, the token never printed,
nothing sent in clear. The trickle is refused as a stall (under 8 KB/s on average after
8 s); the whole-request deadline, 30 s by default (``RLMEDIC_GITHUB_DEADLINE_S``), bounds
a transfer that keeps its pace but never ends.
``PYTHONPATH=/old/tree`` runs an older build (how the "before" column was measured).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fake_github import FakeGitHub, FakeGitHubServer, self_signed  # noqa: E402
from hostile_cases import Case, run_case  # noqa: E402

REPO = "acme/trainer"
TOKEN = "ghp_" + "B3nchT0k3n" * 4

#: (row name, behaviour, path regex, extra CLI arguments, TLS)
ROWS = [
    ("link-loop", "loop", r"/issues$", [], False),
    ("link-loop --max 5", "loop", r"/issues$", ["--max", "5"], False),
    ("link-empty-forever", "empty_forever", r"/issues$", [], False),
    ("trickle 1 byte a second", "trickle", r"/issues$", [], False),
    ("1.2 GB page", "huge", r"/issues$", [], False),
    ("endless chunked body", "endless", r"/issues$", [], False),
    ("JSON 100,000 deep", "nested", r"/issues$", [], False),
    ("wrong types: issues", "wrong_types", r"/issues$", [], False),
    ("wrong types: timeline", "wrong_types", r"/timeline$", [], False),
    ("wrong types: releases", "wrong_types", r"/releases$", [], False),
    ("object for a list", "not_a_list", r"/issues$", [], False),
    ("401 echoes the token", "echo_auth", r"/issues$", [], False),
    ("https -> http link", "downgrade", r"/issues$", [], True),
]


def populate(fake: FakeGitHub) -> None:
    for n in range(1, 7):
        fake.add_issue(REPO, n, title=f"crash {n}", body="RuntimeError: CUDA error: an illegal memory access",
                       timeline=[{"event": "commented", "user": {"login": "lead"}, "author_association": "OWNER",
                                  "created_at": "2025-01-05T00:00:00Z", "body": "Fixed on main."}])
    for n in (8, 9):
        fake.timelines[(REPO, n)] = []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--limit", type=float, default=40.0, help="kill a run after this many seconds")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':24} {'exit':>4} {'seconds':>8} {'CPU s':>6} {'peak MB':>8}  outcome")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cert, key = self_signed(work)
        for n, (name, behaviour, path, extra, tls) in enumerate(ROWS):
            if args.only not in name:
                continue
            fake = FakeGitHub(page_size=2, trickle_s=1.0)
            populate(fake)
            fake.hostile[path] = behaviour
            with FakeGitHubServer(fake, tls=(cert, key) if tls else None) as github:
                case = Case(name, ["sync-issues", REPO, "--api-url", github.url, "--index-dir", str(work / f"i{n}"),
                                   "--export", str(work / f"x{n}.jsonl"), "--token-env", "BENCH_GH", *extra],
                            env={"BENCH_GH": TOKEN, "SSL_CERT_FILE": cert, "RLMEDIC_HOME": str(work / "home")},
                            timeout=args.limit)
                out = run_case(case, work)
                clear = [e for e in github.errors if "HTTP_REQUEST" in e]
            text = out.stdout + out.stderr
            lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
            if out.rc is None:
                outcome = f"still running at {out.seconds:.0f} s (killed)"
            elif "Traceback" in text:
                outcome = "traceback: " + text.strip().splitlines()[-1][:70]
            else:
                outcome = (lines[-1] if lines else out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "")[:110]
            if TOKEN in text:
                outcome = "TOKEN PRINTED; " + outcome
            if clear:
                outcome = f"sent {len(clear)} request(s) IN CLEAR; " + outcome
            ok = (out.rc in (0, 2) and "Traceback" not in text and TOKEN not in text and not clear
                  and out.rss_mb < 1024 and out.seconds < 10)
            bad += not ok
            print(f"{name:24} {out.rc!s:>4} {out.seconds:8.2f} {out.cpu_s:6.2f} {out.rss_mb:8.1f}  {'ok  ' if ok else 'BAD '}{outcome}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
