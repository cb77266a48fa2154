"""The Slack bot: answers @mentions and DMs in a thread, with the agent behind it.

Thin: Slack events come in through slack-bolt (Socket Mode, or HTTP with signature
checks), this module applies the guards (allowlists, a per-user token bucket, file
size caps, no bot loops, no duplicate deliveries), downloads the attachments into the
thread's private folder (the only root the tools may read), runs
the thread's :class:`~rlmedic.agent.session.Session` and renders its events: one message posted
at once and updated in place as tool steps finish, then the answer in Block Kit and the
config diff as a file. Everything posted goes through
:class:`~rlmedic.ui.slack_client.RedactingWebClient`, so no secret reaches Slack.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


log = logging.getLogger("rlmedic.slack")

#: Defaults for the guards (flags and environment variables override them).
MAX_FILE_BYTES = 20 << 20
MAX_FILES = 5
RATE_BURST = 3
RATE_PER_MINUTE = 6.0
#: Least seconds between two progress updates of one message (Slack rate-limits chat.update).
UPDATE_EVERY_S = 1.0
_MENTION = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")
_SLACK_FILE_HOSTS = ("files.slack.com", "slack-files.com")


def _ids(value: str | None) -> frozenset[str]:
    return frozenset(v.strip() for v in (value or "").replace(" ", ",").split(",") if v.strip())


@dataclass
class SlackSettings:
    bot_token: str
    signing_secret: str = ""
    app_token: str = ""
    allowed_channels: frozenset[str] = frozenset()
    allowed_users: frozenset[str] = frozenset()
    rate_burst: int = RATE_BURST
    rate_per_minute: float = RATE_PER_MINUTE
    max_file_bytes: int = MAX_FILE_BYTES
    max_files: int = MAX_FILES
    offline: bool = False
    api_url: str | None = None  # the Web API root (a test fake); default Slack's
    index_dir: str | None = None
    ray_address: str | None = None  # a Ray cluster whose job logs each question re-reads (tools/cluster)

    @classmethod
    def from_env(cls, **overrides: Any) -> SlackSettings:
        from rlmedic.settings import ray_address as configured_ray_address

        env = os.environ
        values: dict[str, Any] = {
            "bot_token": env.get("SLACK_BOT_TOKEN", ""),
            "signing_secret": env.get("SLACK_SIGNING_SECRET", ""),
            "app_token": env.get("SLACK_APP_TOKEN", ""),
            "allowed_channels": _ids(env.get("RLMEDIC_SLACK_CHANNELS")),
            "allowed_users": _ids(env.get("RLMEDIC_SLACK_USERS")),
            "api_url": env.get("SLACK_API_URL") or None,
            "ray_address": configured_ray_address(),
        }
        values.update({k: v for k, v in overrides.items() if v not in (None, "", frozenset())})
        return cls(**values)


class TokenBucket:
    """Per-key token buckets: ``burst`` requests at once, refilled at ``per_minute``."""

    def __init__(self, burst: int, per_minute: float, clock: Any = time.monotonic) -> None:
        self.burst, self.rate, self.clock = max(1, burst), max(per_minute, 1e-6) / 60.0, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0 when allowed (a token is spent), else the seconds until one is available."""
        with self._lock:
            now = self.clock()
            tokens, then = self._buckets.pop(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            wait = 0.0
            if tokens >= 1:
                tokens -= 1
            else:
                wait = (1 - tokens) / self.rate
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > 10_000:
                self._buckets.popitem(last=False)
            return wait


@dataclass
class _Seen:
    """Event deliveries already handled (Slack retries; a mention also arrives as a message)."""

    keys: OrderedDict[str, None] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def first(self, key: str) -> bool:
        with self.lock:
            if key in self.keys:
                return False
            self.keys[key] = None
            while len(self.keys) > 2000:
                self.keys.popitem(last=False)
            return True


class SlackBot:
    """The bot's behaviour, independent of the transport (Socket Mode or HTTP)."""

    def __init__(self, settings: SlackSettings, *, client: Any = None, store: Any = None) -> None:
        from rlmedic.agent.session import SessionStore
        from rlmedic.ui.slack_client import make_client

        if not settings.bot_token:
            from rlmedic.errors import UserError

            raise UserError("SLACK_BOT_TOKEN is not set (the bot token, xoxb-...)")
        self.settings = settings
        self.client = client or make_client(settings.bot_token, settings.api_url)
        self.store = store or SessionStore()
        self.bucket = TokenBucket(settings.rate_burst, settings.rate_per_minute)
        self.seen = _Seen()
        self._limited_told: dict[str, float] = {}

    # -- guards ------------------------------------------------------------------

    def allowed(self, channel: str, user: str) -> bool:
        s = self.settings
        if s.allowed_channels and channel not in s.allowed_channels:
            log.info("ignored: channel %s is not in the allowlist", channel)
            return False
        if s.allowed_users and user not in s.allowed_users:
            log.info("ignored: user %s is not in the allowlist", user)
            return False
        return True

    def _rate_limited(self, user: str, channel: str, thread_ts: str) -> bool:
        wait = self.bucket.take(user)
        if not wait:
            return False
        now = time.monotonic()
        if now - self._limited_told.get(user, -1e9) > 60:  # say it once a minute, not per message
            self._limited_told[user] = now
            self.client.chat_postMessage(channel=channel, thread_ts=thread_ts,
                                         text=f"<@{user}> you are asking faster than I can investigate; "
                                              f"try again in {wait:.0f} s.")
        log.info("rate-limited user %s (%.0f s)", user, wait)
        return True

    # -- events ------------------------------------------------------------------

    def on_mention(self, event: dict[str, Any]) -> None:
        self.handle(event)

    def on_message(self, event: dict[str, Any]) -> None:
        """DMs, and replies in a thread the bot already answers in (no new mention needed)."""
        if event.get("channel_type") == "im":
            self.handle(event)
            return
        thread_ts = event.get("thread_ts")
        if thread_ts and self.store.known(f"{event.get('channel')}:{thread_ts}"):
            self.handle(event)

    def handle(self, event: dict[str, Any]) -> None:
        if event.get("bot_id") or event.get("subtype") not in (None, "file_share", "thread_broadcast"):
            return  # never answer bots (ourselves included) or edits/joins
        channel, user, ts = event.get("channel", ""), event.get("user", ""), event.get("ts", "")
        if not (channel and user and ts) or not self.seen.first(f"{channel}:{ts}"):
            return
        if not self.allowed(channel, user):
            return
        thread_ts = event.get("thread_ts") or ts
        if self._rate_limited(user, channel, thread_ts):
            return
        from rlmedic.ui.slack_render import notice_blocks, progress_blocks

        text, blocks = progress_blocks([])
        msg_ts = self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text, blocks=blocks)["ts"]
        try:
            self.answer(event, channel, thread_ts, msg_ts)
        except Exception as exc:  # noqa: BLE001 - the thread gets one line, the log gets the traceback
            log.exception("answering %s:%s failed", channel, ts)
            text, blocks = notice_blocks(f"Sorry, that failed ({type(exc).__name__}: {str(exc)[:300]}).")
            self.client.chat_update(channel=channel, ts=msg_ts, text=text, blocks=blocks)

    def answer(self, event: dict[str, Any], channel: str, thread_ts: str, msg_ts: str) -> None:
        """Investigate the message and turn the progress message ``msg_ts`` into the answer.

        The thread is one :class:`~rlmedic.agent.session.Session`: its files folder is the only
        readable root, and a follow-up (also after a restart) sees the earlier files and findings."""
        from rlmedic.agent.events import Failed, Final, ToolFinished, ToolStarted
        from rlmedic.agent.session import Session
        from rlmedic.ui.render import step_result
        from rlmedic.ui.slack_render import answer_blocks, answer_chart, notice_blocks, progress_blocks

        thread_id = f"{channel}:{thread_ts}"
        session = Session(thread_id, offline=self.settings.offline, index_dir=self.settings.index_dir,
                          env_roots=False, store=self.store, prefix="slack")
        folder = session.files_dir()
        saved, skipped = self.download(event.get("files") or [], folder)
        session.attach(*saved)
        if self.settings.ray_address:  # the job's logs on every node, in the thread's ray/ folder
            from rlmedic.errors import UserError
            from rlmedic.tools.cluster.frontdoor import sync_folder

            try:
                session.attach(sync_folder(folder / "ray", self.settings.ray_address).folder)
            except UserError as exc:
                skipped.append(f"Ray cluster not read: {exc}")
        question = _MENTION.sub("", event.get("text") or "").strip()
        if not question:
            question = "What went wrong here?" if saved else "Hello"
        steps: dict[str, tuple[str, str]] = {}
        last_update = 0.0
        final = None
        for ev in session.ask(question):
            if isinstance(ev, ToolStarted):
                steps[ev.id] = (ev.name, "running")
            elif isinstance(ev, ToolFinished):
                steps[ev.id] = (ev.name, step_result(ev.name, ev.ok, ev.data, ev.error)[:200])
                if time.monotonic() - last_update >= UPDATE_EVERY_S:
                    last_update = time.monotonic()
                    text, blocks = progress_blocks(list(steps.values()))
                    self.client.chat_update(channel=channel, ts=msg_ts, text=text, blocks=blocks)
            elif isinstance(ev, Final):
                final = ev.answer
            elif isinstance(ev, Failed):
                text, blocks = notice_blocks(f"I could not finish: {ev.error}")
                self.client.chat_update(channel=channel, ts=msg_ts, text=text, blocks=blocks)
                return
        if final is None:
            return
        diff = final.config_diff.strip() + "\n" if final.config_diff.strip() else ""  # redacted by the session
        new_diff = bool(diff) and not session.diff_shown(session.turns[-1].diff_sha)
        text, blocks = answer_blocks(final, folder=str(folder), diff_attached=new_diff, diff_above=bool(diff) and not new_diff,
                                     skipped=skipped, offline_flag=self.settings.offline)
        self.client.chat_update(channel=channel, ts=msg_ts, text=text, blocks=blocks)
        if final.more.strip():  # the rest of the answer, as a second message in the thread
            from rlmedic.ui.slack_render import more_blocks

            more_text, more = more_blocks(final.more, folder=str(folder))
            self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=more_text, blocks=more)
        if new_diff:
            self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, content=diff,
                                        filename="config.diff", title="Suggested config change")
        chart = answer_chart(final)
        if chart is not None:  # the curves behind a run's finding, its first step marked
            self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, content=chart[0],
                                        filename="curves.png", title=chart[1])

    # -- files -------------------------------------------------------------------

    def _download_allowed(self, url: str) -> bool:
        """Only Slack's file hosts (and the configured API host) ever see the bot token."""
        host = urllib.parse.urlparse(url).hostname or ""
        hosts = set(_SLACK_FILE_HOSTS)
        api = self.settings.api_url or os.environ.get("SLACK_API_URL")
        if api:
            hosts.add(urllib.parse.urlparse(api).hostname or "")
        return host in hosts or host.endswith(".slack.com")

    def download(self, files: list[dict[str, Any]], folder: Path) -> tuple[list[Path], list[str]]:
        """Save the message's files (capped in number and size) into ``folder``; notes for those skipped."""
        import httpx

        saved: list[Path] = []
        skipped: list[str] = []
        cap = self.settings.max_file_bytes
        for i, meta in enumerate(files):
            name = _safe_name(meta.get("name") or meta.get("title") or f"file-{i}")
            if i >= self.settings.max_files:
                skipped.append(f"{name}: skipped (at most {self.settings.max_files} files per message)")
                continue
            url = meta.get("url_private_download") or meta.get("url_private") or ""
            if int(meta.get("size") or 0) > cap:
                skipped.append(f"{name}: skipped, {int(meta['size']) / 2**20:.1f} MiB is over the {cap / 2**20:.0f} MiB cap")
                continue
            if not url or not self._download_allowed(url):
                skipped.append(f"{name}: skipped (not a Slack-hosted file)")
                continue
            target = _unique(folder / name)
            size = 0
            try:
                with httpx.stream("GET", url, headers={"Authorization": f"Bearer {self.settings.bot_token}"},
                                  timeout=30, follow_redirects=False) as resp:
                    resp.raise_for_status()
                    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as out:
                        for chunk in resp.iter_bytes():
                            size += len(chunk)
                            if size > cap:
                                raise _TooLarge()
                            out.write(chunk)
            except _TooLarge:
                target.unlink(missing_ok=True)
                skipped.append(f"{name}: skipped, larger than the {cap / 2**20:.0f} MiB cap")
                continue
            except httpx.HTTPError as exc:
                target.unlink(missing_ok=True)
                skipped.append(f"{name}: download failed ({type(exc).__name__})")
                continue
            saved.append(target)
        return saved, skipped


