"""A small fake of the Slack Web API on 127.0.0.1 that records every call (bolt's own test pattern).

It speaks the real protocol over a real socket: ``POST /api/<method>`` with form or JSON
bodies and a Bearer token, answered with Slack's JSON shapes (``auth.test``,
``chat.postMessage`` with a fresh ``ts``, ``chat.update``, the three steps of
``files_upload_v2``), and ``GET /files/<name>`` serving the bytes of files a test
registered, only to requests carrying the bot token. ``calls`` keeps each request's
method, headers, parsed arguments and raw body for assertions.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

BOT_TOKEN = "xoxb-1111111111-2222222222-FakeBotTokenForTests"


@dataclass
class ApiCall:
    method: str
    args: dict[str, Any]
    headers: dict[str, str]
    raw: bytes = b""
    response: dict[str, Any] = field(default_factory=dict)


@dataclass
class FileGet:
    name: str
    authorization: str
    status: int


class FakeSlack:
    def __init__(self, token: str = BOT_TOKEN) -> None:
        self.token = token
        self.calls: list[ApiCall] = []
        self.file_gets: list[FileGet] = []
        self.uploads: list[bytes] = []
        self.files: dict[str, bytes] = {}
        self._ts = 1700000000.000100
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_url(self) -> str:
        return self.url + "/api/"

    def serve_file(self, name: str, data: bytes) -> dict[str, Any]:
        """Register a file; returns the ``files`` entry of a message event that shares it."""
        self.files[name] = data
        return {"id": f"F{len(self.files):04d}", "name": name, "size": len(data), "mimetype": "text/plain",
                "url_private": f"{self.url}/files/{name}", "url_private_download": f"{self.url}/files/{name}?download=1"}

    def start(self) -> FakeSlack:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- queries for tests -----------------------------------------------------

    def of(self, method: str) -> list[ApiCall]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def posted_text(self) -> str:
        """Everything the bot sent: every argument of every call and every uploaded byte."""
        with self._lock:
            parts = [c.raw.decode("utf-8", "replace") + json.dumps(c.args) for c in self.calls]
            parts += [u.decode("utf-8", "replace") for u in self.uploads]
        return "\n".join(parts)

    def wait_for(self, predicate: Callable[[FakeSlack], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out; calls so far: {[c.method for c in self.calls]}")

    # -- the server ------------------------------------------------------------

    def _next_ts(self) -> str:
        with self._lock:
            self._ts += 1
            return f"{self._ts:.6f}"

    def _answer(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {"ok": True, "url": "https://example.slack.com/", "team": "T", "user": "rlmedic", "team_id": "T0001",
                    "user_id": "UBOT", "bot_id": "BBOT"}
        if method == "chat.postMessage":
            return {"ok": True, "channel": args.get("channel"), "ts": self._next_ts(), "message": {"text": args.get("text")}}
        if method == "chat.update":
            return {"ok": True, "channel": args.get("channel"), "ts": args.get("ts")}
        if method == "files.getUploadURLExternal":
            fid = f"FUP{len(self.uploads) + 1}"
            return {"ok": True, "upload_url": f"{self.url}/upload/{fid}", "file_id": fid}
        if method == "files.completeUploadExternal":
            files = args.get("files")
            if isinstance(files, str):
                files = json.loads(files)
            return {"ok": True, "files": [{"id": f["id"], "title": f.get("title")} for f in files or []]}
        return {"ok": True}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                url = urllib.parse.urlparse(self.path)
                name = urllib.parse.unquote(url.path.removeprefix("/files/"))
                auth = self.headers.get("Authorization", "")
                ok = url.path.startswith("/files/") and name in fake.files and auth == f"Bearer {fake.token}"
                with fake._lock:
                    fake.file_gets.append(FileGet(name, auth, 200 if ok else 403))
                if ok:
                    self._send(200, fake.files[name], "application/octet-stream")
                else:
                    self._send(403, b"forbidden", "text/plain")

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                url = urllib.parse.urlparse(self.path)
                if url.path.startswith("/upload/"):
                    with fake._lock:
                        fake.uploads.append(raw)
                    self._send(200, b"OK - uploaded", "text/plain")
                    return
                method = url.path.removeprefix("/api/")
                ctype = self.headers.get("Content-Type", "")
                if "json" in ctype:
                    args = json.loads(raw or b"{}")
                else:
                    args = {k: v[0] for k, v in urllib.parse.parse_qs(raw.decode("utf-8")).items()}
                    args.update({k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()})
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    answer = {"ok": False, "error": "invalid_auth"}
                else:
                    answer = fake._answer(method, args)
                with fake._lock:
                    fake.calls.append(ApiCall(method, args, dict(self.headers), raw, answer))
                self._send(200, json.dumps(answer).encode())

            def log_message(self, fmt: str, *args: Any) -> None:
                pass

        return Handler
