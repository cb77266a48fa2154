"""A scripted OpenAI chat-completions server on 127.0.0.1, streaming exactly as SGLang does.

Each test gives a list of replies; the server answers the n-th chat request with the
n-th reply (the last one repeats). A reply is a :class:`Reply`: text, tool calls (name
and raw argument string, so malformed JSON can be sent), an HTTP status, or a delay.
Streaming follows SGLang's chunks: first ``role=assistant, content=""``; a tool call's
first delta has ``id`` and ``function.name``, later deltas ``id: null`` and argument
fragments; ``finish_reason`` ``tool_calls`` or ``stop``; a usage chunk when asked; then
``data: [DONE]``. Every request body is kept in ``requests`` for assertions.

Small-model and server misbehaviour is scripted per reply: ``finish_reason`` (``"length"``
for a generation cut at max_tokens, ``None`` for none), ``close_early`` (the stream stops
without a finish chunk and without ``[DONE]``), ``chunk_delay_s`` (a slow or stalled
stream), ``headers`` (``Retry-After`` on a 429/503). Replies can be loaded from recorded
JSON transcripts (:func:`replies_from`).

What real servers and parsers also do, scripted the same way: ``error_event`` (an error
object sent as an SSE event after ``error_after`` text chunks, once the 200 and headers are
out, as SGLang and vLLM do on a context overflow), ``error_message`` (the reason in a
non-200 body), ``args_as_object`` (tool-call arguments as a JSON object, not a string),
``null_id`` (a tool call whose id is null), ``plain_json`` (one JSON body in answer to a
streaming request), ``repeat_calls`` (the calls repeated that many times in one reply).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Call:
    name: str
    arguments: str  # raw: may be invalid JSON on purpose


AUTO = "auto"  # finish_reason "tool_calls" with calls, else "stop"


@dataclass
class Reply:
    content: str = ""
    calls: list[Call] = field(default_factory=list)
    status: int = 200
    delay_s: float = 0.0
    finish_reason: str | None = AUTO
    close_early: bool = False
    chunk_delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    error_event: dict[str, Any] | None = None
    error_after: int = 0
    error_message: str = "Internal server error"
    args_as_object: bool = False
    null_id: bool = False
    plain_json: bool = False
    repeat_calls: int = 1


_EXTRA = ("error_event", "error_after", "error_message", "args_as_object", "null_id", "plain_json", "repeat_calls")


def replies_from(rows: list[dict[str, Any]], fill: dict[str, str] | None = None) -> list[Reply]:
    """Replies from a recorded transcript's JSON rows; ``{name}`` in text is filled from ``fill``."""
    def sub(text: str) -> str:
        for key, value in (fill or {}).items():
            text = text.replace("{" + key + "}", value)
        return text

    out = []
    for row in rows:
        calls = [Call(c["name"], sub(c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])))
                 for c in row.get("calls", [])]
        out.append(Reply(content=sub(row.get("content", "")), calls=calls, status=row.get("status", 200),
                         delay_s=row.get("delay_s", 0.0), finish_reason=row.get("finish_reason", AUTO),
                         close_early=row.get("close_early", False), chunk_delay_s=row.get("chunk_delay_s", 0.0),
                         headers=row.get("headers", {}), **{k: row[k] for k in _EXTRA if k in row}))
    return out


def tool(name: str, **args: Any) -> Call:
    return Call(name, json.dumps(args))


class FakeOpenAI:
    def __init__(self, replies: list[Reply] | None = None, *, model: str = "fake-qwen2.5-7b",
                 models_delay_s: float = 0.0, models_status: int = 200) -> None:
        self.replies = list(replies or [])
        self.model = model
        self.models_delay_s = models_delay_s
        self.models_status = models_status
        self.models_headers: dict[str, str] = {}
        self.requests: list[dict[str, Any]] = []
        self.on_chat: Any = None  # called with each chat request body as it arrives (benchmarks)
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_reply(self, body: dict[str, Any]) -> Reply:
        if self.on_chat is not None:
            self.on_chat(body)
        with self._lock:
            self.requests.append(body)
            n = len(self.requests) - 1
        if not self.replies:
            return Reply(content="")
        return self.replies[min(n, len(self.replies) - 1)]

    # ------------------------------------------------------------------ HTTP --
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    time.sleep(fake.models_delay_s)
                    if fake.models_status != 200:
                        self._json(fake.models_status, {"error": {"message": "unavailable"}}, fake.models_headers)
                        return
                    self._json(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})
                elif self.path == "/health":
                    self._json(200, {})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": "not found"}})
                    return
                reply = fake.next_reply(body)
                time.sleep(reply.delay_s)
                if reply.status != 200:
                    self._json(reply.status, {"object": "error", "message": reply.error_message, "code": reply.status},
                               reply.headers)
                    return
                if body.get("stream") and not reply.plain_json:
                    self._stream(body, reply)
                else:
                    self._json(200, _completion(fake.model, reply))

            def _stream(self, body: dict[str, Any], reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                chunks = _chunks(fake.model, reply, bool((body.get("stream_options") or {}).get("include_usage")))
                if reply.close_early:  # the connection drops mid-answer: no finish chunk, no [DONE]
                    chunks = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is None]
                if reply.error_event is not None:  # the error comes after the 200 and some tokens
                    cut = 1 + reply.error_after
                    chunks = chunks[:cut] + [{"error": reply.error_event}]
                try:
                    for chunk in chunks:
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                        self.wfile.flush()
                        if reply.chunk_delay_s:
                            time.sleep(reply.chunk_delay_s)
                    if not reply.close_early and reply.error_event is None:
                        self.wfile.write(b"data: [DONE]\n\n")
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a slow stream (the deadline tests)
                self.close_connection = True

        return Handler


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up (the slow-server tests) is expected


_IDS = iter(range(1, 1_000_000))


def _arguments(reply: Reply, call: Call) -> Any:
    if reply.args_as_object:
        try:
            return json.loads(call.arguments)
        except ValueError:
            return call.arguments
    return call.arguments


def _completion(model: str, reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": None if reply.null_id else f"call_{next(_IDS)}", "type": "function",
             "function": {"name": c.name, "arguments": _arguments(reply, c)}}
            for c in reply.calls * reply.repeat_calls
        ]
    return {
        "id": f"chatcmpl-{next(_IDS)}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.calls else "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _chunks(model: str, reply: Reply, usage: bool) -> list[dict[str, Any]]:
    cid = f"chatcmpl-{next(_IDS)}"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    text = reply.content
    for i in range(0, len(text), 7):  # a few tokens at a time
        out.append(chunk({"content": text[i:i + 7]}))
    for index, call in enumerate(reply.calls * reply.repeat_calls):
        first = {"name": call.name, "arguments": ""}
        if reply.args_as_object:  # the whole arguments object in the first delta
            first["arguments"] = _arguments(reply, call)
        out.append(chunk({"tool_calls": [{"index": index, "id": None if reply.null_id else f"call_{next(_IDS)}",
                                          "type": "function", "function": first}]}))
        args = "" if reply.args_as_object else call.arguments
        step = max(9, len(args) // 64)  # a huge argument comes in a bounded number of chunks
        for i in range(0, len(args), step):
            out.append(chunk({"tool_calls": [{"index": index, "id": None, "type": "function",
                                              "function": {"name": None, "arguments": args[i:i + step]}}]}))
    finish = ("tool_calls" if reply.calls else "stop") if reply.finish_reason == AUTO else reply.finish_reason
    out.append(chunk({}, finish))
    if usage:
        out.append({"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                    "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
    return out
