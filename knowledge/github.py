"""A small GitHub REST client for reading issue trackers, polite by construction.

Why not a general SDK: syncing a tracker needs exactly four behaviours and each one is
easy to get subtly wrong, so they live here, tested against a fake API on loopback:

- pagination through ``Link: <...>; rel="next"`` headers (never by guessing page numbers);
- conditional requests: every response's ``ETag`` is stored per URL with a slimmed copy
  of its body, and the next request sends ``If-None-Match``; a ``304`` answers from the
  cache and, for authenticated requests, costs nothing against the rate limit;
- rate limits: a ``403``/``429`` with ``x-ratelimit-remaining: 0`` (or ``retry-after``)
  prints one clear line saying how long we wait and why, waits at most ``max_wait``
  seconds, and otherwise stops with a :class:`UserError` naming the reset time;
- ``5xx`` and connection errors are retried with exponential backoff.

It does not trust the server either: each request has a whole-request deadline (not
only a per-read timeout, which a body trickling one byte at a time never trips), a
body-size cap (a huge page or an endless chunked body is refused while it streams),
a nesting-depth cap on the JSON, a bounded page count and loop detection on ``Link``
pagination, and it never follows a link to another host or from https to http (the
token would travel in clear). A message the server sends back is redacted, the token
masked, before it is shown.

The token is read from an environment variable the user names; it is sent only in the
``Authorization`` header and never printed. Under pytest only loopback URLs are allowed,
so no test can reach the internet by mistake.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from rlmedic.errors import UserError

PUBLIC_API = "https://api.github.com"
#: Longest wait for a rate-limit reset before giving up with a message (seconds).
MAX_WAIT_S = 15 * 60
RETRIES = 4
#: Rate-limit waits for one request before giving up (a server that keeps answering 403).
MAX_RATE_WAITS = 3
BACKOFF_S = 1.0
TIMEOUT_S = 30.0
#: Whole-request deadline (connect, headers, body) and body cap; ``RLMEDIC_GITHUB_DEADLINE_S``
#: and ``RLMEDIC_GITHUB_MAX_BYTES`` override them. A real page of 100 issues is a few MB.
DEADLINE_S = 30.0
MAX_BODY_BYTES = 24 * 1024 * 1024
#: A transfer slower than MIN_BYTES_PER_S on average once STALL_S have passed is a stalled server
#: or proxy (a body trickling a byte a second is refused at 8 s, so ``sync-issues`` ends within
#: 10 s, not at the 30 s deadline; a real page of a few MB on a slow line is still read).
STALL_S = 8.0
MIN_BYTES_PER_S = 8 * 1024
#: JSON nesting GitHub never comes near (an issue page is ~5 levels deep).
MAX_JSON_DEPTH = 64
#: Pages one pagination follows at most (100 per page: 100,000 issues).
MAX_PAGES = 1000
#: Characters of a server's error message shown.
MESSAGE_CHARS = 300
API_VERSION = "2022-11-28"

#: on_wait(message) is called with one human line before each wait.
WaitNotice = Callable[[str], None]


@dataclass
class CachedResponse:
    etag: str
    next: str | None
    body: Any
    stamp: str = ""  # what the caller knew was current when it read this (an issue's updated_at)


@dataclass
class Stats:
    requests: int = 0
    not_modified: int = 0
    conditional: int = 0
    retries: int = 0
    waited_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 1) if isinstance(v, float) else v for k, v in vars(self).items()}


@dataclass
class EtagCache:
    """URL -> (ETag, next-page URL, slimmed body), kept in one JSON file beside the index."""

    path: Path | None = None
    entries: dict[str, CachedResponse] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> EtagCache:
        if not path.exists():
            return cls(path=path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            entries = {url: CachedResponse(**e) for url, e in raw.get("entries", {}).items()}
        except (OSError, ValueError, TypeError, AttributeError, RecursionError):
            # a damaged cache only costs full requests, never wrong data
            return cls(path=path)
        return cls(path=path, entries=entries)

    def save(self) -> None:
        from rlmedic.settings import private_file

        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = {"version": 1, "entries": {u: vars(e) for u, e in self.entries.items()}}
        with private_file(tmp, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, separators=(",", ":")))
        os.replace(tmp, self.path)


def parse_link_next(header: str | None) -> str | None:
    """The ``rel="next"`` URL of an RFC 8288 ``Link`` header, or None."""
    if not header:
        return None
    for part in header.split(","):
        section = part.split(";")
        if len(section) < 2:
            continue
        url = section[0].strip()
        if not (url.startswith("<") and url.endswith(">")):
            continue
        for param in section[1:]:
            name, _, value = param.strip().partition("=")
            if name.strip() == "rel" and "next" in value.strip().strip('"').split():
                return url[1:-1]
    return None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_from_env(name: str | None) -> str | None:
    """The token in environment variable ``name`` (None when unset or empty)."""
    if not name:
        return None
    value = os.environ.get(name, "").strip()
    return value or None


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UserError(f"{name}={raw!r}: expected a positive number")
    return value


def json_depth_over(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists/dicts deeper than ``limit`` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n:,} bytes"


class _Deadline(Exception):
    """The whole request took longer than its deadline."""


class _TooBig(Exception):
    """The body grew past the cap."""


class _Stalled(Exception):
    """Past :data:`STALL_S`, the bytes came slower than :data:`MIN_BYTES_PER_S` on average."""


def _reset_clock(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%H:%M:%S UTC")


#: What resolvers say when a host name cannot be looked up (glibc, musl, macOS).
_NO_NAME = ("name or service not known", "temporary failure in name resolution", "nodename nor servname",
            "no address associated with hostname", "name does not resolve", "getaddrinfo failed")


def unresolvable(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) is a failed host-name lookup: retrying will not help."""
    import socket

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, socket.gaierror) or any(s in str(exc).lower() for s in _NO_NAME):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class GitHubClient:
    """GET-only client with ETag caching, Link pagination, rate-limit waits and retries."""

    def __init__(
        self,
        api_url: str = PUBLIC_API,
        *,
        token: str | None = None,
        cache: EtagCache | None = None,
        max_wait: float = MAX_WAIT_S,
        retries: int = RETRIES,
        backoff: float = BACKOFF_S,
        timeout: float = TIMEOUT_S,
        on_wait: WaitNotice | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: Any = None,
        deadline: float | None = None,
        max_bytes: int | None = None,
        verify: Any = True,
        stall_s: float = STALL_S,
    ) -> None:
        parts = urlsplit(api_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(f"--api-url {api_url!r}: not an http(s) URL")
        if "PYTEST_CURRENT_TEST" in os.environ and not _is_loopback(parts.hostname):
            raise UserError(f"--api-url {api_url!r}: tests may only talk to a loopback address")
        self.api_url = api_url.rstrip("/")
        self._host = parts.netloc
        self._scheme = parts.scheme
        self.deadline = deadline if deadline is not None else _env_number("RLMEDIC_GITHUB_DEADLINE_S", DEADLINE_S)
        self.max_bytes = int(max_bytes if max_bytes is not None else _env_number("RLMEDIC_GITHUB_MAX_BYTES", MAX_BODY_BYTES))
        self.stall_s = stall_s
        timeout = min(timeout, self.deadline)  # a read never waits past the whole request's deadline
        self.token = token
        self.cache = cache if cache is not None else EtagCache()
        self.max_wait = max_wait
        self.retries = retries
        self.backoff = backoff
        self.on_wait = on_wait or (lambda message: None)
        self.sleep = sleep
        self.stats = Stats()
        import httpx  # lazy: only sync-issues needs it

        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION, "User-Agent": "rlmedic",
                   "Accept-Encoding": "gzip, deflate"}  # what _decode inflates (within the cap)
        # transport: the far side of this seam (an httpx transport), for tests of network failures
        self._http = httpx.Client(timeout=timeout, headers=headers, follow_redirects=False, transport=transport,
                                  verify=verify)
        self._httpx = httpx

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GitHubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, path: str, params: dict[str, Any] | None = None) -> str:
        query = f"?{urlencode(params)}" if params else ""
        return f"{self.api_url}/{path.lstrip('/')}{query}"

    # -- one request ------------------------------------------------------------------
    def fresh(self, url: str, stamp: str) -> tuple[Any, str | None] | None:
        """The cached (body, next URL) of ``url`` if it was read under the same ``stamp``: no request."""
        entry = self.cache.entries.get(url)
        if entry is None or not stamp or entry.stamp != stamp:
            return None
        return entry.body, entry.next

    def get(self, url: str, slim: Callable[[Any], Any] | None = None, *, stamp: str = "") -> tuple[Any, str | None, bool]:
        """GET ``url``: (body, next page URL, answered from cache by a 304)."""
        parts = urlsplit(url)
        if parts.netloc != self._host:
            raise UserError(f"GitHub sent a link to another host ({parts.netloc}); refusing to follow it")
        if parts.scheme != self._scheme:
            why = " (the token would travel unencrypted)" if parts.scheme == "http" else ""
            raise UserError(f"GitHub sent a link from {self._scheme} to {parts.scheme} ({parts.netloc}); refusing to follow "
                            f"it{why}")
        cached = self.cache.entries.get(url)
        headers = {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if cached and cached.etag:
            headers["If-None-Match"] = cached.etag
        attempt = 0
        rate_waits = 0
        while True:
            self.stats.requests += 1
            if cached and cached.etag:
                self.stats.conditional += 1
            try:
                resp, data = self._fetch(url, headers)
            except _Deadline:
                raise UserError(f"{self._where(url)}: GitHub did not finish answering within {self.deadline:g} s; "
                                "giving up (a stalled server or proxy)") from None
            except _Stalled as exc:
                raise UserError(f"{self._where(url)}: GitHub sent {_size(exc.args[0])} in {self.stall_s:g} s, slower than "
                                f"{MIN_BYTES_PER_S // 1024} KB/s; giving up (a stalled server or proxy)") from None
            except _TooBig:
                raise UserError(f"{self._where(url)}: GitHub's answer is larger than {_size(self.max_bytes)}; "
                                "refusing it") from None
            except self._httpx.TransportError as exc:
                if unresolvable(exc):  # no DNS or no network: seconds of retries will not change that
                    raise UserError(f"cannot reach {self.api_url}: its name does not resolve (no network or DNS?): "
                                    f"{exc}") from exc
                if attempt >= self.retries:
                    raise UserError(f"cannot reach {self.api_url}: {exc.__class__.__name__}: {exc}") from exc
                attempt = self._backoff(attempt, f"connection error ({exc.__class__.__name__})")
                continue
            status = resp.status_code
            if status == 304 and cached:
                self.stats.not_modified += 1
                cached.stamp = stamp or cached.stamp
                return cached.body, cached.next, True
            if status == 200:
                body = self._json(url, data)
                body = slim(body) if slim else body
                nxt = parse_link_next(resp.headers.get("link"))
                etag = resp.headers.get("etag", "")
                if etag:
                    self.cache.entries[url] = CachedResponse(etag=etag, next=nxt, body=body, stamp=stamp)
                return body, nxt, False
            if status in (403, 429) and self._rate_limited(resp):
                if rate_waits >= MAX_RATE_WAITS:
                    raise UserError(f"GitHub still rate-limits after {rate_waits} waits; try again later")
                self._wait_for_reset(resp)
                rate_waits += 1
                continue
            if status >= 500:
                if attempt >= self.retries:
                    raise UserError(f"{url}: GitHub answered {status} {attempt + 1} times; try again later")
                attempt = self._backoff(attempt, f"server error {status}")
                continue
            raise UserError(self._explain(url, resp, data))

    def _fetch(self, url: str, headers: dict[str, str]) -> tuple[Any, bytes]:
        """(response, body bytes) of one GET, all of it within :attr:`deadline` and :attr:`max_bytes`.

        The request runs in a daemon thread so the deadline holds whatever the server does
        (a trickle of headers or body, a stalled TLS handshake); the thread stops by itself
        at its next read once the deadline or the cap is past.
        """
        import threading

        start = time.monotonic()
        end = start + self.deadline
        outcome: dict[str, Any] = {}
        done, stop = threading.Event(), threading.Event()
        received = [0]  # bytes of the body so far (headers count as none)

        def work() -> None:
            try:
                with self._http.stream("GET", url, headers=headers) as resp:
                    length = resp.headers.get("content-length", "")
                    if length.isdigit() and int(length) > self.max_bytes:
                        raise _TooBig
                    chunks, size = [], 0
                    for chunk in resp.iter_raw():
                        size += len(chunk)
                        received[0] = size
                        if size > self.max_bytes:
                            raise _TooBig
                        if time.monotonic() > end or stop.is_set():
                            raise _Deadline
                        chunks.append(chunk)
                    outcome["resp"] = resp
                    outcome["data"] = b"".join(chunks)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                outcome["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name="github-get", daemon=True).start()
        stall_at = start + self.stall_s if self.stall_s < self.deadline else end
        while not done.wait(max(0.0, min(end, stall_at) - time.monotonic())):
            now = time.monotonic()
            if now >= end:
                stop.set()
                raise _Deadline
            if received[0] < MIN_BYTES_PER_S * (now - start):
                stop.set()
                raise _Stalled(received[0])
            stall_at = now + 0.5  # fast enough so far: look again in half a second
        if "error" in outcome:
            raise outcome["error"]
        resp, data = outcome["resp"], outcome["data"]
        encoding = resp.headers.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            data = self._decode(resp, data)
        return resp, data

    def _decode(self, resp: Any, data: bytes) -> bytes:
        """A compressed body, inflated no further than the cap (a small gzip bomb stays small)."""
        import zlib

        encoding = resp.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("gzip", "deflate", "x-gzip"):
            raise UserError(f"GitHub answered with an unknown content encoding {encoding!r}")
        inflater = zlib.decompressobj(wbits=47)  # a gzip or zlib header, detected
        try:
            out = inflater.decompress(data, self.max_bytes + 1)
        except zlib.error as exc:
            raise UserError(f"GitHub answered with a damaged {encoding} body ({exc})") from None
        if len(out) > self.max_bytes:
            raise _TooBig
        return out

    def _json(self, url: str, data: bytes) -> Any:
        try:
            body = json.loads(data)
        except RecursionError:
            body = None
            deep = True
        except ValueError as exc:
            raise UserError(f"{self._where(url)}: GitHub answered with something that is not JSON") from exc
        else:
            deep = json_depth_over(body, MAX_JSON_DEPTH)
        if deep:
            raise UserError(f"{self._where(url)}: GitHub's JSON nests deeper than {MAX_JSON_DEPTH} levels; refusing it")
        return body

    def _where(self, url: str) -> str:
        return url.split("?")[0].removeprefix(self.api_url) or self.api_url

    def paginate(self, url: str, slim: Callable[[Any], Any] | None = None, max_pages: int | None = None) -> Iterator[tuple[Any, bool]]:
        """Each page's body (following ``Link: rel="next"``) and whether it came from cache.

        Stops, with a notice, at a link back to a page already read (a loop) and after
        :data:`MAX_PAGES` pages; an empty page ends the list whatever its links say.
        """
        limit = MAX_PAGES if max_pages is None else min(max_pages, MAX_PAGES)
        pages = 0
        seen: set[str] = set()
        next_url: str | None = url
        while next_url:
            if next_url in seen:
                self.on_wait(f"GitHub: the next-page link of {self._where(url)} loops back to a page already read; "
                             "stopped there")
                return
            if pages >= limit:
                if max_pages is None or limit < max_pages:
                    self.on_wait(f"GitHub: {self._where(url)} has more than {MAX_PAGES} pages; stopped there")
                return
            seen.add(next_url)
            body, next_url, cached = self.get(next_url, slim)
            pages += 1
            yield body, cached
            if isinstance(body, list) and not body:
                return

    # -- failures ---------------------------------------------------------------------
    def _backoff(self, attempt: int, why: str) -> int:
        delay = self.backoff * (2**attempt)
        self.stats.retries += 1
        self.on_wait(f"GitHub: {why}; retrying in {delay:.1f} s")
        self.sleep(delay)
        self.stats.waited_s += delay
        return attempt + 1

    def _message(self, data: bytes) -> str:
        """The ``message`` of an error body, safe to print: the token masked, secrets redacted, one short line."""
        from rlmedic.redact import redact

        try:
            body = json.loads(data) if data else {}
        except (ValueError, RecursionError):
            return ""
        raw = body.get("message") if isinstance(body, dict) else None
        if not isinstance(raw, str):
            return ""
        if self.token:
            raw = raw.replace(self.token, "[token]")
        text = " ".join(redact(raw).split())
        text = "".join(c if c.isprintable() else "?" for c in text)
        return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"

    @staticmethod
    def _rate_limited(resp) -> bool:
        return resp.headers.get("x-ratelimit-remaining") == "0" or "retry-after" in resp.headers

    def _wait_for_reset(self, resp) -> None:
        now = time.time()
        if "retry-after" in resp.headers:
            try:
                wait = float(resp.headers["retry-after"])
            except ValueError:
                wait = 60.0
            reset = now + wait
            kind = "secondary rate limit"
        else:
            try:
                reset = float(resp.headers.get("x-ratelimit-reset", now + 60))
            except ValueError:
                reset = now + 60
            wait = max(0.0, reset - now) + 1.0  # the reset second itself may still be limited
            kind = f"rate limit ({resp.headers.get('x-ratelimit-limit', '?')} requests an hour)"
        hint = "" if self.token else "; set a token (--token-env GITHUB_TOKEN) for 5,000 requests an hour"
        if wait > self.max_wait:
            raise UserError(
                f"GitHub {kind} reached; it resets at {_reset_clock(reset)} (in {wait / 60:.0f} min), longer than "
                f"the {self.max_wait:.0f} s this run waits. Re-run then: threads already synced are kept{hint}"
            )
        self.on_wait(f"GitHub {kind} reached: waiting {wait:.0f} s until {_reset_clock(reset)}{hint}")
        self.sleep(wait)
        self.stats.waited_s += wait

    def _explain(self, url: str, resp: Any, data: bytes = b"") -> str:
        status = resp.status_code
        where = self._where(url)
        message = self._message(data)
        if status == 401:
            return f"GitHub refused the token ({message or '401 Unauthorized'}); check the variable --token-env names"
        if status == 404:
            return f"{where}: not found on {self.api_url} (a typo in OWNER/REPO, or a private repo that needs a token)"
        if status == 403:
            return f"{where}: access forbidden ({message or '403'}); a private repo needs a token with read access"
        return f"{where}: GitHub answered {status} {message}".rstrip()
