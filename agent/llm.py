"""The model client: where the OpenAI-compatible server is, and a quick "is it up?".

rlmedic talks to any OpenAI-compatible chat-completions server (SGLang started by
``rlmedic serve-model``, SGLang's router, vLLM...). Settings come from flags or the
environment: ``RLMEDIC_BASE_URL``, ``RLMEDIC_MODEL``, ``RLMEDIC_API_KEY``.

Under pytest the client refuses any URL that is not on loopback, so no test can ever
call a real model by accident.
"""

from __future__ import annotations

import contextvars
import functools
import ipaddress
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rlmedic.errors import UserError

DEFAULT_BASE_URL = "http://127.0.0.1:30000/v1"
#: How long the reachability probe waits; the offline fallback must start well within 5 s.
PROBE_TIMEOUT_S = 1.5
#: The most one answer may spend on the model (``--timeout`` / ``RLMEDIC_TIMEOUT``); the
#: offline fallback has its own reserve on top (see ``loop.Budgets``).
REQUEST_TIMEOUT_S = 120.0
#: The longest silence tolerated inside one response (no byte from a stalled server).
STALL_TIMEOUT_S = 30.0
#: Tokens one model reply may generate (``RLMEDIC_MAX_TOKENS``): a runaway generation is cut here.
MAX_TOKENS = 1536
#: Retries of a request answered 429 or 503, and the longest ``Retry-After`` honoured.
RETRIES = 2
MAX_RETRY_AFTER_S = 10.0
#: The longest SSE line read whole; a longer one (a runaway argument in one chunk) is dropped unread.
MAX_SSE_LINE = 1 << 20
#: The largest plain JSON body accepted in answer to a streaming request.
MAX_JSON_BODY = 8 << 20
#: Notes from the wire for the run in progress (``WireRepair`` appends; the loop reads them).
WIRE_NOTES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("rlmedic_wire_notes", default=None)


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str = ""  # "" -> the first model the server lists
    api_key: str = "EMPTY"
    timeout_s: float = REQUEST_TIMEOUT_S
    temperature: float = 0.0
    max_tokens: int = MAX_TOKENS

    @property
    def stall_s(self) -> float:
        """Read timeout between two bytes of a response: a stalled server is given up on."""
        return max(1.0, min(STALL_TIMEOUT_S, self.timeout_s))

    @classmethod
    def resolve(cls, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                timeout_s: float | None = None, max_tokens: int | None = None) -> LLMConfig:
        """Flags win over the environment, which wins over the defaults."""
        url = (base_url or os.environ.get("RLMEDIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        if not url.endswith("/v1"):
            url += "/v1"
        config = cls(
            base_url=url,
            model=model or os.environ.get("RLMEDIC_MODEL", ""),
            api_key=api_key or os.environ.get("RLMEDIC_API_KEY") or "EMPTY",
            timeout_s=timeout_s if timeout_s is not None else _env_number("RLMEDIC_TIMEOUT", REQUEST_TIMEOUT_S),
            max_tokens=max_tokens if max_tokens is not None else int(_env_number("RLMEDIC_MAX_TOKENS", MAX_TOKENS)),
        )
        if config.timeout_s <= 0 or config.max_tokens <= 0:
            raise UserError("the timeout and max tokens must be positive")
        check_allowed(config.base_url)
        return config


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r}: not a number") from None
    if value <= 0:
        raise UserError(f"{name}={raw!r}: must be positive")
    return value


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_allowed(url: str) -> None:
    """Refuse non-loopback model servers while running under pytest."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--base-url {url!r}: not an http(s) URL")
    if os.environ.get("PYTEST_CURRENT_TEST") and not is_loopback(url):
        raise UserError(f"--base-url {url!r}: only loopback model servers are allowed under pytest")


class ServerUnavailable(Exception):
    """The model server cannot be used now; ``reason`` is one line for the user."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def probe(config: LLMConfig, timeout_s: float = PROBE_TIMEOUT_S, *, retries: int = RETRIES,
          sleep: Any = None) -> str:
    """GET ``/v1/models``; the model name to use, or :class:`ServerUnavailable`.

    A 429 or 503 with a short ``Retry-After`` is waited out (at most ``retries`` times) before
    the answer goes offline: a busy server is not a dead one.
    """
    import time

    request = urllib.request.Request(config.base_url + "/models", headers={"Authorization": f"Bearer {config.api_key}"})
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (checked URL)
                body = json.loads(response.read() or b"{}")
            break
        except urllib.error.HTTPError as exc:
            if config.model and exc.code in (404, 405, 501):  # a server without a model list: the named model is used
                return config.model
            wait = retry_after(exc.headers) if exc.code in (429, 503) else None
            if wait is None or wait > MAX_RETRY_AFTER_S or attempt == retries:
                raise ServerUnavailable(f"model server at {config.base_url} answered HTTP {exc.code}") from None
            (sleep or time.sleep)(wait)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerUnavailable(f"model server at {config.base_url} unreachable ({reason})") from None
        except ValueError:
            raise ServerUnavailable(f"model server at {config.base_url} sent no JSON model list") from None
    if config.model:
        return config.model
    models = [m.get("id", "") for m in body.get("data", []) if isinstance(m, dict)]
    if not models or not models[0]:
        raise ServerUnavailable(f"model server at {config.base_url} lists no model")
    return models[0]


