"""A fake GitHub REST API on 127.0.0.1 for the issue-sync tests.

It speaks the parts of the real protocol the client relies on: ``Link`` pagination
(``rel="next"``/``rel="last"``), strong ``ETag`` headers with ``If-None-Match`` -> 304,
rate-limit 403 answers with ``x-ratelimit-*`` headers, and injected 5xx errors. Tests
write the issues, timelines and releases it serves, and read the request log.

It can also be hostile (issue 31), per path: ``fake.hostile[r"/issues$"] = "loop"`` and so on
(see :data:`HOSTILE`); and it can serve HTTPS with a throw-away certificate
(:func:`self_signed`), to show a link from https to http is not followed.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

#: What a hostile path does instead of answering normally.
HOSTILE = {
    "loop": "a normal page whose rel=next link points back to page 1 (pages 1 -> 2 -> 1 ...)",
    "empty_forever": "an empty list with a rel=next link to a new page, forever",
    "trickle": "a 200 whose body comes one byte every trickle_s seconds",
    "huge": "a 200 announcing 1.2 GB and sending zeros until the client hangs up",
    "endless": "a chunked 200 that never ends",
    "nested": "a 200 whose JSON nests 100,000 levels deep",
    "nested_900": "a 200 whose JSON nests 900 levels (parses, but deeper than any real answer)",
    "wrong_types": "a 200 whose items have the wrong JSON types (numbers as strings, strings for objects...)",
    "not_a_list": "a 200 whose body is an object where a list is expected",
    "echo_auth": "a 401 whose message repeats the Authorization header",
    "downgrade": "a normal page whose rel=next link is the same host over http",
    "gzip": "a normal page, gzip-compressed (as GitHub answers a client that accepts it)",
    "gzip_bomb": "a 100 KB gzip body that inflates to 100 MB",
}


@dataclass
class Request:
    path: str
    query: dict[str, str]
    conditional: bool
    status: int
    authorization: str


@dataclass
class FakeGitHub:
    page_size: int = 2
    issues: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # repo -> issue objects
    timelines: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    releases: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: for sync-code: repo -> commit list items (newest first), (repo, sha) -> commit with its files, repo -> tags
    commits: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    commit_details: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    tags: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    faults: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)  # (path regex, status, headers)
    log: list[Request] = field(default_factory=list)
    url: str = ""
    hostile: dict[str, str] = field(default_factory=dict)  # path regex -> a key of HOSTILE
    trickle_s: float = 0.2
    sent: dict[str, int] = field(default_factory=dict)  # behaviour -> bytes sent (how far a client let it go)
    errors: list[str] = field(default_factory=list)  # connections that failed, e.g. plain HTTP sent to the TLS port

    # -- test helpers ------------------------------------------------------------------
    def add_issue(self, repo: str, number: int, *, timeline: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
        owner = repo.split("/")[0]
        issue = {
            "number": number,
            "title": f"issue {number}",
            "body": "",
            "state": "closed",
            "state_reason": "completed",
            "labels": [],
            "user": {"login": f"reporter{number}"},
            "author_association": "NONE",
            "created_at": "2025-01-01T00:00:00Z",
            "updated_at": f"2025-02-{number % 28 + 1:02d}T00:00:00Z",
            "closed_at": "2025-02-01T00:00:00Z",
            "html_url": f"https://github.com/{repo}/issues/{number}",
            "comments": 0,
            "reactions": {"+1": 0},
            "repository_url": f"https://api.github.com/repos/{repo}",
            "node_id": f"I_{owner}_{number}",
        }
        issue.update(fields)
        self.issues.setdefault(repo, []).append(issue)
        self.timelines[(repo, number)] = timeline or []
        return issue

    def add_commit(self, repo: str, sha: str, message: str, date: str, files: dict[str, str]) -> None:
        """A commit as ``GET /repos/R/commits`` lists it (newest first: add oldest first) and as
        ``GET /repos/R/commits/SHA`` details it (``files``: path -> unified-diff patch text)."""
        item = {"sha": sha, "commit": {"message": message, "committer": {"date": date}, "author": {"date": date}}}
        self.commits.setdefault(repo, []).insert(0, item)
        self.commit_details[(repo, sha)] = {**item, "files": [{"filename": k, "patch": v} for k, v in files.items()]}

    def fail(self, path_regex: str, status: int, headers: dict[str, str] | None = None, times: int = 1) -> None:
        for _ in range(times):
            self.faults.append((path_regex, status, headers or {}))

    def requests_to(self, pattern: str) -> list[Request]:
        return [r for r in self.log if re.search(pattern, r.path)]

    # -- serving -------------------------------------------------------------------------
    def route(self, path: str, query: dict[str, str]) -> Any:
        m = re.match(r"/repos/([^/]+/[^/]+)/", path)
        if not m or (m.group(1) not in self.issues and m.group(1) not in self.commits):
            return None  # GitHub answers 404 for a repo that does not exist
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/commits", path)
        if m:
            since = query.get("since")
            return [c for c in self.commits.get(m.group(1), []) if not since or c["commit"]["committer"]["date"] >= since]
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/commits/(\w+)", path)
        if m:
            return self.commit_details.get((m.group(1), m.group(2)))
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/tags", path)
        if m:
            return self.tags.get(m.group(1), [])
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues", path)
        if m:
            items = sorted(self.issues.get(m.group(1), []), key=lambda i: i["updated_at"], reverse=True)
            since = query.get("since")
            return [i for i in items if i.get("state") == query.get("state", "open") and (not since or i["updated_at"] >= since)]
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/timeline", path)
        if m:
            key = (m.group(1), int(m.group(2)))
            return self.timelines[key] if key in self.timelines else None
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/releases", path)
        if m:
            return self.releases.get(m.group(1), [])
        return None


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            conditional = "If-None-Match" in self.headers
            auth = self.headers.get("Authorization", "")

            def record(status: int) -> None:
                fake.log.append(Request(parts.path, query, conditional, status, auth))

            for i, (pattern, status, headers) in enumerate(fake.faults):
                if re.search(pattern, parts.path):
                    fake.faults.pop(i)
                    record(status)
                    self._send(status, json.dumps({"message": f"injected {status}"}).encode(), {"Content-Type": "application/json", **headers})
                    return
            for pattern, behaviour in fake.hostile.items():
                if re.search(pattern, parts.path):
                    record(401 if behaviour == "echo_auth" else 200)
                    self._hostile(behaviour, parts.path, query, auth)
                    return
            data = fake.route(parts.path, query)
            if data is None:
                record(404)
                self._send(404, b'{"message": "Not Found"}', {"Content-Type": "application/json"})
                return
            if isinstance(data, dict):  # one object (a commit with its files): no pages
                body = json.dumps(data).encode()
                etag = '"' + hashlib.sha1(body).hexdigest() + '"'
                if self.headers.get("If-None-Match") == etag:
                    record(304)
                    self._send(304, b"", {"ETag": etag})
                    return
                record(200)
                self._send(200, body, {"Content-Type": "application/json", "ETag": etag})
                return
            page = int(query.get("page", "1"))
            size = fake.page_size
            last = max(1, -(-len(data) // size))
            body = json.dumps(data[(page - 1) * size : page * size]).encode()
            headers = {"Content-Type": "application/json", "ETag": '"' + hashlib.sha1(body).hexdigest() + '"'}
            links = []
            base = f"{fake.url}{parts.path}"
            if page < last:
                links.append(f'<{base}?{urlencode({**query, "page": page + 1})}>; rel="next"')
                links.append(f'<{base}?{urlencode({**query, "page": last})}>; rel="last"')
            if page > 1:
                links.append(f'<{base}?{urlencode({**query, "page": 1})}>; rel="first"')
            if links:
                headers["Link"] = ", ".join(links)
            if self.headers.get("If-None-Match") == headers["ETag"]:
                record(304)
                self._send(304, b"", {"ETag": headers["ETag"]})
                return
            record(200)
            self._send(200, body, headers)

        def _hostile(self, behaviour: str, path: str, query: dict[str, str], auth: str) -> None:
            page = int(query.get("page", "1"))
            base = f"{fake.url}{path}"
            json_type = {"Content-Type": "application/json"}
            try:
                if behaviour in ("loop", "downgrade", "empty_forever"):
                    data = fake.route(path, query) or []
                    body = json.dumps(data[: fake.page_size] if behaviour != "empty_forever" else []).encode()
                    target = {"loop": page % 2 + 1, "downgrade": page + 1, "empty_forever": page + 1}[behaviour]
                    rest = {k: v for k, v in query.items() if k != "page"}
                    link = f"{base}?{urlencode({**rest, 'page': target} if target > 1 else rest)}"  # page 1: the first URL
                    if behaviour == "downgrade":
                        link = "http://" + link.split("://", 1)[1]
                    self._send(200, body, {**json_type, "Link": f'<{link}>; rel="next"'})
                elif behaviour == "trickle":
                    body = json.dumps(fake.route(path, query) or []).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    for byte in body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        self._count(behaviour, 1)
                        time.sleep(fake.trickle_s)
                elif behaviour == "huge":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(1_200_000_000))
                    self.end_headers()
                    self._zeros(behaviour, 1_200_000_000)
                elif behaviour == "endless":
                    self.protocol_version = "HTTP/1.1"
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    piece = b"[" + b"0," * 32767
                    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
                    while True:
                        self.wfile.write(chunk)
                        self._count(behaviour, len(piece))
                elif behaviour in ("nested", "nested_900"):
                    depth = 100_000 if behaviour == "nested" else 900
                    self._send(200, b"[" * depth + b"]" * depth, json_type)
                elif behaviour == "wrong_types":
                    self._send(200, json.dumps(WRONG_TYPES).encode(), json_type)
                elif behaviour == "not_a_list":
                    self._send(200, json.dumps({"items": [], "message": "an object"}).encode(), json_type)
                elif behaviour in ("gzip", "gzip_bomb"):
                    import gzip

                    if behaviour == "gzip":
                        raw = json.dumps((fake.route(path, query) or [])[: fake.page_size]).encode()
                    else:
                        raw = b"[" + b" " * (100 << 20) + b"]"
                    self._send(200, gzip.compress(raw), {**json_type, "Content-Encoding": "gzip"})
                elif behaviour == "echo_auth":
                    message = f"Bad credentials: the header you sent was 'Authorization: {auth}'"
                    self._send(401, json.dumps({"message": message}).encode(), json_type)
                else:
                    raise ValueError(f"unknown hostile behaviour {behaviour!r}")
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass  # the client hung up: what a careful client does

        def _zeros(self, behaviour: str, total: int) -> None:
            piece = b"0" * 65536
            self.wfile.write(b"[")
            sent = 1
            while sent < total:
                self.wfile.write(piece)
                sent += len(piece)
                self._count(behaviour, len(piece))

        def _count(self, behaviour: str, n: int) -> None:
            fake.sent[behaviour] = fake.sent.get(behaviour, 0) + n

    return Handler


#: Items of every wrong type a list page could hold: none may raise, the one good issue is kept.
WRONG_TYPES: list[Any] = [
    1, "x", None, [], True,
    {"number": "7", "title": 5},
    {"number": True, "title": "a bool is no number"},
    {"number": 10**30, "title": "too big"},
    {"number": 8, "title": ["list"], "body": {"x": 1}, "labels": "bug", "user": "me", "comments": "many",
     "created_at": 5, "updated_at": None, "closed_at": [], "author_association": 3, "state_reason": 1},
    {"number": 9, "labels": [None, 3, {"name": 4}, {"name": "ok"}], "user": {"login": 5}, "pull_request": None,
     "event": "commented", "source": "nope", "draft": False, "tag_name": 3, "body": "fixed in #12 and #" + "9" * 5000},
    {"event": "cross-referenced", "source": {"issue": "nope"}},
    {"event": "cross-referenced", "source": {"issue": {"number": "1", "pull_request": {"merged_at": 5}}}},
    {"event": "closed", "commit_id": 42},
]


def self_signed(folder: Any) -> tuple[str, str]:
    """A throw-away certificate for 127.0.0.1 (``openssl``): (cert file, key file)."""
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class FakeGitHubServer:
    """Runs a :class:`FakeGitHub` on an ephemeral loopback port in a thread."""

    def __init__(self, fake: FakeGitHub, tls: tuple[str, str] | None = None) -> None:
        self.fake = fake
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
        self.httpd.daemon_threads = True  # a hostile answer may still be writing when the test ends
        scheme = "http"
        if tls:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            # the handshake in the handler thread, so a failed one (plain HTTP: the token in clear) is recorded
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
            scheme = "https"
        self.httpd.handle_error = self._record_error  # type: ignore[method-assign]
        fake.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _record_error(self, request: Any, client_address: Any) -> None:
        import sys

        self.fake.errors.append(repr(sys.exc_info()[1]))

    def __enter__(self) -> FakeGitHub:
        self.thread.start()
        return self.fake

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
