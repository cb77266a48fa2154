"""Conversations that outlive a process: one folder per thread in the data dir.

A chat front door (the Slack bot) keys a conversation by its thread (``channel:thread_ts``).
The thread's folder holds the files attached in it (``files/``, the ONLY root its tools
may read) and a small JSON history of the questions asked and what was found, so a
follow-up, also after a restart, is answered with the earlier context: the LLM loop has
its own memory on disk (``conversations.sqlite``, keyed by the same thread id), and the
offline engine gets the earlier questions and every file of the thread again.
History entries are redacted before they are written and the history is capped.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from rlmedic.redact import redact
from rlmedic.settings import data_dir

#: Entries kept per thread, and characters kept of each question.
MAX_ENTRIES = 20
MAX_QUESTION_CHARS = 4000
#: Earlier questions prepended to a follow-up (the most recent ones).
CONTEXT_QUESTIONS = 3


def _safe(thread_id: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", thread_id).strip("._") or "thread"
    return name[:120]


class ThreadStore:
    """Folders and histories of threads under ``<data dir>/threads``."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root else data_dir() / "threads"
        self._lock = threading.Lock()

    def known(self, thread_id: str) -> bool:
        """Whether this thread has a conversation already (a follow-up needs no new mention)."""
        return (self.root / _safe(thread_id) / "history.json").is_file()

    def folder(self, thread_id: str) -> Path:
        path = self.root / _safe(thread_id)
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def files_dir(self, thread_id: str) -> Path:
        """Where the thread's attachments are saved (created private, 0700)."""
        path = self.folder(thread_id) / "files"
        path.mkdir(exist_ok=True, mode=0o700)
        return path

    def attachments(self, thread_id: str) -> list[Path]:
        """Every file attached in the thread so far, oldest first."""
        files = [p for p in self.files_dir(thread_id).iterdir() if p.is_file() and not p.name.startswith(".")]
        return sorted(files, key=lambda p: (p.stat().st_mtime, p.name))

    def history(self, thread_id: str) -> list[dict[str, Any]]:
        path = self.folder(thread_id) / "history.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return data if isinstance(data, list) else []

    def record(self, thread_id: str, question: str, *, attachments: list[str], summary: str = "",
               category: str = "", diff_sha: str = "") -> None:
        with self._lock:
            entries = self.history(thread_id)
            entries.append({"question": redact(question[:MAX_QUESTION_CHARS]), "attachments": attachments,
                            "summary": redact(summary[:500]), "category": category, "diff_sha": diff_sha})
            path = self.folder(thread_id) / "history.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(entries[-MAX_ENTRIES:], ensure_ascii=False, indent=1), encoding="utf-8")
            os.replace(tmp, path)

    def with_context(self, thread_id: str, question: str) -> str:
        """``question`` preceded by the thread's recent questions (for a follow-up).

        Only what users wrote is repeated (pasted errors in it are evidence again); the bot's
        own earlier findings are not, so they are never taken as new evidence."""
        entries = self.history(thread_id)[-CONTEXT_QUESTIONS:]
        if not entries:
            return question
        lines = ["Earlier in this thread:"] + [f"- asked: {e.get('question', '')}" for e in entries]
        return "\n".join(lines) + f"\n\nFollow-up question: {question}"

    def diff_posted(self, thread_id: str, diff_sha: str) -> bool:
        """Whether this exact config diff was already posted in the thread (a follow-up does not repeat it)."""
        return any(e.get("diff_sha") == diff_sha for e in self.history(thread_id))
