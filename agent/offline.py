"""The offline engine: investigate, then compose, with no model at all.

Same events and :class:`~rlmedic.agent.events.Answer` as the LLM loop. Investigation
(:mod:`rlmedic.agent.investigate`) runs the tools the attachments call for and diagnoses
the question's own text, all through the registry; composition
(:mod:`rlmedic.agent.compose`) writes the answer from that evidence, the evidence earlier
turns of the session gathered, and the knowledge base.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Sequence

from rlmedic.agent.events import Answer, Event, Final, Notice, TextDelta
from rlmedic.agent.inquiry import Inquiry


def gather(inq: Inquiry, *, results: list[Any] | None = None, call: Callable[..., Any] | None = None,
           gathered: list[Any] | None = None) -> Iterator[Event | tuple[list[Any], list[Any]]]:
    """Run what the inquiry needs; yields tool events, then one ``(evidence, fresh)`` pair last.

    ``results`` are tool results this run already has (the LLM loop's, reused); calls already made in
    earlier turns (``inq.earlier``) are not repeated. The new evidence is appended to ``gathered``.
    """
    from rlmedic.agent.investigate import investigate, question_evidence

    results = results if results is not None else []
    yield from investigate(inq.question, attachments=list(inq.attachments), ctx=inq.context, results=results,
                           call=call, known=list(inq.earlier))
    pasted = question_evidence(inq.question, inq.context)
    new = [r.evidence for r in results if r.ok and getattr(r, "evidence", None) is not None]
    fresh = ([pasted] if pasted is not None else []) + new
    seen = {e.call for e in new}
    evidence = fresh + [e for e in inq.earlier if e.call not in seen]
    if gathered is not None:
        gathered += fresh
    yield evidence, fresh


def run_offline(inq: Inquiry, *, notices: Sequence[str] = (), results: list[Any] | None = None,
                call: Callable[..., Any] | None = None, gathered: list[Any] | None = None) -> Iterator[Event]:
    """The offline answer as an event stream (see :func:`gather` for ``results``, ``call``, ``gathered``)."""
    from rlmedic.agent.compose import compose

    for text in notices:
        yield Notice(text)
    results = list(results or [])
    evidence: list[Any] = []
    fresh: list[Any] = []
    for item in gather(inq, results=results, call=call, gathered=gathered):
        if isinstance(item, tuple):
            evidence, fresh = item
        else:
            yield item
    if inq.knowledge is None and inq.context is not None:
        inq = dataclasses.replace(inq, knowledge=inq.kb())
    answer = compose(inq.with_texts(), evidence, fresh=fresh)
    answer.notices = list(notices)
    # README's contract: {"name", "args", "ok"} (the registry kept the arguments, redacted)
    answer.tool_calls = [{"name": r.name, "args": dict(getattr(r, "arguments", None) or {}), "ok": r.ok}
                         for r in results]
    yield TextDelta(answer.answer)
    yield Final(answer)


def answer_offline(question: str | Inquiry, kb: Any = None, *, attachments: Sequence[Any] = (), ctx: Any = None,
                   notices: Sequence[str] = ()) -> Answer:
    """The offline answer, events drained (for callers that want only the result)."""
    from rlmedic.agent.events import final_answer

    inq = question if isinstance(question, Inquiry) else Inquiry.of(question, attachments=attachments, context=ctx,
                                                                     knowledge=kb)
    return final_answer(run_offline(inq, notices=notices))
