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
  are trimmed before the context overflows;
- a server that refuses the request (HTTP 400, or an error event in the stream) because the
  context is too long, or because it cannot take tool definitions, is asked once more with
  a shorter context, or with the tools described in the prompt and called as text.

The model's text is shown once its reply is complete and checked (:mod:`rlmedic.agent.replies`,
:mod:`rlmedic.agent.claims`): a repetition loop or a question back for evidence already
attached is no answer (the offline answer follows); a cause the tools contradict is said to
be contradicted first, and the answer leads with the tools' root cause; unverified claims
are marked inline in every front door.

The tool context (allowed roots, deadline) is bound here, never part of a schema, so
a model cannot widen what it may read. Memory: a LangGraph checkpointer keyed by thread
id, on disk in the data dir (0600), so a conversation survives a restart; it keeps what the
model was sent (redacted), never the tools' whole results.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rlmedic.agent import claims, prompts, replies
from rlmedic.agent.events import Answer, Event, Final, Notice, TextDelta, ToolFinished, ToolStarted
from rlmedic.agent.llm import LLMConfig


@dataclass(frozen=True)
class Budgets:
    model_calls: int = 8
    tool_calls: int = 12
    tool_chars: int = 40_000  # all tool output sent to the model in one run
    seconds: float = 300.0  # the model's share of an answer (``--timeout`` lowers it)
    fallback_reserve_s: float = 30.0  # tools of the offline fallback get this much after the model's share
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
    adapted: str = ""  # "context" or "tools": how the request was changed after the server refused it
    wire: list[str] = field(default_factory=list)  # what the wire repair did (llm.WIRE_NOTES)
    artifacts: dict[str, Any] = field(default_factory=dict)  # tool_call_id -> ToolResult (not stored in memory)
    cut: str = ""  # why the model's last reply is incomplete ("" when it ended normally)
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
            return ToolMessage(content=text, tool_call_id=call.get("id") or "", name=call.get("name") or "",
                               status="error")

        def ask(request: Any, handler: Callable[[Any], Any]) -> Any:
            """One model call; a refusal the request can be adapted to is retried once, adapted."""
            run = run_ref()
            if run.adapted:
                request = adapt(request, run.adapted, run)
            try:
                return handler(request)
            except Exception as exc:  # noqa: BLE001 - only refusals one change can fix are retried
                kind = refusal_kind(exc)
                if not kind or run.adapted or run.model_calls >= budgets.model_calls:
                    raise
                run.adapted = kind
                run.model_calls += 1
                from rlmedic.agent.llm import server_reason

                what = ("asked again with a shorter context" if kind == "context" else
                        "asked again with the tools described in the prompt (text tool calls)")
                run.notes.append(f"the model server refused the request ({server_reason(exc) or type(exc).__name__}); {what}")
                return handler(adapt(request, kind, run))

        def adapt(request: Any, kind: str, run: RunState) -> Any:
            if kind == "context":
                return request.override(messages=shrink_context(request.messages, budgets))
            from langchain_core.messages import SystemMessage

            system = _text(request.system_message.content) if request.system_message is not None else ""
            return request.override(tools=[], system_message=SystemMessage(
                content=system + "\n\n" + prompts.text_calls(request.tools)))

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
                message = tidy(ask(request, handler), tool_names, run)
                retry_reason = what = why = ""
                if message.invalid_tool_calls and not message.tool_calls:
                    why = _describe_error(message.invalid_tool_calls)
                    retry_reason, what = prompts.PARSE_ERROR.format(error=why), "the model's tool call could not be parsed"
                elif run.cut and (message.tool_calls or message.invalid_tool_calls):
                    retry_reason, what, why = prompts.CUT_CALL, "the model's tool call was cut off", run.cut
                    message = message.model_copy(update={"tool_calls": [], "invalid_tool_calls": []})
                if retry_reason:
                    if not run.parse_retry_used and run.model_calls < budgets.model_calls:
                        run.parse_retry_used = True
                        run.notes.append(f"{what} ({why}); it was asked once more")
                        retry = list(request.messages) + [AIMessage(content=_text(message.content)),
                                                          HumanMessage(content=retry_reason)]
                        run.model_calls += 1
                        message = tidy(ask(request.override(messages=retry), handler), tool_names, run)
                        if run.cut and (message.tool_calls or message.invalid_tool_calls):
                            message = message.model_copy(update={"tool_calls": [], "invalid_tool_calls": []})
                    if not message.tool_calls and (message.invalid_tool_calls or run.cut):
                        run.fallback = f"{what} twice ({why})"
                        return ModelResponse(result=[AIMessage(content=_text(message.content))])
                return ModelResponse(result=[message])

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
                    message = handler(request)
                except Exception as exc:  # noqa: BLE001 - a tool bug becomes a result, not a dead run
                    return err(call, f"error: the tool {call['name']} failed: {type(exc).__name__}: "
                                     f"{short_error(str(exc))}")
                if isinstance(message, ToolMessage) and message.artifact is not None:
                    # the memory keeps what the model was sent, not the whole result
                    run.artifacts[message.tool_call_id] = message.artifact
                    message = message.model_copy(update={"artifact": None})
                return message

        return _Guard()


