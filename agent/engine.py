"""Pick the engine for one question: the LLM loop when a model server answers, else offline.

Every front door (CLI, web, Slack, eval) calls :func:`answer_events`. A server that is
down, slow or failing never leaves the user without an answer: the offline engine
answers, with one notice line saying why, reusing any tool results already gathered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

from rlmedic.agent.events import Event, Failed
from rlmedic.agent.llm import LLMConfig, ServerUnavailable, probe
from rlmedic.agent.loop import Agent, Budgets, fallback


def _server_error(exc: BaseException) -> str | None:
    """One line for errors that mean "the model server failed", None for anything else."""
    try:
        import httpx
        import openai
    except ImportError:  # pragma: no cover - both are dependencies
        return None
    if isinstance(exc, openai.APITimeoutError):
        return "the model server timed out"
    if isinstance(exc, openai.APIStatusError):
        return f"the model server answered HTTP {exc.status_code}"
    if isinstance(exc, (openai.APIConnectionError, httpx.HTTPError)):
        return "the model server connection failed"
    return None


def answer_events(question: str, *, attachments: Sequence[Path] = (), ctx: Any = None, offline: bool = False,
                  config: LLMConfig | None = None, thread_id: str | None = None, budgets: Budgets = Budgets(),
                  kb: Any = None, registry: Any = None,
                  transcript: list[dict[str, Any]] | None = None) -> Iterator[Event]:
    """Events answering ``question``; always ends in a ``Final`` answer.

    ``transcript``, when given, receives the LLM conversation's messages (for ``eval --record``).
    """
    from rlmedic.agent.offline import run_offline

    if offline:
        yield from run_offline(question, attachments=attachments, ctx=ctx, kb=kb)
        return
    config = config or LLMConfig.resolve()
    try:
        model = probe(config)
    except ServerUnavailable as exc:
        yield from run_offline(question, attachments=attachments, ctx=ctx, kb=kb,
                               notices=[f"offline: {exc.reason}"])
        return
    agent: Agent | None = None
    try:
        agent = Agent(config, model, ctx, attachments=attachments, thread_id=thread_id, budgets=budgets,
                      registry=registry, kb=kb)
        yield from agent.ask(question)
    except Exception as exc:  # noqa: BLE001 - only server failures are turned into the offline answer
        reason = _server_error(exc)
        if reason is None:  # a bug: say so in the stream (web, Slack), then keep the traceback
            yield Failed(f"{type(exc).__name__}: {exc}")
            raise
        yield from fallback(question, agent, f"offline: {reason}", attachments=attachments, ctx=ctx, kb=kb)
    finally:
        if transcript is not None and agent is not None:
            transcript.extend(agent.messages())
