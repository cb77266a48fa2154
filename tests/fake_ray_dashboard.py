"""A Ray dashboard's state API on a loopback socket, for the fast tests and the 64-node benchmark.

It speaks the real endpoints' JSON (Ray 2.60 ``dashboard/modules/state/state_head.py`` and
``state_api_utils.py``): rows and listings are the ones recorded from a real two-node cluster in
``tests/data/ray/`` (``recorded()``), or those rows cloned onto N nodes (``many_nodes()``). Log files are
served as the real ``/api/v0/logs/file`` serves them: the last ``lines`` lines, colour codes dropped
when ``filter_ansi_code=true``. Every request is recorded (method, path, query) so a test can check the
client only ever GETs. ``latency_s`` delays every answer (a remote dashboard is not instant).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DATA = Path(__file__).parent / "data" / "ray"
ANSI = re.compile(rb"\x1b\[[\d;]+m")


def _rows(name: str) -> list[dict[str, Any]]:
    return json.loads((DATA / f"{name}.json").read_text())["data"]["result"]["result"]


@dataclass
class FakeState:
    version: dict[str, Any]
    nodes: list[dict[str, Any]]
    actors: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    #: node id -> {category: [names]} and node id -> {name: content}
    listings: dict[str, dict[str, list[str]]]
    files: dict[str, dict[str, bytes]]
    latency_s: float = 0.0
    token: str = ""  # set: every request must carry "Authorization: Bearer <token>" (RAY_AUTH_MODE=token)
    requests: list[tuple[str, str, dict[str, list[str]]]] = field(default_factory=list)

    def append(self, node_id: str, name: str, more: bytes) -> None:
        self.files[node_id][name] = self.files[node_id].get(name, b"") + more


def recorded() -> FakeState:
    """The state of the real two-node cluster the recording came from (its job failed as in the slow test)."""
    nodes = _rows("nodes")
    head = next(n["node_id"] for n in nodes if n["is_head_node"])
    node2 = next(n["node_id"] for n in nodes if not n["is_head_node"])
    listings = {head: json.loads((DATA / "logs_head.json").read_text())["data"]["result"],
                node2: json.loads((DATA / "logs_node2.json").read_text())["data"]["result"]}
    files: dict[str, dict[str, bytes]] = {head: {}, node2: {}}
    for node_id, listing in listings.items():
        for names in listing.values():
            for name in names:
                path = DATA / "logs" / name
                if path.is_file():
                    files[node_id][name] = path.read_bytes()
                elif not name.endswith("/"):
                    files[node_id][name] = f"{name}: a Ray system log (not part of the recording)\n".encode()
    return FakeState(version=json.loads((DATA / "version.json").read_text()), nodes=nodes, actors=_rows("actors"),
                     workers=_rows("workers"), jobs=_rows("jobs"), listings=listings, files=files)


def many_nodes(count: int, *, workers_per_node: int = 8, lines_per_file: int = 2000, system_files: int = 40) -> FakeState:
    """``count`` nodes cloned from the recorded worker node, each with ``workers_per_node`` actors of the
    recorded job (one .out and one .err each, ``lines_per_file`` lines) and Ray's system logs."""
    base = recorded()
    node_t = next(n for n in base.nodes if not n["is_head_node"])
    head_t = next(n for n in base.nodes if n["is_head_node"])
    actor_t = next(a for a in base.actors if a["class_name"] == "TrainWorker")
    worker_t = next(w for w in base.workers if w["pid"] == actor_t["pid"])
    job = base.jobs[0]
    state = FakeState(version=base.version, nodes=[copy.deepcopy(head_t)], actors=[], workers=[], jobs=base.jobs,
                      listings={head_t["node_id"]: base.listings[head_t["node_id"]]},
                      files={head_t["node_id"]: base.files[head_t["node_id"]]})
    line = b"20261129-00:08:16.867 TrainWorker INFO: step 1 rollout 512 samples, reward mean 0.41 loss 0.0123\n"
    for i in range(count - 1):
        nid = f"{i:04x}" + node_t["node_id"][4:]
        node = copy.deepcopy(node_t)
        node.update(node_id=nid, node_ip=f"10.0.{i // 250}.{i % 250 + 1}", node_name=f"10.0.{i // 250}.{i % 250 + 1}")
        state.nodes.append(node)
        listing: dict[str, list[str]] = {"worker_out": [], "worker_err": [], "raylet": ["raylet.out", "raylet.err"],
                                         "internal": [f"python-core-worker-{k}.log" for k in range(system_files)]}
        files: dict[str, bytes] = {}
        for k in range(workers_per_node):
            pid = 20000 + i * 100 + k
            wid = f"{i:04x}{k:04x}" + worker_t["worker_id"][8:]
            actor = copy.deepcopy(actor_t)
            actor.update(actor_id=f"{i:04x}{k:04x}" + actor_t["actor_id"][8:], node_id=nid, pid=pid, state="ALIVE",
                         death_cause=None)
            state.actors.append(actor)
            worker = copy.deepcopy(worker_t)
            worker.update(worker_id=wid, node_id=nid, pid=pid, is_alive=True, exit_type=None, exit_detail=None, end_time_ms=0)
            state.workers.append(worker)
            for stream in ("out", "err"):
                name = f"worker-{wid}-{job['job_id']}-{pid}.{stream}"
                listing[f"worker_{stream}"].append(name)
                files[name] = line * lines_per_file
        for names in listing.values():
            for name in names:
                files.setdefault(name, b"system log line\n" * 10)
        state.listings[nid] = listing
        state.files[nid] = files
    return state


