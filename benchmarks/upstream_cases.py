"""Build the real (traceback, fixing commit) cases for the upstream-fix benchmark from public git history.

Usage: python benchmarks/upstream_cases.py verl-project/verl=/path/to/verl.git [...] [--out tests/data/upstream_cases.jsonl]

A case is a fix commit (a fix-like subject) whose merged PR description, kept in the squash
commit's body, shows the failure: a traceback's ``File ..., line N, in f`` lines and its final
exception line, or at least an exception line. Only facts are stored: repository, PR, commit,
the traceback lines, the user's version (the last release before the fix's first release; the
newest release when the fix is unreleased). The split (dev or heldout) is a hash of the commit
sha, decided before anything is tuned: a fifth goes to heldout.

Cases taken from issue threads (an issue's traceback and the PR that closed it) are appended by
hand with ``"source": "issue OWNER/REPO#N"``; this script keeps them when it rewrites the file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "data" / "upstream_cases.jsonl"
FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
EXC = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): (.+)$")
MAX_LINES = 40


def split_of(sha: str) -> str:
    """heldout for a fifth of the commits, by a hash of the sha (fixed before any tuning)."""
    return "heldout" if int(hashlib.sha256(sha.encode()).hexdigest()[:8], 16) % 5 == 0 else "dev"


def traceback_lines(body: str) -> list[str]:
    """The last traceback's frame lines and its exception line (or just the first exception line)."""
    lines = body.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if EXC.match(lines[i]):
            frames = []
            for line in lines[max(0, i - 200):i]:
                if "Traceback (most recent call last)" in line:
                    frames = []
                m = FRAME.match(line)
                if m:
                    frames.append(f'  File "{m.group(1)}", line {m.group(2)}, in {m.group(3)}')
            exc = EXC.match(lines[i])
            return (frames[-MAX_LINES:] + [f"{exc.group(1)}: {exc.group(2).strip()[:300]}"])
    return []


def git(path: str, *args: str) -> str:
    return subprocess.run(["git", "-C", path, *args], capture_output=True, text=True, check=True).stdout


def cases_of(repo: str, path: str) -> list[dict]:
    from rlmedic.knowledge.history import FIX_WORDS, first_releases, pr_number, release_tags, _version_order

    tags = release_tags(Path(path))
    first = first_releases(Path(path), tags)
    ordered = _version_order(tags)
    out = []
    log = git(path, "log", "HEAD", "--format=%x1e%H%x1f%s%x1f%b", "-E", "-i",
              "--grep=Traceback \\(most recent call last\\)|[A-Za-z]+(Error|Exception): ")
    for record in log.split("\x1e")[1:]:
        sha, subject, body = (record.split("\x1f", 2) + ["", ""])[:3]
        if not FIX_WORDS.search(subject):
            continue
        tb = traceback_lines(body)
        if not tb:
            continue
        release = first.get(sha, "")
        if release:
            i = ordered.index(release)
            version = ordered[i - 1] if i > 0 else ""
        else:
            version = ordered[-1] if ordered else ""
        if not version:
            continue
        out.append({"id": f"{repo}@{sha[:10]}", "repo": repo, "pr": pr_number(subject.strip()), "commit": sha,
                    "version": version.lstrip("vV"), "package": repo.rsplit("/", 1)[-1].lower(),
                    "traceback": tb, "frames": sum(1 for line in tb if line.lstrip().startswith("File ")),
                    "source": "commit body", "split": split_of(sha)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors", nargs="+", metavar="OWNER/REPO=PATH")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    kept = []
    if args.out.exists():
        kept = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
        kept = [c for c in kept if c.get("source") != "commit body"]
    cases = []
    for spec in args.mirrors:
        repo, _, path = spec.partition("=")
        cases += cases_of(repo, path)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as fh:
        for case in cases + kept:
            fh.write(json.dumps(case, ensure_ascii=False) + "\n")
    splits = {s: sum(1 for c in cases + kept if c["split"] == s) for s in ("dev", "heldout")}
    print(f"{len(cases)} case(s) from commit bodies, {len(kept)} kept from issues -> {args.out} {splits}", file=sys.stderr)


if __name__ == "__main__":
    main()
