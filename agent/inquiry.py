"""The one object that travels down the answer path: what was asked, with what, in which thread.

Front doors (``ask``, ``chat``, the web app, Slack, ``eval``) build an :class:`Inquiry` through
their :class:`~rlmedic.agent.session.Session`; the engine, the offline engine, the LLM loop and
composition all read it instead of a dozen loose parameters. It is frozen: a step that needs a
variant (the attached logs' text read once) makes a new one with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence


@dataclass(frozen=True)
class Inquiry:
    """A question and everything it is asked with.

    ``attachments`` are the files and folders the tools may read; ``context`` is the registry's
    ToolContext (roots, caps, deadline); ``knowledge`` the knowledge base (None: the context's);
    ``earlier`` the evidence earlier turns of the thread gathered; ``history`` the earlier turns
    (question, summary, category); ``texts`` the attached logs' text (head and tail), read once
    for known-issue matching and versions (None: not read yet).
    """

    question: str
    attachments: tuple[Path, ...] = ()
    context: Any = None
    knowledge: Any = None
    earlier: tuple[Any, ...] = ()
    history: tuple[dict[str, Any], ...] = ()
    texts: tuple[str, ...] | None = None

    @classmethod
    def of(cls, question: str, *, attachments: Sequence[Path | str] = (), context: Any = None, knowledge: Any = None,
           earlier: Sequence[Any] = (), history: Sequence[dict[str, Any]] = (),
           texts: Sequence[str] | None = None) -> Inquiry:
        """An inquiry from plain arguments (lists become tuples; ``None`` evidence is dropped)."""
        return cls(question=question, attachments=tuple(Path(p) for p in attachments), context=context,
                   knowledge=knowledge, earlier=tuple(e for e in earlier if e is not None),
                   history=tuple(dict(h) for h in history), texts=None if texts is None else tuple(texts))

    @property
    def follow_up(self) -> bool:
        """A later question of a thread (an earlier turn exists)."""
        return bool(self.history)

    def kb(self) -> Any:
        """The knowledge base: the one given, else the context's (opened lazily), else None."""
        if self.knowledge is not None:
            return self.knowledge
        if self.context is not None:
            try:
                return self.context.knowledge()
            except Exception:  # noqa: BLE001 - no index: the answer goes on without documents and cards
                return None
        return None

    def with_texts(self) -> Inquiry:
        """This inquiry with the attached logs' text read (once; through the context's confinement)."""
        if self.texts is not None:
            return self
        from rlmedic.agent.investigate import attachment_texts

        return dataclasses.replace(self, texts=tuple(attachment_texts(list(self.attachments), self.context)))