def retry_after(headers: Any, now: float | None = None) -> float | None:
    """Seconds a 429/503 asks to wait (``Retry-After`` as seconds or an HTTP date), None if absent/bad."""
    import email.utils
    import time

    raw = (headers.get("retry-after-ms") or "").strip()
    if raw:
        try:
            return max(0.0, float(raw) / 1000)
        except ValueError:
            pass
    raw = (headers.get("retry-after") or "").strip()
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def retrying_transport(inner: Any, *, retries: int = RETRIES, max_wait_s: float = MAX_RETRY_AFTER_S,
                       sleep: Any = None) -> Any:
    """An HTTP transport that retries 429 and 503 answers, waiting what ``Retry-After`` says.

    Bounded: at most ``retries`` retries, each wait capped at ``max_wait_s`` (a longer
    Retry-After is not waited out: the answer goes offline instead). Other errors pass.
    """
    import time

    import httpx2

    pause = sleep or time.sleep

    class RetryTransport(httpx2.BaseTransport):
        def handle_request(self, request: Any) -> Any:
            for attempt in range(retries + 1):
                response = inner.handle_request(request)
                if response.status_code not in (429, 503) or attempt == retries:
                    return response
                wait = retry_after(response.headers)
                wait = min(2.0 ** attempt * 0.5, max_wait_s) if wait is None else wait
                if wait > max_wait_s:
                    return response
                response.close()
                pause(wait)
            return response  # pragma: no cover - the loop returns

        def close(self) -> None:
            inner.close()

    return RetryTransport()


def _note(text: str) -> None:
    notes = WIRE_NOTES.get()
    if notes is not None and text not in notes:
        notes.append(text)


