"""One conversation, for every front door: ``ask``, ``chat``, ``web``, Slack and ``eval``.

A :class:`Session` holds what a follow-up needs, with or without a model:

- the **attachments** and the folders they may be read from (the confinement: only they,
  plus the front door's own folder, are readable roots; a model can never widen them);
- the **evidence** gathered so far (:class:`rlmedic.types.Evidence`, already redacted by
  the registry), so a follow-up reuses the earlier findings instead of re-reading files
  and the offline engine still knows what the first answer was about;
- the **history** of questions and what each answer concluded.

A session with a thread id is saved in the data dir (``sessions/<prefix>-<digest of the id>/session.json``,
private folders, 0600 files; its ``files/`` holds what the front door received: Slack downloads, stdin) and
loaded again by the next question on that thread, in any front door and after a restart.
The LLM loop keeps the model's own messages under the same thread id. Old threads are
pruned (by count and age), with their model memory. Everything written is redacted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rlmedic.agent.events import Answer, Event, Final, Notice, TextDelta
from rlmedic.errors import UserError
from rlmedic.redact import redact

#: Threads kept in the data dir, and how long an untouched one is kept.
MAX_THREADS = 200
MAX_AGE_S = 30 * 24 * 3600
#: Turns and evidence items kept per thread; characters kept of each question.
MAX_TURNS = 20
MAX_EVIDENCE = 24
MAX_QUESTION_CHARS = 4000


def leaving(event: Event) -> Event:
    """The front-door boundary: what leaves a session toward a user (terminal, page, Slack) is redacted
    once here, whichever engine wrote it (the model's prose included)."""
    from rlmedic.redact import redact_value

    if isinstance(event, (TextDelta, Notice)):
        event.text = redact_value(event.text)
    elif isinstance(event, Final):
        a = event.answer
        for name in ("answer", "summary", "root_cause", "config_diff", "details", "needs", "notices", "findings",
                     "grounded"):
            if hasattr(a, name):
                setattr(a, name, redact_value(getattr(a, name)))
    return event


#: Characters of the readable prefix in a thread's folder name (the digest makes it unique).
PREFIX_CHARS = 40


def folder_name(thread_id: str) -> str:
    """The folder of ``thread_id``: a readable prefix, then a digest of the exact id.

    Distinct ids never share a folder (``team/a``, ``team_a`` and ``team:a``; non-ASCII ids;
    ``.`` and ``..``; ids equal in their first characters), which the old name-only mapping
    allowed: a second thread then inherited the first one's attachments and findings.
    """
    import hashlib

    digest = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    prefix = re.sub(r"[^A-Za-z0-9._-]", "_", thread_id).strip("._-")[:PREFIX_CHARS].rstrip("._-")
    return f"{prefix}-{digest}" if prefix else digest


def _legacy_name(thread_id: str) -> str:
    """The folder name versions before the digest used (many ids to one name)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", thread_id).strip("._") or "thread"
    return name[:120]


def _read_state(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "session.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_private(path: Path, state: dict[str, Any]) -> None:
    from rlmedic.settings import private_file

    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    with private_file(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle, default=str)  # ASCII: a lone surrogate in an id survives the round trip
    os.replace(tmp, path)


class SessionStore:
    """Saved sessions under ``<data dir>/sessions``: one private folder per thread id.

    A folder saved by a version before the digest names (``sessions/team_a``) is taken over
    by the thread whose exact id it recorded in its ``session.json`` (renamed to the new
    name, its paths rewritten); for any other id the old folder is not read, so a thread
    never inherits what a colliding id left there. Unclaimed old folders are pruned by age.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        if root is None:
            from rlmedic.settings import data_dir

            root = data_dir() / "sessions"
        self.root = Path(root)
        self._lock = threading.Lock()
        self._root_private = False

    def folder(self, thread_id: str, *, create: bool = True) -> Path:
        path = self.root / folder_name(thread_id)
        if not path.exists():
            self._adopt_legacy(thread_id, path)
        if create:
            from rlmedic.settings import private_dir

            if not self._root_private:  # a sessions/ folder an older version left 0755
                private_dir(self.root)
                try:
                    os.chmod(self.root, 0o700)
                except OSError:
                    pass  # not ours to change: the thread folders below are private still
                self._root_private = True
            private_dir(path)
        return path

    def _adopt_legacy(self, thread_id: str, path: Path) -> None:
        old = self.root / _legacy_name(thread_id)
        if old == path or not old.is_dir():
            return
        state = _read_state(old)
        if state.get("thread_id") != thread_id:
            return  # another id's folder (or an unreadable one): this thread starts fresh
        try:
            os.rename(old, path)
        except OSError:
            return
        before, after = str(old), str(path)

        def moved(raw: Any) -> Any:
            text = str(raw)
            return after + text[len(before):] if text == before or text.startswith(before + os.sep) else raw

        for key in ("roots", "attachments"):
            if isinstance(state.get(key), list):
                state[key] = [moved(p) for p in state[key]]
        try:
            _write_private(path / "session.json", state)
        except OSError:
            pass

    def files_dir(self, thread_id: str) -> Path:
        """Where a front door keeps the files it received for this thread (private, 0700)."""
        path = self.folder(thread_id) / "files"
        path.mkdir(exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)
        return path

    def known(self, thread_id: str) -> bool:
        return (self.folder(thread_id, create=False) / "session.json").is_file()

    def load(self, thread_id: str) -> dict[str, Any]:
        return _read_state(self.folder(thread_id, create=False))

    def save(self, thread_id: str, state: dict[str, Any]) -> None:
        with self._lock:
            _write_private(self.folder(thread_id) / "session.json", state)
        self.prune(keep=thread_id)

    def drop(self, thread_id: str) -> None:
        """Forget a thread: its folder and the model's memory of it."""
        shutil.rmtree(self.folder(thread_id, create=False), ignore_errors=True)
        forget_model_memory(thread_id)

    def prune(self, *, keep: str = "", max_threads: int = MAX_THREADS, max_age_s: float = MAX_AGE_S) -> list[str]:
        """Drop threads older than ``max_age_s`` and the oldest beyond ``max_threads``; their ids."""
        try:
            entries = [(p.stat().st_mtime, p) for p in self.root.iterdir() if p.is_dir()]
        except OSError:
            return []
        entries.sort(reverse=True)
        now = time.time()
        dropped = []
        kept = folder_name(keep) if keep else ""
        for n, (mtime, path) in enumerate(entries):
            if path.name == kept:
                continue
            if n >= max_threads or now - mtime > max_age_s:
                recorded = _read_state(path).get("thread_id")
                thread_id = recorded if isinstance(recorded, str) and recorded else path.name
                shutil.rmtree(path, ignore_errors=True)
                if isinstance(recorded, str) and path.name in (folder_name(recorded), _legacy_name(recorded)):
                    forget_model_memory(recorded)  # the model's memory is the exact id's, not a neighbour's
                dropped.append(thread_id)
        return dropped


def forget_model_memory(thread_id: str) -> None:
    """Delete the LLM loop's checkpoints of ``thread_id`` (if that memory exists at all)."""
    from rlmedic.settings import data_dir

    path = data_dir() / "conversations.sqlite"
    if not path.is_file():
        return
    import sqlite3

    try:
        with sqlite3.connect(str(path)) as db:
            for table in ("checkpoints", "writes"):
                db.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))  # noqa: S608 - fixed names
    except sqlite3.Error:
        pass