class _TooLarge(Exception):
    pass


def _safe_name(name: str) -> str:
    name = Path(name.replace("\\", "/")).name
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "file"
    return name[:100]


def _unique(path: Path) -> Path:
    if not path.exists():
        return path
    for n in range(2, 1000):
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise OSError(f"{path}: too many files with this name")


# -- the bolt app ----------------------------------------------------------------


def build_app(bot: SlackBot, *, socket_mode: bool = False) -> Any:
    """A slack-bolt ``App`` routing ``app_mention`` and ``message`` events to ``bot``.

    In HTTP mode bolt refuses requests whose signature or timestamp (older than five
    minutes) does not check out with the signing secret, with HTTP 401.
    """
    from slack_bolt import App

    if not socket_mode and not bot.settings.signing_secret:
        from rlmedic.errors import UserError

        raise UserError("HTTP mode needs SLACK_SIGNING_SECRET (the app's signing secret)")
    bolt_log = logging.getLogger("rlmedic.slack.bolt")
    if not any(isinstance(f, _NoUnverifiedBodies) for f in bolt_log.filters):
        bolt_log.addFilter(_NoUnverifiedBodies())
    app = App(client=bot.client, signing_secret=bot.settings.signing_secret or None,
              request_verification_enabled=not socket_mode, logger=bolt_log)

    @app.event("app_mention")
    def _mention(event: dict[str, Any]) -> None:
        bot.on_mention(event)

    @app.event("message")
    def _message(event: dict[str, Any]) -> None:
        bot.on_message(event)

    return app