def server_reason(exc: BaseException, limit: int = 200) -> str:
    """The reason a server gave with an error (``message`` of its JSON body), one redacted line."""
    from rlmedic.redact import redact

    body = getattr(exc, "body", None)
    reason: Any = None
    if isinstance(body, dict):
        reason = body.get("message") or body.get("detail")
        error = body.get("error")
        if not reason and isinstance(error, dict):
            reason = error.get("message")
        elif not reason and isinstance(error, str):
            reason = error
    if not reason:
        reason = getattr(exc, "message", "") or ""
        if str(reason).startswith("Error code:"):  # openai's own wording around an unparsed body
            reason = ""
    text = " ".join(redact(str(reason)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _RepairedStream:
    """An SSE byte stream read line by line and repaired on the way (see :func:`wire_repair`);
    :func:`wire_repair` mixes it with httpx2's ``SyncByteStream``, which the client requires.

    Tool-call arguments are held back and sent whole, in one chunk just before the one that
    ends the reply: a call whose arguments grew past the bound is then sent with a short
    string in their place (never parsed, never run with a cut argument, never echoed).
    """

    def __init__(self, inner: Any, max_calls: int, max_arg_chars: int) -> None:
        self.inner = inner
        self.max_calls, self.max_arg_chars = max_calls, max_arg_chars
        self.finished = self.calls_seen = self.flushed = False
        self.pending: dict[int, list[str]] = {}
        self.sizes: dict[int, int] = {}
        self.oversized: set[int] = set()
        self.dropped: set[int] = set()
        self.chunk_id = ""

    def __iter__(self) -> Any:
        buffer = b""
        skipping = False
        for data in self.inner:
            buffer += data
            while True:
                end = buffer.find(b"\n")
                if end < 0:
                    break
                line, buffer = buffer[: end + 1], buffer[end + 1:]
                if skipping:  # the tail of an over-long line
                    skipping = False
                    continue
                yield self._line(line)
            if len(buffer) > MAX_SSE_LINE:
                skipping = True
                buffer = b""
                _note(f"the server sent an SSE line over {MAX_SSE_LINE} bytes; it was dropped unread")
        if buffer and not skipping:
            yield self._line(buffer)
        yield self._flush()  # a stream cut before its end: the calls so far (the loop treats them as cut)
        self._summarize()

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    def _summarize(self) -> None:
        """Notes on what was cut (at ``[DONE]``: the client stops reading there)."""
        if self.dropped:
            _note(f"the model wrote {self.max_calls + len(self.dropped)} tool calls in one reply; only the first "
                  f"{self.max_calls} were read")
        if self.oversized:
            _note(f"a tool call's arguments exceeded {self.max_arg_chars} characters; they were not read")

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {"id": self.chunk_id, "object": "chat.completion.chunk", "created": 0, "model": "",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"

    def _flush(self) -> bytes:
        """The held-back arguments, whole, as one chunk (once)."""
        if self.flushed or not self.pending:
            return b""
        self.flushed = True
        calls = []
        for index, parts in sorted(self.pending.items()):
            text = (json.dumps(f"arguments over {self.max_arg_chars} characters, not read")
                    if index in self.oversized else "".join(parts))
            calls.append({"index": index, "function": {"arguments": text}})
        return self._chunk({"tool_calls": calls})

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:"):
            return line
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self._summarize()
            head = self._flush()
            if not self.finished:  # a complete stream: [DONE] says so even without a finish_reason
                self.finished = True
                _note("the server sent [DONE] without a finish_reason; the reply was taken as complete")
                head += self._chunk({}, "tool_calls" if self.calls_seen else "stop")
            return head + line
        compact = payload.replace(b" ", b"")
        if b'"tool_calls"' not in payload and (self.finished or b'"finish_reason":null' in compact):
            return line  # plain text chunks (most of a reply) pass unparsed
        try:
            chunk = json.loads(payload)
        except ValueError:
            return line
        if not isinstance(chunk, dict):
            return line
        self.chunk_id = chunk.get("id") or self.chunk_id
        changed = finishing = False
        empty = True
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason"):
                finishing = True
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                continue
            calls = delta.get("tool_calls")
            if delta.get("content") or delta.get("role") or any(k not in ("tool_calls", "content") for k in delta):
                empty = False
            if not calls or not isinstance(calls, list):
                continue
            kept = []
            for position, call in enumerate(calls):
                if not isinstance(call, dict):
                    continue
                index = call.get("index", position)
                index = index if isinstance(index, int) else position
                if index >= self.max_calls:
                    self.dropped.add(index)
                    continue
                function = call.get("function") if isinstance(call.get("function"), dict) else {}
                args = function.get("arguments")
                if args is not None and not isinstance(args, str):  # an object, not a string: some parsers
                    args = json.dumps(args, ensure_ascii=False)
                if args:
                    self._hold(index, args)
                function["arguments"] = ""
                call["index"] = index
                self.pending.setdefault(index, [])
                if call.get("id") or function.get("name"):
                    kept.append(call)
            delta["tool_calls"] = kept
            changed = True
            if kept:
                empty = False
            else:
                del delta["tool_calls"]
        self.calls_seen = self.calls_seen or bool(self.pending)
        if finishing:
            self.finished = True
            return self._flush() + b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n"
        if not changed:
            return line
        if empty and not chunk.get("usage"):
            return b""  # only argument fragments (held) or calls past the bound: nothing to parse now
        return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n"

    def _hold(self, index: int, args: str) -> None:
        if index in self.oversized:
            return
        size = self.sizes.get(index, 0) + len(args)
        self.sizes[index] = size
        if size > self.max_arg_chars:
            self.oversized.add(index)
            self.pending[index] = []  # freed: only the note is sent
        else:
            self.pending.setdefault(index, []).append(args)


def _json_as_sse(body: bytes) -> bytes:
    """One chat.completion body (sent to a streaming request) as the SSE chunks it stands for."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("error"):
        return b"data: " + json.dumps({"error": data["error"]}).encode() + b"\n\n"
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices[0], dict):
        error = {"message": "the server answered a streaming request with a body that is not a chat completion"}
        return b"data: " + json.dumps({"error": error}).encode() + b"\n\n"
    choice = choices[0]
    message = choice.get("message") or {}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    calls = []
    for index, call in enumerate(message.get("tool_calls") or []):
        if isinstance(call, dict):
            calls.append({**call, "index": index})
    if calls:
        delta["tool_calls"] = calls
    chunk = {"id": data.get("id") or "", "object": "chat.completion.chunk", "created": data.get("created") or 0,
             "model": data.get("model") or "", "choices": [{"index": 0, "delta": delta,
                                                           "finish_reason": choice.get("finish_reason")}]}
    out = b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
    if data.get("usage"):
        usage = {**chunk, "choices": [], "usage": data["usage"]}
        out += b"data: " + json.dumps(usage).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def wire_repair(inner: Any, *, max_calls: int | None = None, max_arg_chars: int | None = None) -> Any:
    """A transport that makes what OpenAI-compatible servers really send readable by the client.

    On a streamed chat completion (it changes nothing else):

    - tool-call arguments sent as a JSON object, not a string, become the string;
    - at most ``max_calls`` tool calls of one reply are passed on; arguments are held back
      and passed whole before the reply's last chunk, and a call whose arguments exceed
      ``max_arg_chars`` gets a short string instead (it fails as arguments that are not an
      object: never run cut, never echoed); an SSE line over :data:`MAX_SSE_LINE` is dropped;
    - ``[DONE]`` after no ``finish_reason`` gets one (the stream was complete, not cut);
    - one plain JSON body in answer to a streaming request becomes the stream it stands for.

    What it did is noted in :data:`WIRE_NOTES` for the run in progress.
    """
    import httpx2

    from rlmedic.agent.textcalls import MAX_ARG_CHARS, MAX_CALLS_PER_REPLY

    calls_cap = max_calls or MAX_CALLS_PER_REPLY
    args_cap = max_arg_chars or MAX_ARG_CHARS

    class RepairedStream(_RepairedStream, httpx2.SyncByteStream):
        pass

    class WireRepair(httpx2.BaseTransport):
        def handle_request(self, request: Any) -> Any:
            response = inner.handle_request(request)
            if (request.method != "POST" or not request.url.path.rstrip("/").endswith("/chat/completions")
                    or response.status_code != 200):
                return response
            try:
                streaming = bool(json.loads(request.content or b"{}").get("stream"))
            except (ValueError, AttributeError, httpx2.RequestNotRead):
                streaming = False
            if not streaming:
                return response
            headers = [(k, v) for k, v in response.headers.items() if k.lower() not in ("content-length", "content-encoding")]
            if "text/event-stream" in response.headers.get("content-type", ""):
                stream = RepairedStream(response.stream, calls_cap, args_cap)
                return httpx2.Response(200, headers=headers, stream=stream, request=request,
                                       extensions=response.extensions)
            body = b""
            for data in response.stream:
                body += data
                if len(body) > MAX_JSON_BODY:
                    break
            response.close()
            _note("the server answered a streaming request with one JSON body; it was read as one chunk")
            sse = _json_as_sse(body) if len(body) <= MAX_JSON_BODY else _json_as_sse(b"")
            headers = [(k, v) for k, v in headers if k.lower() != "content-type"] + [("content-type", "text/event-stream")]
            return httpx2.Response(200, headers=headers, stream=RepairedStream([sse], calls_cap, args_cap),
                                   request=request)

        def close(self) -> None:
            inner.close()

    return WireRepair()


@functools.lru_cache(maxsize=8)
def chat_model(config: LLMConfig, model: str) -> Any:
    """The LangChain chat model for ``config`` (chat completions, streamed).

    Bounded: ``max_tokens`` on every request, a read timeout for stalled servers, 429/503
    retried with ``Retry-After`` (:func:`retrying_transport`), nothing else retried; what
    servers send that the client cannot read is repaired on the wire (:func:`wire_repair`).
    Cached: building one costs ~0.2 s (HTTP clients, TLS context), and a long-lived
    process (web, Slack) makes an agent per conversation.
    """
    import httpx2

    from rlmedic.memory import collector_paused

    with collector_paused():
        from langchain_openai import ChatOpenAI  # heavy: only when the LLM engine runs

    check_allowed(config.base_url)
    timeout = httpx2.Timeout(connect=min(5.0, config.timeout_s), read=config.stall_s, write=30.0, pool=5.0)
    client = httpx2.Client(transport=wire_repair(retrying_transport(httpx2.HTTPTransport())), timeout=timeout)
    return ChatOpenAI(
        base_url=config.base_url,
        api_key=config.api_key,
        model=model,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        timeout=timeout,
        max_retries=0,
        http_client=client,
        streaming=True,
        use_responses_api=False,
        stream_usage=True,
    )
