"""Pick the engine for one question and own the fallback: the LLM loop when a model server
answers, else the offline engine.

Front doors reach this through :class:`~rlmedic.agent.session.Session`. A server that is
down, slow or failing, or a model whose answer cannot be used (unparseable tool calls,
an exhausted budget, an empty reply), never leaves the user without an answer: the
offline engine composes one from the evidence, with one notice line saying why, reusing
every tool result the loop already has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

from rlmedic.agent.events import Event, Failed, Final
from rlmedic.agent.llm import LLMConfig, ServerUnavailable, probe, server_reason
from rlmedic.agent.loop import Agent, Budgets


def _server_error(exc: BaseException) -> str | None:
    """One line for errors that mean "the model server failed", None for anything else.

    The server's own reason (context length, no tool-call parser...) is kept, bounded and
    redacted: it is what the user needs to fix the server.
    """
    try:
        import httpx
        import httpx2
        import openai
    except ImportError:  # pragma: no cover - all are dependencies
        return None
    reason = server_reason(exc)
    because = f": {reason}" if reason else ""
    if isinstance(exc, openai.APITimeoutError):
        return "the model server timed out"
    if isinstance(exc, openai.APIStatusError):
        return f"the model server answered HTTP {exc.status_code}{because}"
    if isinstance(exc, (openai.APIConnectionError, httpx.HTTPError, httpx2.HTTPError)):
        return "the model server connection failed"
    if isinstance(exc, openai.APIError):  # an error event inside a 200 stream (SGLang, vLLM)
        return f"the model server sent an error in its stream{because}"
    if isinstance(exc, ValueError) and "No generations found in stream" in str(exc):
        return "the model server's stream held no reply"
    return None


def answer_events(question: Any, *, attachments: Sequence[Path] = (), ctx: Any = None, offline: bool = False,
                  config: LLMConfig | None = None, thread_id: str | None = None, budgets: Budgets = Budgets(),
                  kb: Any = None, registry: Any = None, transcript: list[dict[str, Any]] | None = None,
                  earlier: Sequence[Any] = (), history: Sequence[dict[str, Any]] = (),
                  gathered: list[Any] | None = None) -> Iterator[Event]:
    """Events answering ``question`` (an :class:`~rlmedic.agent.inquiry.Inquiry`, or a plain question with the
    loose arguments it is made of); always ends in a ``Final`` answer.

    ``earlier``/``history`` are the session's evidence and turns so far; the evidence this
    question gathers is appended to ``gathered``. ``transcript``, when given, receives the
    LLM conversation's messages (for ``eval --record``).
    """
    from rlmedic.agent.inquiry import Inquiry
    from rlmedic.agent.offline import run_offline

    inquiry = question if isinstance(question, Inquiry) else Inquiry.of(
        question, attachments=attachments, context=ctx, knowledge=kb, earlier=earlier, history=history)
    question = inquiry.question

    def offline_answer(notice: str | None, results: list[Any] | None = None) -> Iterator[Event]:
        call = agent.call if agent is not None else (registry.call if registry is not None else None)
        yield from run_offline(inquiry, notices=[notice] if notice else [], results=results, call=call,
                               gathered=gathered)

    agent: Agent | None = None
    if offline:
        yield from offline_answer(None)
        return
    config = config or LLMConfig.resolve()
    try:
        model = probe(config)
    except ServerUnavailable as exc:
        yield from offline_answer(f"offline: {exc.reason}")
        return
    try:
        agent = Agent(config, model, inquiry, thread_id=thread_id, budgets=budgets, registry=registry)
        answered = False
        for event in agent.ask(question):
            if isinstance(event, Final):
                answered = True
                if gathered is not None:  # before the Final reaches the session, which keeps it
                    gathered += agent.gathered
            yield event
        if answered:
            return
        reason = f"offline: {agent.run.fallback}; answer composed from the tools"
    except Exception as exc:  # noqa: BLE001 - only server failures are turned into the offline answer
        reason = _server_error(exc)
        if reason is None:  # a bug: say so in the stream (web, Slack), then keep the traceback
            yield Failed(f"{type(exc).__name__}: {exc}")
            raise
        reason = f"offline: {reason}"
    finally:
        if transcript is not None and agent is not None:
            transcript.extend(agent.messages())
    if agent is not None:
        agent._fresh_deadline()  # the fallback's tools get their reserve, never an expired deadline
    yield from offline_answer(reason, agent.run.results if agent is not None else [])