def refusal_kind(exc: BaseException) -> str:
    """"context" or "tools" when the server refused a request for a reason one change fixes, else ""."""
    import re

    try:
        import openai
    except ImportError:  # pragma: no cover - a dependency
        return ""
    if not isinstance(exc, openai.APIError) or isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
        return ""
    if isinstance(exc, openai.APIStatusError) and exc.status_code not in (400, 413, 422):
        return ""
    from rlmedic.agent.llm import server_reason

    reason = server_reason(exc, limit=400)
    if re.search(r"context (?:length|window)|maximum context|max_model_len|too many tokens|too long|"
                 r"exceeds? the (?:model|maximum)", reason, re.I):
        return "context"
    if isinstance(exc, openai.APIStatusError) and re.search(r"tool|function.?call", reason, re.I):
        return "tools"
    return ""


def shrink_context(messages: list[Any], budgets: Budgets) -> list[Any]:
    """The messages fitted to a server whose context is shorter than assumed: every tool output
    cut to a few thousand characters, then old ones trimmed to a quarter of the usual budget."""
    import dataclasses

    from langchain_core.messages import ToolMessage

    from rlmedic.tools.registry import bounded

    out = [m.model_copy(update={"content": bounded(_text(m.content), 3000)}) if isinstance(m, ToolMessage) else m
           for m in messages]
    return trim_context(out, dataclasses.replace(budgets, context_chars=budgets.context_chars // 4, keep_recent_tools=1))


def short_error(text: str) -> str:
    """An error text bounded as the registry bounds its own (errors can echo a huge argument)."""
    from rlmedic.tools.registry import MAX_ERROR_CHARS, bounded

    return bounded(text, MAX_ERROR_CHARS)


def _bounded_value(value: Any) -> Any:
    from rlmedic.tools.registry import bounded_value

    return bounded_value(value)


def tidy(response: Any, tool_names: list[str], run: RunState) -> Any:
    """The model's reply made safe to use: reasoning stripped, text tool calls parsed, cuts noted.

    - ``<think>`` blocks leave the content (so they are neither shown nor sent back);
    - with no structured call, a call written as text (``<tool_call>``, fenced JSON, ...)
      becomes a real one (:mod:`rlmedic.agent.textcalls`);
    - structured calls whose arguments did not parse get the same JSON repair as text calls;
      a call without an id gets one; at most ``MAX_CALLS_PER_REPLY`` calls are kept;
    - ``finish_reason`` ``length``, or none at all (the stream closed early), sets
      ``run.cut``: the caller never runs cut arguments nor takes cut text as complete.
    """
    from langchain_core.messages import AIMessage

    from rlmedic.agent.textcalls import MAX_CALLS_PER_REPLY, loads_lenient, parse_tool_calls, strip_think

    message = response.result[-1] if response.result else AIMessage(content="")
    if not isinstance(message, AIMessage):
        return AIMessage(content="")
    finish = (message.response_metadata or {}).get("finish_reason")
    run.cut = ""
    if finish == "length":
        run.cut = "finish_reason=length: the max_tokens limit was reached"
    elif finish is None and (message.content or message.tool_calls or message.invalid_tool_calls):
        run.cut = "the stream ended without a finish_reason"
    content = _text(message.content)
    clean = strip_think(content)
    update: dict[str, Any] = {}
    if clean != content:
        update["content"] = clean
    calls, invalid = list(message.tool_calls), []
    if not run.cut:
        for bad in message.invalid_tool_calls:  # the repair text calls get, for structured ones too
            args = loads_lenient(bad.get("args") or "{}") if isinstance(bad.get("args") or "{}", str) else None
            if bad.get("name") in tool_names and isinstance(args, dict):
                calls.append({"name": bad["name"], "args": args, "id": bad.get("id"), "type": "tool_call"})
            else:
                invalid.append(bad)
        if len(invalid) != len(message.invalid_tool_calls):
            run.notes.append("a tool call's arguments were repaired (malformed JSON)")
            update.update(tool_calls=calls, invalid_tool_calls=invalid)
    if len(calls) > MAX_CALLS_PER_REPLY:
        run.notes.append(f"the model wrote {len(calls)} tool calls in one reply; only the first "
                         f"{MAX_CALLS_PER_REPLY} were read")
        calls = calls[:MAX_CALLS_PER_REPLY]
        update["tool_calls"] = calls
    if any(not c.get("id") for c in calls):  # a null id: the tool's result could not be paired with it
        update["tool_calls"] = calls = [c if c.get("id") else {**c, "id": f"call_{uuid.uuid4().hex[:16]}"}
                                        for c in calls]
    if not calls and not message.invalid_tool_calls and not run.cut:
        text_calls, prose = parse_tool_calls(content, tool_names)
        if text_calls:
            update.update(content=prose, tool_calls=[c.as_langchain() for c in text_calls])
            run.notes.append(f"the model wrote {len(text_calls)} tool call(s) as text; rlmedic read them")
    return message.model_copy(update=update) if update else message


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
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    private_files(path)
    connection = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(connection)
    saver.setup()  # creates the tables (and, in WAL mode, the -wal and -shm files) now, to make them private
    private_files(path)
    return saver


def private_files(path: Path) -> None:
    """``path`` and its SQLite companions (``-wal``, ``-shm``, ``-journal``) made 0600, ``path``
    created so when missing (SQLite gives the companions the database file's mode)."""
    import os

    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        return  # a read-only data dir: SQLite reports its own error
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.chmod(f"{path}{suffix}", 0o600)
        except OSError:
            pass


def earlier_lines(evidence: Sequence[Any]) -> str:
    """What earlier turns of the thread established (the model may not have seen them: they
    could have been answered offline), one line each; already redacted by the registry."""
    lines = []
    for e in evidence[-6:]:
        root = e.root_finding
        if root is not None:
            lines.append(f"- {e.checked}: root cause {root.category}: {root.summary}")
        elif e.checked:
            lines.append(f"- {e.checked}: " + ("nothing wrong found" if e.healthy else
                                               "; ".join(f.summary for f in (e.findings + e.advice)[:2]) or "checked"))
    return ("\n\nEarlier in this thread rlmedic's tools found:\n" + "\n".join(lines)) if lines else ""


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

    def __init__(self, config: LLMConfig, model: str, inquiry: Any, *, thread_id: str | None = None,
                 budgets: Budgets = Budgets(), registry: Any = None, call: Callable[..., Any] | None = None) -> None:
        """``inquiry`` (:class:`~rlmedic.agent.inquiry.Inquiry`): the question's attachments, context,
        knowledge, the thread's earlier evidence and turns."""
        from rlmedic.memory import collector_paused

        with collector_paused():
            from langchain.agents import create_agent

        from rlmedic.agent.llm import chat_model

        if registry is None:
            from rlmedic.tools.registry import REGISTRY as registry  # noqa: N811
        import dataclasses

        # the model's share of the answer never exceeds --timeout / RLMEDIC_TIMEOUT
        budgets = dataclasses.replace(budgets, seconds=min(budgets.seconds, config.timeout_s))
        self.inquiry = inquiry
        ctx = inquiry.context
        self.ctx, self.kb, self.budgets = ctx, inquiry.knowledge, budgets
        self.attachments = list(inquiry.attachments)
        self.earlier = list(inquiry.earlier)  # evidence of earlier turns in the session
        self.history = list(inquiry.history)  # the session's earlier turns (a follow-up's topic)
        self.gathered: list[Any] = []  # the evidence this question added (for the session)
        self.call = call or registry.call
        self.thread_id = thread_id or f"once-{uuid.uuid4().hex}"
        self.run = RunState()
        self._own_deadline = ctx is not None and getattr(ctx, "deadline", "set") is None
        tools = list(registry.tools())
        self.graph = create_agent(
            chat_model(config, model),
            make_tools(tools, self.call, ctx, lambda: self.run, budgets),
            system_prompt=prompts.system_prompt(tuple(t.guide_line for t in tools)),
            middleware=[Guard.make(lambda: self.run, budgets, [t.name for t in tools])],
            checkpointer=checkpointer(thread_id),
        )

    def ask(self, question: str) -> Iterator[Event]:
        """Stream events for ``question``; ends with :class:`Final`. Server errors propagate
        (the caller turns them into the offline answer with what this run gathered)."""
        from langchain_core.messages import HumanMessage

        from rlmedic.agent.llm import WIRE_NOTES
        from rlmedic.confine import redact

        self.run = RunState()
        WIRE_NOTES.set(self.run.wire)
        if self._own_deadline:  # tools stop with the run's time budget
            self.ctx.deadline = self.run.started + self.budgets.seconds
        content = (redact(question) + prompts.attachment_lines(describe_attachments(self.attachments))
                   + earlier_lines(self.earlier))
        yield from self._stream({"messages": [HumanMessage(content=content)]})
        yield from self._finish(question)

    def _config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id}, "recursion_limit": 4 * self.budgets.model_calls + 10,
                "callbacks": [deadline_callback(self.run.started + self.budgets.seconds)]}

    def _stream(self, payload: dict[str, Any]) -> Iterator[Event]:
        """The graph's tool steps; the stream is abandoned when the run's time budget is spent
        (a runaway generation). The model's text is not streamed: :meth:`_finish` shows it once
        the reply is complete and checked (a loop, a question back or a contradicted cause must
        never reach the user as the answer, and every front door gets the marked text)."""
        from langchain_core.messages import AIMessage, ToolMessage

        stream = self.graph.stream(payload, self._config(), stream_mode="updates")
        try:
            for item in _until_deadline(stream, self.run, self.budgets):
                for update in (item or {}).values():
                    for message in (update or {}).get("messages", []) if isinstance(update, dict) else []:
                        if isinstance(message, AIMessage):
                            for call in message.tool_calls:
                                yield ToolStarted(id=call["id"] or "", name=call["name"], args=_bounded_value(call["args"]))
                        elif isinstance(message, ToolMessage):
                            result = self.run.artifacts.get(message.tool_call_id, message.artifact)
                            if result is not None and hasattr(result, "ok"):
                                yield ToolFinished(id=message.tool_call_id, name=result.name, ok=result.ok,
                                                   data=result.data, error=result.error, seconds=result.seconds)
                            else:
                                yield ToolFinished(id=message.tool_call_id, name=message.name or "",
                                                   ok=message.status != "error", error=short_error(_text(message.content)))
        finally:
            stream.close()  # closes the HTTP response of a generation still running

    def messages(self) -> list[dict[str, Any]]:
        """The thread's messages as JSON-ready dicts (LangChain's own format)."""
        from langchain_core.messages import messages_to_dict

        return messages_to_dict(self.graph.get_state(self._config()).values.get("messages", []))

    def _last_reply(self) -> str:
        from langchain_core.messages import AIMessage

        messages = self.graph.get_state(self._config()).values.get("messages", [])
        last = messages[-1] if messages else None
        return _text(last.content).strip() if isinstance(last, AIMessage) and not last.tool_calls else ""

    def uninvestigated(self) -> list[Path]:
        """Attachments no successful tool call has read yet (the safety net runs the tools on them)."""
        read: list[str] = []
        for call in self.run.calls:
            if call.get("ok"):
                read += [str(v) for v in _values(call.get("args") or {})]
        out = []
        for path in self.attachments:
            text = str(path)
            if not any(r == text or r.startswith(text.rstrip("/") + "/") or text.startswith(r.rstrip("/") + "/")
                       for r in read):
                out.append(path)
        return out

    def _notes(self) -> list[str]:
        """The run's notes so far, the wire repair's included, without repeats."""
        return list(dict.fromkeys(self.run.notes + self.run.wire))

    def _finish(self, question: str) -> Iterator[Event]:
        from langchain_core.messages import HumanMessage

        from rlmedic.agent.investigate import plan_calls, question_evidence, run_tools

        run = self.run
        shown = self._notes()
        for note in shown:
            yield Notice(note)
        reply = "" if run.fallback else self._last_reply()
        missing = self.uninvestigated() if self.attachments else []
        if missing:
            # evidence, not call counts: files the model did not read (no call, or only failed calls)
            # are investigated by rlmedic itself, and the model is asked once more with the results;
            # the first reply is dropped (it was written without the evidence)
            names = ", ".join(p.name for p in missing)
            yield Notice(f"the model did not investigate {names}; rlmedic ran the tools itself")
            self._fresh_deadline()
            peek = lambda p: self.ctx.confinement.read_bytes(p, max_bytes=4096)  # noqa: E731
            gathered: list[Any] = []
            yield from run_tools(plan_calls(missing, peek), self.ctx, gathered, self.call)
            run.results += gathered
            run.calls += [{"name": r.name, "args": {"paths": [str(p) for p in missing]}, "ok": r.ok} for r in gathered]
            if not run.fallback and time.monotonic() - run.started < self.budgets.seconds:
                texts = "\n\n".join(f"{r.name}: {r.text if r.ok else 'error: ' + r.error}" for r in gathered)
                yield from self._stream({"messages": [HumanMessage(content=prompts.GROUND.format(results=texts))]})
                reply = "" if run.fallback else self._last_reply()
            else:
                reply = ""
        pasted = question_evidence(question, self.ctx)  # log text in the question grounds the category too
        if reply and not run.cut and replies.degenerate(reply):
            run.fallback = f"the model's reply was a repetition loop ({len(reply)} characters), not an answer"
            reply = ""
        elif reply and replies.asks_back(reply) and (pasted is not None or any(r.ok for r in run.results)):
            run.fallback = "the model asked for evidence rlmedic already has instead of answering"
            reply = ""
        if not reply:
            run.fallback = run.fallback or "the model returned an empty reply"
            for note in self._notes()[len(shown):]:
                yield Notice(note)
            return  # no Final: the engine composes the answer from the tools
        new = [r.evidence for r in run.results if r.ok and getattr(r, "evidence", None) is not None]
        fresh = {e.call for e in new}
        evidence = ([pasted] if pasted is not None else []) + new + [e for e in self.earlier if e.call not in fresh]
        self.gathered = ([pasted] if pasted is not None else []) + new
        answer = self._compose(question, reply, evidence)
        notes = self._notes()
        if run.cut:
            answer.answer = reply.rstrip() + "\n[the model's reply was cut off here]"
            notes.append(f"the model's reply is incomplete ({run.cut})")
        haystack = claims.evidence_text(run.results, [question, *map(str, self.attachments),
                                                      *(str(c) for c in answer.citations),
                                                      *(json.dumps(e.to_dict(), default=str) for e in evidence), answer.grounded])
        answer.answer, unsupported = claims.check(answer.answer, haystack)
        if unsupported:
            notes.append(claims.notice(unsupported))
        against = replies.contradiction(reply, answer.category) if answer.root_cause else ""
        if against:
            notes.append(f"the model names another cause ({against}) than the tools' root cause ({answer.category}); "
                         "the answer leads with the tools' root cause")
            answer.answer = prompts.CONTRADICTED.format(root=answer.root_cause, category=answer.category,
                                                        evidence=", ".join(answer.evidence[:3]) or "see below",
                                                        model=answer.answer)
            answer.summary = answer.root_cause.split("\n", 1)[0][:300]
        for note in notes[len(shown):]:
            yield Notice(note)
        answer.tool_calls = [{**c, "args": _bounded_value(c.get("args") or {})} for c in run.calls]
        answer.notices = notes
        yield TextDelta(answer.answer)
        yield Final(answer)

    def _compose(self, question: str, reply: str, evidence: list[Any]) -> Answer:
        """The model's text over the answer rlmedic composes from the same evidence.

        The structured parts (category, root cause, fixes, diff, citations) and the grounded
        text come from :func:`rlmedic.agent.compose.compose`, exactly as offline: a known issue,
        card fixes for the framework in play, the corrected config. The model adds prose; it
        never takes away what the offline engine would have said.
        """
        import dataclasses

        from rlmedic.agent.compose import compose

        kb = self.kb if self.kb is not None or self.ctx is None else self.ctx.knowledge()
        inquiry = dataclasses.replace(self.inquiry, question=question, knowledge=kb)
        composed = compose(inquiry.with_texts(), evidence, fresh=self.gathered)
        grounded = composed.answer + ("\n" + composed.more if composed.more else "")
        return dataclasses.replace(composed, answer=reply, engine="llm", summary=reply.split("\n", 1)[0][:300],
                                   grounded=grounded, notices=[], tool_calls=[], more="")

    def _fresh_deadline(self) -> None:
        """Tools run after the model's share get the fallback reserve (never an expired deadline)."""
        if self._own_deadline or (self.ctx is not None and getattr(self.ctx, "deadline", None)):
            floor = time.monotonic() + self.budgets.fallback_reserve_s
            if self.ctx.deadline is None or self.ctx.deadline < floor:
                self.ctx.deadline = floor


class StreamDeadline(Exception):
    """The run's time budget ran out while the model was still generating."""


def deadline_callback(deadline: float) -> Any:
    """A LangChain callback that aborts a generation streaming past ``deadline`` (monotonic).

    Raised from ``on_llm_new_token`` with ``raise_error``, so the HTTP stream is dropped at
    once instead of being read to its end (a runaway generation can last minutes).
    """
    from langchain_core.callbacks import BaseCallbackHandler

    class Deadline(BaseCallbackHandler):
        raise_error = True

        def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
            if time.monotonic() > deadline:
                raise StreamDeadline()

    return Deadline()


def _until_deadline(stream: Iterator[Any], run: RunState, budgets: Budgets) -> Iterator[Any]:
    try:
        yield from stream
    except StreamDeadline:
        run.fallback = run.fallback or f"the time budget ({budgets.seconds:.0f} s) ran out while the model was generating"


def _values(args: dict[str, Any]) -> Iterator[Any]:
    for value in args.values():
        if isinstance(value, (list, tuple)):
            yield from value
        elif isinstance(value, str):
            yield value