class _NoUnverifiedBodies(logging.Filter):
    """Bolt logs the whole body of a request whose signature fails (at INFO, so with ``-v``):
    anyone who can reach the port could write what they like into our log. The line keeps
    its news, not the body."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Invalid request signature detected"):
            record.msg, record.args = "refused a request with an invalid signature (body not logged)", ()
        return True


#: The largest Events API body read (Slack's event payloads are a few KiB).
MAX_BODY_BYTES = 1 << 20
#: Seconds a client may take to send its headers and body before the connection is dropped.
READ_TIMEOUT_S = 10.0


def body_length(header: str | None, limit: int = MAX_BODY_BYTES) -> tuple[int, int | None]:
    """``(status, length)`` for a ``Content-Length`` header, decided before a byte of the body is
    read: 411 when it is missing, 400 unless it is plain digits (``-1``, ``abc``, ``+5``), 413
    over ``limit``; otherwise ``(200, length)``."""
    if header is None or not header.strip():
        return 411, None
    text = header.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        return 400, None
    length = int(text)
    return (413, None) if length > limit else (200, length)


def serve_http(app: Any, host: str, port: int, path: str = "/slack/events") -> Any:
    """A small threaded HTTP server in front of ``app.dispatch`` (bind it to loopback behind a proxy).

    The body's size is checked from its header before anything is read (see :func:`body_length`),
    and a client that stalls is dropped after :data:`READ_TIMEOUT_S`: an unauthenticated sender
    can neither grow the server's memory nor hold a thread forever.
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from slack_bolt.request import BoltRequest

    class Handler(BaseHTTPRequestHandler):
        timeout = READ_TIMEOUT_S  # a socket timeout on every read (headers and body)

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            url = urllib.parse.urlparse(self.path)
            if url.path != path:
                self.send_error(404)
                return
            status, length = body_length(self.headers.get("Content-Length"))
            if length is None:
                self.close_connection = True  # the unread body must not be parsed as a next request
                self.send_error(status)
                return
            raw = self.rfile.read(length)
            if len(raw) < length:  # the sender stopped early
                self.close_connection = True
                self.send_error(400)
                return
            body = raw.decode("utf-8", errors="replace")
            headers = {k.lower(): [v] for k, v in self.headers.items()}
            resp = app.dispatch(BoltRequest(body=body, query=url.query, headers=headers))
            data = (resp.body or "").encode("utf-8")
            self.send_response(resp.status)
            for key, values in resp.headers.items():
                for value in values:
                    if key.lower() != "content-length":
                        self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug(fmt, *args)

    return ThreadingHTTPServer((host, port), Handler)