class _Handler(BaseHTTPRequestHandler):
    state: FakeState  # set on the subclass the server makes

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reply(self, result: Any, status: int = 200, msg: str = "") -> None:
        # routes.rest_response(convert_google_style=False): {"result": ok, "msg": ..., "data": {"result": ...}}
        self._json(status, {"result": status == 200, "msg": msg, "data": {"result": result}})

    def _list(self, rows: list[dict[str, Any]], query: dict[str, list[str]]) -> None:
        limit = int(query.get("limit", ["100"])[0])
        if limit > 10_000:
            self._reply(None, 400, f"Given limit {limit} exceeds the supported limit 10000.")
            return
        shown = rows[:limit]
        self._reply({"total": len(rows), "num_after_truncation": len(shown), "num_filtered": len(shown),
                     "result": shown, "partial_failure_warning": "", "warnings": None})

    def do_POST(self) -> None:  # noqa: N802 - the client must never write; recorded and refused
        self.state.requests.append(("POST", self.path, {}))
        self._json(405, {"result": False, "msg": "read-only fake"})

    do_PUT = do_DELETE = do_PATCH = do_POST

    def do_GET(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        st = self.state
        st.requests.append(("GET", parts.path, query))
        if st.token and self.headers.get("Authorization") != f"Bearer {st.token}":
            body = b"Unauthorized: Missing authentication token"
            self.send_response(401)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if st.latency_s:
            time.sleep(st.latency_s)
        path = parts.path
        if path == "/api/version":
            self._json(200, st.version)
        elif path in ("/api/v0/nodes", "/api/v0/actors", "/api/v0/workers", "/api/v0/jobs"):
            self._list(getattr(st, path.rsplit("/", 1)[1]), query)
        elif path == "/api/v0/logs":
            node_id = query.get("node_id", [None])[0]
            if not node_id:
                self._reply(None, 400, "Both node id and node ip are not provided. Please provide at least one of them.")
            elif node_id not in st.listings:
                self._reply(None, 500, f"Agent for node id: {node_id} doesn't exist.")
            else:
                self._reply(st.listings[node_id])
        elif path == "/api/v0/logs/file":
            node_id = query.get("node_id", [""])[0]
            name = query.get("filename", [""])[0]
            content = st.files.get(node_id, {}).get(name)
            if content is None:
                body = f"Log file {name} not found on node {node_id}".encode()
                self.send_response(500)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            lines = int(query.get("lines", ["1000"])[0])
            if lines != -1:
                content = b"".join(content.splitlines(keepends=True)[-lines:])
            if query.get("filter_ansi_code", ["false"])[0].lower() == "true":
                content = ANSI.sub(b"", content)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)
        else:
            self._json(404, {"result": False, "msg": f"no route {path}"})


class FakeDashboard:
    """``with FakeDashboard(state) as url:`` serves ``state`` on 127.0.0.1 until the block ends."""

    def __init__(self, state: FakeState) -> None:
        self.state = state
        handler = type("Handler", (_Handler,), {"state": state})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
