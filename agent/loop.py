"""The LLM engine: a LangChain 1.x tool loop over the registry's tools, as an event stream.

``create_agent`` runs the model <-> tools loop; one middleware (:class:`Guard`) makes it
safe with small local models and enforces the budgets:

- malformed tool-call JSON (``invalid_tool_calls``, on which ``create_agent`` would end
  silently): the model sees the parse error once; a second failure falls back to the
  offline answer grounded in the tools;
- unknown tool, wrong argument types, a tool that raises: an error *result* the model
  can read (the registry never raises for user errors; anything else is caught here);
- the same call repeated: refused with a note, the earlier result stands;
- an empty reply, or no tool call although files were attached: rlmedic runs the
  deterministic tools itself and grounds the answer in them;
- budgets: model calls, tool calls, tool-output characters, total time; old tool outputs
  are trimmed before the context overflows.

The tool context (allowed roots, deadline) is bound here, never part of a schema, so
a model cannot widen what it may read. Memory: a LangGraph checkpointer keyed by thread
id, on disk in the data dir, so a conversation survives a restart.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rlmedic.agent import prompts
from rlmedic.agent.events import Answer, Event, Final, Notice, TextDelta, ToolFinished, ToolStarted
from rlmedic.agent.grounding import ground
from rlmedic.agent.llm import LLMConfig


@dataclass(frozen=True)
class Budgets:
    model_calls: int = 8
    tool_calls: int = 12
    tool_chars: int = 40_000  # all tool output sent to the model in one run
    seconds: float = 300.0
    context_chars: int = 60_000  # trim old tool outputs above this (about 15k tokens)
    keep_recent_tools: int = 3  # tool outputs never trimmed


@dataclass
class RunState:
    """What one run has done so far (reset per question)."""

    started: float = field(default_factory=time.monotonic)
    model_calls: int = 0
    tool_calls: int = 0
    tool_chars: int = 0
    seen: set[str] = field(default_factory=set)
    results: list[Any] = field(default_factory=list)  # registry ToolResults, in call order
    calls: list[dict[str, Any]] = field(default_factory=list)
    parse_retry_used: bool = False
    fallback: str = ""  # why the model's answer cannot be used ("" when it can)
    notes: list[str] = field(default_factory=list)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content or "")


def _describe_error(calls: list[dict[str, Any]]) -> str:
    parts = []
    for call in calls:
        args = str(call.get("args") or "")[:120]
        parts.append(f"{call.get('name') or '?'}: {call.get('error') or 'arguments are not valid JSON'}: {args!r}")
    return "; ".join(parts)


class Guard:
    """The robustness and budget middleware (built lazily: langchain is a heavy import)."""

    @staticmethod
    def make(run_ref: Callable[[], RunState], budgets: Budgets, tool_names: list[str]) -> Any:
        from langchain.agents.middleware import AgentMiddleware
        from langchain.agents.middleware.types import ModelResponse
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

        def err(call: dict[str, Any], text: str) -> ToolMessage:
            return ToolMessage(content=text, tool_call_id=call["id"], name=call["name"], status="error")

        class _Guard(AgentMiddleware):
            name = "rlmedic_guard"

            def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
                run = run_ref()
                if run.model_calls >= budgets.model_calls:
                    run.fallback = run.fallback or f"the model-call budget ({budgets.model_calls}) is used up"
                    return ModelResponse(result=[AIMessage(content="")])
                if time.monotonic() - run.started > budgets.seconds:
                    run.fallback = run.fallback or f"the time budget ({budgets.seconds:.0f} s) is used up"
                    return ModelResponse(result=[AIMessage(content="")])
                request = request.override(messages=trim_context(request.messages, budgets))
                run.model_calls += 1
                response = handler(request)
                message = response.result[-1] if response.result else None
                if isinstance(message, AIMessage) and message.invalid_tool_calls and not message.tool_calls:
                    error = _describe_error(message.invalid_tool_calls)
                    if not run.parse_retry_used and run.model_calls < budgets.model_calls:
                        run.parse_retry_used = True
                        run.notes.append(f"the model's tool call could not be parsed ({error}); it was asked once more")
                        retry = list(request.messages) + [
                            AIMessage(content=_text(message.content)),
                            HumanMessage(content=prompts.PARSE_ERROR.format(error=error)),
                        ]
                        run.model_calls += 1
                        response = handler(request.override(messages=retry))
                        message = response.result[-1] if response.result else None
                    if isinstance(message, AIMessage) and message.invalid_tool_calls and not message.tool_calls:
                        run.fallback = f"the model's tool call could not be parsed twice ({error})"
                        return ModelResponse(result=[AIMessage(content=_text(message.content))])
                return response

            def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
                run = run_ref()
                call = request.tool_call
                if request.tool is None:
                    return err(call, prompts.UNKNOWN_TOOL.format(name=call["name"], names=", ".join(tool_names)))
                key = call["name"] + json.dumps(call.get("args") or {}, sort_keys=True, default=str)
                if key in run.seen:
                    return err(call, prompts.REPEATED_CALL.format(name=call["name"]))
                if run.tool_calls >= budgets.tool_calls:
                    return err(call, prompts.TOOL_BUDGET)
                run.seen.add(key)
                run.tool_calls += 1
                try:
                    return handler(request)
                except Exception as exc:  # noqa: BLE001 - a tool bug becomes a result, not a dead run
                    return err(call, f"error: the tool {call['name']} failed: {type(exc).__name__}: {exc}")

        return _Guard()


def trim_context(messages: list[Any], budgets: Budgets) -> list[Any]:
    """Replace old tool outputs by a one-line note while the messages exceed the budget."""
    from langchain_core.messages import ToolMessage

    total = sum(len(_text(m.content)) for m in messages)
    if total <= budgets.context_chars:
        return messages
    tool_positions = [i for i, m in enumerate(messages) if isinstance(m, ToolMessage)]
    old = tool_positions[: max(0, len(tool_positions) - budgets.keep_recent_tools)]
    out = list(messages)
    for i in old:
        if total <= budgets.context_chars:
            break
        content = _text(out[i].content)
        note = prompts.TRIMMED.format(name=out[i].name or "a tool", chars=len(content))
        if len(note) < len(content):
            out[i] = out[i].model_copy(update={"content": note})
            total -= len(content) - len(note)
    return out


def make_tools(registry_tools: Sequence[Any], call: Callable[..., Any], ctx: Any,
               run_ref: Callable[[], RunState], budgets: Budgets) -> list[Any]:
    """One LangChain tool per registry tool, from its JSON schema; ``ctx`` is bound here.

    A ``BaseTool`` subclass rather than ``StructuredTool``: StructuredTool's ``_run`` takes a
    ``config`` keyword (LangChain's RunnableConfig), which would swallow ``fix_config``'s
    own ``config`` argument.
    """
    from langchain_core.tools import BaseTool

    class RegistryTool(BaseTool):
        response_format: str = "content_and_artifact"
        runner: Any = None

        def _run(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> tuple[str, Any]:
            return self.runner(self.name, kwargs)

    def run_tool(name: str, kwargs: dict[str, Any]) -> tuple[str, Any]:
        run = run_ref()
        result = call(name, kwargs, ctx)
        run.results.append(result)
        run.calls.append({"name": name, "args": kwargs, "ok": result.ok})
        text = result.text if result.ok else f"error: {result.error}"
        if run.tool_chars + len(text) > budgets.tool_chars:
            text = prompts.RESULT_BUDGET
        run.tool_chars += len(text)
        return text, result

    return [RegistryTool(name=t.name, description=t.description, args_schema=t.schema, runner=run_tool)
            for t in registry_tools]


def checkpointer(thread_id: str | None) -> Any:
    """SQLite in the data dir for named threads (they survive restarts); memory otherwise."""
    if not thread_id:
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver()
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from rlmedic.settings import data_dir

    path = data_dir() / "conversations.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))


def describe_attachments(attachments: Sequence[Path]) -> list[str]:
    out = []
    for path in attachments:
        try:
            size = f"{path.stat().st_size} bytes" if path.is_file() else "folder"
        except OSError:
            size = "unreadable"
        out.append(f"{path} ({size})")
    return out


class Agent:
    """One conversation with the model (reuse it for follow-up questions on the same thread)."""

    def __init__(self, config: LLMConfig, model: str, ctx: Any, *, attachments: Sequence[Path] = (),
                 thread_id: str | None = None, budgets: Budgets = Budgets(), registry: Any = None,
                 call: Callable[..., Any] | None = None, kb: Any = None) -> None:
        from langchain.agents import create_agent

        from rlmedic.agent.llm import chat_model

        if registry is None:
            from rlmedic.registry import REGISTRY as registry  # noqa: N811
        self.ctx, self.kb, self.budgets = ctx, kb, budgets
        self.attachments = list(attachments)
        self.call = call or registry.call
        self.thread_id = thread_id or f"once-{uuid.uuid4().hex}"
        self.run = RunState()
        self._own_deadline = ctx is not None and getattr(ctx, "deadline", "set") is None
        tools = list(registry.tools())
        self.graph = create_agent(
            chat_model(config, model),
            make_tools(tools, self.call, ctx, lambda: self.run, budgets),
            system_prompt=prompts.SYSTEM_PROMPT,
            middleware=[Guard.make(lambda: self.run, budgets, [t.name for t in tools])],
            checkpointer=checkpointer(thread_id),
        )

    def ask(self, question: str) -> Iterator[Event]:
        """Stream events for ``question``; ends with :class:`Final`. Server errors propagate
        (the caller turns them into the offline answer with what this run gathered)."""
        from langchain_core.messages import HumanMessage

        from rlmedic.confine import redact

        self.run = RunState()
        if self._own_deadline:  # tools stop with the run's time budget
            self.ctx.deadline = self.run.started + self.budgets.seconds
        content = redact(question) + prompts.attachment_lines(describe_attachments(self.attachments))
        yield from self._stream({"messages": [HumanMessage(content=content)]})
        yield from self._finish(question)

    def _config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id}, "recursion_limit": 4 * self.budgets.model_calls + 10}

    def _stream(self, payload: dict[str, Any]) -> Iterator[Event]:
        from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage

        for mode, item in self.graph.stream(payload, self._config(), stream_mode=["messages", "updates"]):
            if mode == "messages":
                chunk, meta = item
                if isinstance(chunk, AIMessageChunk) and meta.get("langgraph_node") == "model":
                    text = _text(chunk.content)
                    if text:
                        yield TextDelta(text)
                continue
            for update in (item or {}).values():
                for message in (update or {}).get("messages", []) if isinstance(update, dict) else []:
                    if isinstance(message, AIMessage):
                        for call in message.tool_calls:
                            yield ToolStarted(id=call["id"] or "", name=call["name"], args=call["args"])
                    elif isinstance(message, ToolMessage):
                        result = message.artifact
                        if result is not None and hasattr(result, "ok"):
                            yield ToolFinished(id=message.tool_call_id, name=result.name, ok=result.ok,
                                               data=result.data, error=result.error, seconds=result.seconds)
                        else:
                            yield ToolFinished(id=message.tool_call_id, name=message.name or "",
                                               ok=message.status != "error", error=_text(message.content))

    def messages(self) -> list[dict[str, Any]]:
        """The thread's messages as JSON-ready dicts (LangChain's own format)."""
        from langchain_core.messages import messages_to_dict

        return messages_to_dict(self.graph.get_state(self._config()).values.get("messages", []))

    def _last_reply(self) -> str:
        from langchain_core.messages import AIMessage

        messages = self.graph.get_state(self._config()).values.get("messages", [])
        last = messages[-1] if messages else None
        return _text(last.content).strip() if isinstance(last, AIMessage) and not last.tool_calls else ""

    def _finish(self, question: str) -> Iterator[Event]:
        from langchain_core.messages import HumanMessage

        from rlmedic.agent.offline import pasted_log_result, plan_calls, run_tools

        run = self.run
        for note in run.notes:
            yield Notice(note)
        reply = "" if run.fallback else self._last_reply()
        if not run.fallback and not run.tool_calls and self.attachments:
            # the model answered without looking at the files: run the tools, ask once more
            yield Notice("the model called no tool although files were attached; rlmedic ran the tools itself")
            peek = lambda p: self.ctx.confinement.read_bytes(p, max_bytes=4096)  # noqa: E731
            gathered: list[Any] = []
            yield from run_tools(plan_calls(self.attachments, peek), self.ctx, gathered, self.call)
            run.results += gathered
            run.calls += [{"name": r.name, "args": {}, "ok": r.ok} for r in gathered]
            texts = "\n\n".join(f"{r.name}: {r.text if r.ok else 'error: ' + r.error}" for r in gathered)
            yield from self._stream({"messages": [HumanMessage(content=prompts.GROUND.format(results=texts))]})
            reply = "" if run.fallback else self._last_reply()
        if not reply:
            why = run.fallback or "the model returned an empty reply"
            yield from fallback(question, self, f"offline: {why}; answer composed from the tools")
            return
        pasted = pasted_log_result(question)  # log text in the question grounds the category too
        evidence = ([pasted] if pasted is not None else []) + run.results
        answer = ground(Answer(answer=reply, engine="llm", summary=reply.split("\n", 1)[0][:300]), evidence)
        answer.tool_calls = run.calls
        answer.notices = list(run.notes)
        yield Final(answer)


def fallback(question: str, agent: Agent | None, notice: str, *, attachments: Sequence[Path] = (), ctx: Any = None,
             kb: Any = None, call: Callable[..., Any] | None = None) -> Iterator[Event]:
    """The offline answer, reusing whatever tool results the run already has."""
    from rlmedic.agent.offline import run_offline

    if agent is not None:
        attachments, ctx, kb, call = agent.attachments, agent.ctx, agent.kb, agent.call
    results = agent.run.results if agent is not None else []
    yield from run_offline(question, attachments=attachments, ctx=ctx, kb=kb, notices=[notice], results=results,
                           call=call)