@dataclass
class Turn:
    """A question and what its answer concluded (the full answer object while the process lives)."""

    question: str
    attachments: list[str] = field(default_factory=list)
    summary: str = ""
    category: str = ""
    engine: str = ""
    diff_sha: str = ""
    answer: Answer | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "attachments": self.attachments, "summary": self.summary,
                "category": self.category, "engine": self.engine, "diff_sha": self.diff_sha}


class Session:
    """Attachments (= readable roots), evidence so far and history of one thread; :meth:`ask` answers.

    ``roots`` are folders the tools may read besides the attachments (the web app's upload
    folder, a Slack thread's folder); ``env_roots`` adds ``RLMEDIC_ALLOWED_ROOTS`` (terminal
    front doors do, servers do not). With ``persist`` (the default when a ``thread_id`` is
    given) the session is saved after each answer and restored from the store on creation.
    """

    def __init__(self, thread_id: str | None = None, *, offline: bool = False, config: Any = None,
                 index_dir: str | os.PathLike[str] | None = None, roots: list[Path] | None = None,
                 env_roots: bool = True, kb: Any = None, deadline_s: float | None = 300,
                 store: SessionStore | None = None, persist: bool | None = None, prefix: str = "chat") -> None:
        self.persist = bool(thread_id) if persist is None else persist
        self.prefix = prefix
        self.thread_id = thread_id or f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.offline = offline
        self.config = config
        self.index_dir = index_dir
        self.roots = [Path(r) for r in roots or []]
        self.env_roots = env_roots
        self.deadline_s = deadline_s
        self.attachments: list[Path] = []
        self.evidence: list[Any] = []
        self.turns: list[Turn] = []
        self.streams: dict[str, Any] = {}
        self.notices: list[str] = []  # for the front door: e.g. "only the end of stdin was kept"
        self._tmp: str | None = None
        self._kb = kb
        self._store = store
        if self.persist:
            self._restore()

    # ------------------------------------------------------------------ storage

    @property
    def store(self) -> SessionStore:
        if self._store is None:
            self._store = SessionStore()
        return self._store

    def files_dir(self) -> Path:
        """This thread's private folder for files a front door received (a readable root)."""
        folder = self.store.files_dir(self.thread_id)
        if folder not in self.roots:
            self.roots.append(folder)
        return folder

    def _restore(self) -> None:
        from rlmedic.types import Evidence

        state = self.store.load(self.thread_id)
        if not state:
            return
        for raw in state.get("roots") or []:
            path = Path(raw)
            if path.exists() and path not in self.roots:
                self.roots.append(path)
        for raw in state.get("attachments") or []:
            path = Path(raw)
            if path.exists() and path not in self.attachments:
                self.attachments.append(path)
        for item in state.get("evidence") or []:
            try:
                self.evidence.append(Evidence.from_dict(item))
            except (TypeError, ValueError):
                continue  # written by another version: the tools run again
        turn_fields = set(Turn.__dataclass_fields__) - {"answer"}
        self.turns = [Turn(**{k: v for k, v in t.items() if k in turn_fields}) for t in state.get("turns") or []
                      if isinstance(t, dict) and t.get("question")]

    def save(self) -> None:
        if not self.persist:
            return
        self.store.save(self.thread_id, {
            "thread_id": self.thread_id,
            "saved_at": time.time(),
            "roots": [str(p) for p in self.roots],
            "attachments": [str(p) for p in self.attachments],
            "evidence": [e.to_dict() for e in self.evidence[-MAX_EVIDENCE:]],
            "turns": [t.to_dict() for t in self.turns[-MAX_TURNS:]],
        })

    # ------------------------------------------------------------------ attachments

    def attach(self, *paths: str | os.PathLike[str]) -> list[Path]:
        """Add files or folders (they become readable roots); a missing path is a :class:`UserError`."""
        added = []
        for raw in paths:
            path = Path(raw).expanduser()
            if not path.exists():
                raise UserError(f"{raw}: no such file or directory")
            resolved = path.resolve()
            if resolved not in self.attachments:
                self.attachments.append(resolved)
                added.append(resolved)
        return added

    def attach_stdin(self, stream: Any = None, cap: int | None = None) -> Path:
        """Save standard input into the session's private folder and attach it (``--attach -``)."""
        import sys

        from rlmedic.agent.attachments import STDIN_CAP_BYTES, save_stream

        folder = self.files_dir() if self.persist else self._scratch()
        path, note = save_stream(stream or sys.stdin.buffer, folder, cap or STDIN_CAP_BYTES)
        if note:
            self.notices.append(note)
        self.attach(path)
        return path

    def _scratch(self) -> Path:
        import tempfile

        if not self._tmp:
            self._tmp = tempfile.mkdtemp(prefix="rlmedic-stdin-")
            os.chmod(self._tmp, 0o700)
            self.roots.append(Path(self._tmp))
        return Path(self._tmp)

    def close(self) -> None:
        """Remove the scratch folder of an unsaved session (stdin copies)."""
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def detach(self, *paths: str | os.PathLike[str]) -> list[Path]:
        """Drop the named attachments, or all of them when none is named (their evidence goes too)."""
        if not paths:
            dropped, self.attachments = self.attachments, []
        else:
            wanted = {Path(p).expanduser().resolve() for p in paths}
            dropped = [p for p in self.attachments if p in wanted]
            self.attachments = [p for p in self.attachments if p not in wanted]
        gone = {str(p) for p in dropped}
        self.evidence = [e for e in self.evidence if not any(g in e.call for g in gone)]
        return dropped

    def reset(self) -> None:
        """Forget the history and the evidence and start a new thread (attachments stay)."""
        if self.persist:
            self.store.drop(self.thread_id)
        self.thread_id = f"{self.prefix}-{uuid.uuid4().hex[:12]}"
        self.turns = []
        self.evidence = []

    # ------------------------------------------------------------------ asking

    def knowledge(self) -> Any:
        if self._kb is None:
            from rlmedic.knowledge.index import KnowledgeBase

            self._kb = KnowledgeBase(self.index_dir)
        return self._kb

    def context(self, cancel: threading.Event | None = None) -> Any:
        """The registry's ToolContext: the roots are the attachments and the front door's folders."""
        from rlmedic.tools.registry import ToolContext

        roots = [*self.roots, *self.attachments]
        ctx = ToolContext.for_roots(roots, env_roots=self.env_roots, deadline_s=self.deadline_s,
                                    index_dir=self.index_dir, cancel=cancel)
        ctx.streams = dict(self.streams)
        ctx._knowledge = self.knowledge()
        return ctx

    def ask(self, question: str, *, cancel: threading.Event | None = None, transcript: list[Any] | None = None,
            budgets: Any = None) -> Iterator[Event]:
        """The engine's events for ``question``; the last one is ``Final``. The turn and the new
        evidence are kept (and saved for a named thread)."""
        from rlmedic.agent.engine import answer_events
        from rlmedic.agent.inquiry import Inquiry

        question = question.strip()
        if not question:
            raise UserError("empty question")
        turn = Turn(redact(question[:MAX_QUESTION_CHARS]), attachments=[str(p) for p in self.attachments])
        earlier = list(self.evidence)
        history = [t.to_dict() for t in self.turns]
        self.turns.append(turn)
        gathered: list[Any] = []
        extra = {"budgets": budgets} if budgets is not None else {}
        inquiry = Inquiry.of(question, attachments=self.attachments, context=self.context(cancel),
                             knowledge=self.knowledge(), earlier=earlier, history=history)
        for event in answer_events(inquiry, offline=self.offline, config=self.config, thread_id=self.thread_id,
                                   gathered=gathered, transcript=transcript, **extra):
            event = leaving(event)
            if isinstance(event, Final):
                self._keep(turn, event.answer, gathered)
            yield event
            if cancel is not None and cancel.is_set():
                return

    def _keep(self, turn: Turn, answer: Answer, gathered: list[Any]) -> None:
        import hashlib

        turn.answer = answer
        turn.summary = redact((answer.summary or answer.root_cause)[:500])
        turn.category = answer.category
        turn.engine = answer.engine
        diff = answer.config_diff.strip()
        turn.diff_sha = hashlib.sha256(diff.encode()).hexdigest()[:16] if diff else ""
        known = {e.call for e in self.evidence}
        for evidence in gathered:
            if evidence.call and evidence.call in known:
                self.evidence = [e for e in self.evidence if e.call != evidence.call]
            self.evidence.append(evidence)
        self.save()

    def diff_shown(self, sha: str) -> bool:
        """Whether an earlier answer in this thread already showed this config diff."""
        return bool(sha) and any(t.diff_sha == sha for t in self.turns[:-1])
