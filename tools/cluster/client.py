"""The dashboard's state API over HTTP (``/api/v0``), read-only: the calls ``ray.util.state`` makes.

Only GET requests, to the one dashboard URL :mod:`.address` checked. Shapes (Ray 2.60,
``dashboard/modules/state/state_head.py``): list endpoints answer
``{"result": bool, "msg": str, "data": {"result": {"total", "num_after_truncation", "num_filtered",
"result": [rows], "partial_failure_warning", "warnings"}}}``; ``/api/v0/logs?node_id=`` answers
``data.result`` as ``{category: [file names]}``; ``/api/v0/logs/file?node_id=&filename=&lines=N``
streams the last N lines as text/plain (``filter_ansi_code=true`` drops colour codes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import os

import httpx

from rlmedic.errors import UserError

#: Rows one list call asks for (Ray's server-side maximum is 10,000).
LIST_LIMIT = 10_000
#: Seconds a list call may take on the server (Ray's own default is 30).
SERVER_TIMEOUT_S = 30


class StateAPIError(UserError):
    """The dashboard answered, but not with what the state API answers (one line for the user)."""


class StateClient:
    """GET-only client of one dashboard; thread-safe (one pooled ``httpx.Client``)."""

    def __init__(self, base_url: str, *, timeout: float = 30.0, headers: dict[str, str] | None = None,
                 max_connections: int = 16) -> None:
        self.base_url = base_url.rstrip("/")
        headers = dict(headers or {})
        token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
        if token and "Authorization" not in headers:  # a cluster started with RAY_AUTH_MODE=token
            headers["Authorization"] = f"Bearer {token}"
        # trust_env=False: a dashboard sits on the cluster's network; a proxy from the environment
        # would carry the cluster's logs elsewhere
        self.http = httpx.Client(
            base_url=self.base_url, timeout=timeout, headers=headers, trust_env=False,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            follow_redirects=False,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> StateClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ calls --

    def _get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        try:
            r = self.http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise StateAPIError(f"{self.base_url}{path}: {type(exc).__name__}: {exc}") from exc
        if r.status_code in (401, 403):
            raise StateAPIError(f"{self.base_url}{path}: HTTP {r.status_code}: the dashboard wants Ray's auth token "
                                "(set RAY_AUTH_TOKEN)")
        try:
            body = r.json()
        except ValueError:
            raise StateAPIError(f"{self.base_url}{path}: HTTP {r.status_code}, not the state API's JSON") from None
        if not isinstance(body, dict):
            raise StateAPIError(f"{self.base_url}{path}: unexpected answer")
        if r.status_code != 200 or body.get("result") is False:
            raise StateAPIError(f"{self.base_url}{path}: HTTP {r.status_code}: {str(body.get('msg') or '')[:300]}")
        return body

    def version(self) -> dict[str, Any]:
        """``/api/version``: ``{"version", "ray_version", "ray_commit", "session_name"}``."""
        body = self._get_json("/api/version")
        return body

    def _list(self, kind: str, **params: Any) -> list[dict[str, Any]]:
        q: dict[str, Any] = {"limit": LIST_LIMIT, "timeout": SERVER_TIMEOUT_S, "detail": "true", **params}
        body = self._get_json(f"/api/v0/{kind}", q)
        try:
            rows = body["data"]["result"]["result"]
        except (KeyError, TypeError):
            raise StateAPIError(f"{self.base_url}/api/v0/{kind}: no data.result.result in the answer") from None
        return [r for r in rows if isinstance(r, dict)]

    def nodes(self) -> list[dict[str, Any]]:
        return self._list("nodes")

    def actors(self) -> list[dict[str, Any]]:
        return self._list("actors")

    def workers(self) -> list[dict[str, Any]]:
        return self._list("workers")

    def jobs(self) -> list[dict[str, Any]]:
        # detail: the start and end times (the newest job is the default one)
        body = self._get_json("/api/v0/jobs", {"limit": LIST_LIMIT, "timeout": SERVER_TIMEOUT_S, "detail": "true"})
        try:
            rows = body["data"]["result"]["result"]
        except (KeyError, TypeError):
            raise StateAPIError(f"{self.base_url}/api/v0/jobs: no data.result.result in the answer") from None
        return [r for r in rows if isinstance(r, dict)]

    def log_files(self, node_id: str) -> dict[str, list[str]]:
        """The node's log files by Ray's category (``worker_err``, ``worker_out``, ``internal``, ...)."""
        body = self._get_json("/api/v0/logs", {"node_id": node_id, "timeout": SERVER_TIMEOUT_S})
        result = (body.get("data") or {}).get("result")
        if not isinstance(result, dict):
            raise StateAPIError(f"{self.base_url}/api/v0/logs: no file listing for node {node_id[:8]}")
        return {str(k): [str(n) for n in v] for k, v in result.items() if isinstance(v, list)}

    def tail(self, node_id: str, filename: str, *, lines: int, max_bytes: int) -> tuple[bytes, bool]:
        """The last ``lines`` lines of one file, at most ``max_bytes`` of their end; (bytes, cut)."""
        params = {"node_id": node_id, "filename": filename, "lines": lines, "filter_ansi_code": "true",
                  "timeout": SERVER_TIMEOUT_S}
        kept = bytearray()
        cut = False
        try:
            with self.http.stream("GET", "/api/v0/logs/file", params=params) as r:
                if r.status_code != 200:
                    r.read()
                    raise StateAPIError(f"{filename} on node {node_id[:8]}: HTTP {r.status_code}: {r.text[:200]}")
                for chunk in _chunks(r.iter_bytes()):
                    kept += chunk
                    if len(kept) > max_bytes:  # keep the end: the newest lines matter most
                        del kept[: len(kept) - max_bytes]
                        cut = True
        except httpx.HTTPError as exc:
            raise StateAPIError(f"{filename} on node {node_id[:8]}: {type(exc).__name__}: {exc}") from exc
        if cut:  # the first line is a piece of a line
            nl = kept.find(b"\n")
            del kept[: nl + 1 if nl >= 0 else len(kept)]
        return bytes(kept), cut


def _chunks(it: Iterator[bytes]) -> Iterator[bytes]:
    for chunk in it:
        if chunk:
            yield chunk
