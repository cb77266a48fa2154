"""One conversation: its thread id, its attachments (= its readable roots), its engine choice.

The terminal chat, the web app and Slack each hold one :class:`Conversation` per user
session or thread and call :meth:`Conversation.ask`, which yields the engine's events
(tool steps, text, notices, the final :class:`~rlmedic.agent.events.Answer`). Front doors
render those events and nothing else.
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rlmedic.agent.events import Answer, Event, Final
from rlmedic.errors import UserError


@dataclass
class Turn:
    """A question and the answer it got (for /save and the web transcript)."""

    question: str
    answer: Answer | None = None
    attachments: list[str] = field(default_factory=list)


class Conversation:
    """Attachments, thread id and engine settings of one chat; ``ask`` runs one question.

    ``roots`` are extra folders the tools may read besides the attachments (the web app
    passes its session upload folder, Slack its thread folder); ``env_roots`` adds
    ``RLMEDIC_ALLOWED_ROOTS`` (the terminal does, servers do not).
    """

    def __init__(self, *, thread_id: str | None = None, offline: bool = False, config: Any = None,
                 index_dir: str | os.PathLike[str] | None = None, roots: list[Path] | None = None,
                 env_roots: bool = True, kb: Any = None, deadline_s: float | None = 300) -> None:
        self.thread_id = thread_id or f"chat-{uuid.uuid4().hex[:12]}"
        self.offline = offline
        self.config = config
        self.index_dir = index_dir
        self.roots = list(roots or [])
        self.env_roots = env_roots
        self.deadline_s = deadline_s
        self.attachments: list[Path] = []
        self.turns: list[Turn] = []
        self._kb = kb

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

    def detach(self, *paths: str | os.PathLike[str]) -> list[Path]:
        """Drop the named attachments, or all of them when none is named."""
        if not paths:
            dropped, self.attachments = self.attachments, []
            return dropped
        wanted = {Path(p).expanduser().resolve() for p in paths}
        dropped = [p for p in self.attachments if p in wanted]
        self.attachments = [p for p in self.attachments if p not in wanted]
        return dropped

    def reset(self) -> None:
        """Forget the history and start a new thread (attachments stay)."""
        self.thread_id = f"chat-{uuid.uuid4().hex[:12]}"
        self.turns = []

    # ------------------------------------------------------------------ asking

    def knowledge(self) -> Any:
        if self._kb is None:
            from rlmedic.knowledge.index import KnowledgeBase

            self._kb = KnowledgeBase(self.index_dir)
        return self._kb

    def context(self, cancel: threading.Event | None = None) -> Any:
        from rlmedic.registry import ToolContext

        roots = [*self.roots, *self.attachments]
        ctx = ToolContext.for_roots(roots, env_roots=self.env_roots, deadline_s=self.deadline_s,
                                    index_dir=self.index_dir, cancel=cancel)
        ctx._knowledge = self.knowledge()
        return ctx

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> Iterator[Event]:
        """The engine's events for ``question``; the last one is ``Final`` (kept in :attr:`turns`)."""
        from rlmedic.agent.engine import answer_events

        question = question.strip()
        if not question:
            raise UserError("empty question")
        turn = Turn(question, attachments=[str(p) for p in self.attachments])
        self.turns.append(turn)
        for event in answer_events(question, attachments=list(self.attachments), ctx=self.context(cancel),
                                   offline=self.offline, config=self.config, thread_id=self.thread_id,
                                   kb=self.knowledge()):
            if isinstance(event, Final):
                turn.answer = event.answer
            yield event
            if cancel is not None and cancel.is_set():
                return

    def to_markdown(self) -> str:
        """The conversation as Markdown (``/save``)."""
        from rlmedic.ui.render import answer_markdown

        parts = [f"# rlmedic conversation {self.thread_id}\n"]
        for turn in self.turns:
            parts.append(f"## Q: {turn.question}\n")
            if turn.attachments:
                parts.append("Attached: " + ", ".join(f"`{a}`" for a in turn.attachments) + "\n")
            parts.append(answer_markdown(turn.answer) if turn.answer else "_(no answer: stopped)_\n")
        return "\n".join(parts)
