"""A fake GitHub REST API on 127.0.0.1 for the issue-sync tests.

It speaks the parts of the real protocol the client relies on: ``Link`` pagination
(``rel="next"``/``rel="last"``), strong ``ETag`` headers with ``If-None-Match`` -> 304,
rate-limit 403 answers with ``x-ratelimit-*`` headers, and injected 5xx errors. Tests
write the issues, timelines and releases it serves, and read the request log.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit


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

    return Handler


class FakeGitHubServer:
    """Runs a :class:`FakeGitHub` on an ephemeral loopback port in a thread."""

    def __init__(self, fake: FakeGitHub) -> None:
        self.fake = fake
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
        fake.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeGitHub:
        self.thread.start()
        return self.fake

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
