"""The offline engine: investigate, then compose, with no model at all.

Same events and :class:`~rlmedic.agent.events.Answer` as the LLM loop. Investigation
(:mod:`rlmedic.agent.investigate`) runs the tools the attachments call for and diagnoses
the question's own text, all through the registry; composition
(:mod:`rlmedic.agent.compose`) writes the answer from that evidence, the evidence earlier
turns of the session gathered, and the knowledge base.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rlmedic.agent.events import Answer, Event, Final, Notice, TextDelta


def run_offline(question: str, *, attachments: Sequence[Path] = (), ctx: Any = None, kb: Any = None,
                notices: Sequence[str] = (), results: list[Any] | None = None,
                call: Callable[..., Any] | None = None, earlier: Sequence[Any] = (),
                history: Sequence[dict[str, Any]] = (), gathered: list[Any] | None = None) -> Iterator[Event]:
    """The offline answer as an event stream.

    ``results`` are tool results this run already has (the LLM loop's, reused), ``earlier`` the
    evidence of earlier turns (calls already made are not repeated), ``history`` the earlier
    turns; the new evidence is appended to ``gathered`` for the session to keep.
    """
    from rlmedic.agent.compose import compose
    from rlmedic.agent.investigate import attachment_texts, investigate, question_evidence

    for text in notices:
        yield Notice(text)
    results = list(results or [])
    earlier = [e for e in earlier if e is not None]
    yield from investigate(question, attachments=attachments, ctx=ctx, results=results, call=call,
                           known=earlier)
    pasted = question_evidence(question, ctx)
    new = [r.evidence for r in results if r.ok and getattr(r, "evidence", None) is not None]
    fresh = {e.call for e in new}
    evidence = ([pasted] if pasted is not None else []) + new + [e for e in earlier if e.call not in fresh]
    if gathered is not None:
        gathered += ([pasted] if pasted is not None else []) + new
    if kb is None and ctx is not None:
        kb = ctx.knowledge()
    answer = compose(question, evidence, kb, history=history, texts=attachment_texts(attachments, ctx))
    answer.notices = list(notices)
    # README's contract: {"name", "args", "ok"} (the registry kept the arguments, redacted)
    answer.tool_calls = [{"name": r.name, "args": dict(getattr(r, "arguments", None) or {}), "ok": r.ok}
                         for r in results]
    yield TextDelta(answer.answer)
    yield Final(answer)


def answer_offline(question: str, kb: Any = None, *, attachments: Sequence[Path] = (), ctx: Any = None,
                   notices: Sequence[str] = ()) -> Answer:
    """The offline answer, events drained (for callers that want only the result)."""
    from rlmedic.agent.events import final_answer

    return final_answer(run_offline(question, attachments=attachments, ctx=ctx, kb=kb, notices=notices))
