"""The one answer shape: the events both engines emit and the structured ``Answer``.

The LLM loop and the offline engine both produce a stream of these events and end in
one :class:`Answer`. Front doors (terminal, JSON, web, Slack) render events; none parses
prose. Every event and the answer have ``to_dict()`` for JSON output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from rlmedic.types import Citation, Fix, cite_dicts


@dataclass
class ToolStarted:
    """A tool call begins (``id`` pairs it with its :class:`ToolFinished`)."""

    id: str
    name: str
    args: dict[str, Any]
    kind: str = "tool_started"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "id": self.id, "name": self.name, "args": self.args}


@dataclass
class ToolFinished:
    """A tool call ended; ``ok``/``data``/``error`` come from the registry's ToolResult."""

    id: str
    name: str
    ok: bool
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0
    kind: str = "tool_finished"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "id": self.id, "name": self.name, "ok": self.ok,
                "data": self.data, "error": self.error, "seconds": round(self.seconds, 4)}


@dataclass
class TextDelta:
    """A piece of the answer text, as the model streams it."""

    text: str
    kind: str = "text"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "text": self.text}


@dataclass
class Notice:
    """One line for the user about how the answer was made ("offline: model server unreachable")."""

    text: str
    kind: str = "notice"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "text": self.text}


@dataclass
class Failed:
    """The run could not produce an answer (a bug or an exhausted budget with nothing to show)."""

    error: str
    kind: str = "failed"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "error": self.error}


@dataclass
class Answer:
    """The structured end of every run, whichever engine made it."""

    answer: str  # the full text shown to the user
    engine: str = "offline"  # "llm" | "offline"
    summary: str = ""
    category: str = ""
    root_cause: str = ""
    evidence: list[str] = field(default_factory=list)  # "file:line" of the lines that back the cause
    fixes: list[Fix] = field(default_factory=list)
    config_diff: str = ""
    citations: list[Citation] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "args", "ok"}
    notices: list[str] = field(default_factory=list)
    cards: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # known issue, health, GPU and checkpoint facts, as lines
    needs: list[str] = field(default_factory=list)  # which file to attach for a better answer
    #: with a model: the answer rlmedic composes from the same evidence without it (known issue, root
    #: cause, fixes, diff, sources), shown after the model's text, so a model never leaves the user
    #: with less than the offline engine would have given
    grounded: str = ""
    #: commits in a framework's synced history that likely fixed the failure (agent/upstream.py), best first
    upstream_fixes: list[dict[str, Any]] = field(default_factory=list)
    #: the rest of the answer behind the short one (further fixes, background, related issues, more sources):
    #: ``--verbose`` in the terminal, a collapsible block on the web page, a second message in Slack
    more: str = ""

    def cite(self, citation: Citation) -> int:
        """Add ``citation`` once; its 1-based number for ``[n]`` references."""
        if citation not in self.citations:
            self.citations.append(citation)
        return self.citations.index(citation) + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "citations": cite_dicts(self.citations),
            "engine": self.engine,
            "summary": self.summary,
            "category": self.category,
            "root_cause": {"text": self.root_cause, "evidence": self.evidence},
            "fixes": [f.to_dict() for f in self.fixes],
            "config_diff": self.config_diff,
            "findings": self.findings,
            "tool_calls": self.tool_calls,
            "notices": self.notices,
            "cards": self.cards,
            "details": self.details,
            "needs": self.needs,
            "grounded": self.grounded,
            "upstream_fixes": self.upstream_fixes,
            "more": self.more,
        }


@dataclass
class Final:
    """The last event of a run: the structured answer."""

    answer: Answer
    kind: str = "final"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "answer": self.answer.to_dict()}


Event = Union[ToolStarted, ToolFinished, TextDelta, Notice, Failed, Final]


def final_answer(events: Iterator[Event]) -> Answer:
    """Drain an event stream and return its answer (raises RuntimeError on ``Failed``)."""
    answer: Answer | None = None
    for event in events:
        if isinstance(event, Final):
            answer = event.answer
        elif isinstance(event, Failed):
            raise RuntimeError(event.error)
    if answer is None:
        raise RuntimeError("the run ended without an answer")
    return answer
