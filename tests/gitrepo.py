"""Real git repositories for tests: ``git init``, files, commits with fixed dates, tags.

A framework's history in miniature (PR-style subjects that touch known functions, release
tags), made with the real ``git`` so the code that reads clones reads exactly what it will
read in a user's clone.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


class GitRepo:
    def __init__(self, path: Path, origin: str = "") -> None:
        self.path = path
        self.n = 0
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        if origin:
            self.git("remote", "add", "origin", origin)

    def git(self, *args: str) -> str:
        day = 1 + self.n
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
               "GIT_AUTHOR_DATE": f"2025-03-{day:02d}T12:00:00Z", "GIT_COMMITTER_DATE": f"2025-03-{day:02d}T12:00:00Z",
               "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
        out = subprocess.run(["git", "-C", str(self.path), *args], env=env, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def write(self, rel: str, text: str) -> None:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def commit(self, subject: str, files: dict[str, str], body: str = "") -> str:
        for rel, text in files.items():
            self.write(rel, text)
        self.git("add", *files)
        self.n += 1
        self.git("commit", "-q", "-m", subject + (f"\n\n{body}" if body else ""))
        return self.git("rev-parse", "HEAD")

    def tag(self, name: str, annotated: bool = False) -> None:
        if annotated:
            self.git("tag", "-a", name, "-m", name)
        else:
            self.git("tag", name)
