"""The Slack bot end to end: signed events through slack-bolt, replies to a fake Slack Web API on loopback.

Every test dispatches real Events API bodies, signed with the signing secret, through
``App.dispatch`` (and once over real HTTP); the app's client talks to
:class:`fake_slack.FakeSlack`, which records every call and serves attached files. The
offline engine answers (no model server).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from slack_bolt.request import BoltRequest
from slack_sdk.signature import SignatureVerifier

from conftest import FIXTURES
from fake_slack import BOT_TOKEN, FakeSlack
from rlmedic.ui.slack_app import SlackBot, SlackSettings, build_app, serve_http

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
OOM_LOG = FIXTURES / "logs" / "signatures" / "cuda-oom.log"
CONFIG = FIXTURES / "configs" / "areal" / "base.yaml"
OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity "
            "of 79.11 GiB of which 1.02 GiB is free.")


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


def make_app(fake: FakeSlack, **settings: Any) -> tuple[Any, SlackBot]:
    values: dict[str, Any] = {"bot_token": BOT_TOKEN, "signing_secret": SECRET, "api_url": fake.api_url, "offline": True}
    values.update(settings)
    bot = SlackBot(SlackSettings(**values))
    return build_app(bot), bot


class Handled:
    """Counts the events the bot has finished handling (bolt runs listeners on worker threads), so a
    test that checks nothing more was posted waits for the handling instead of sleeping."""

    def __init__(self, bot: SlackBot) -> None:
        import threading

        self.count = 0
        self._lock = threading.Lock()
        for name in ("on_mention", "on_message"):
            setattr(bot, name, self._counting(getattr(bot, name)))

    def _counting(self, original: Any) -> Any:
        def wrapped(event: dict[str, Any]) -> None:
            try:
                original(event)
            finally:
                with self._lock:
                    self.count += 1
        return wrapped

    def wait_for(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.count < n:
            assert time.monotonic() < deadline, f"the bot handled {self.count} of {n} events"
            time.sleep(0.02)


_counter = iter(range(1, 10_000))


def event_body(event: dict[str, Any]) -> str:
    n = next(_counter)
    return json.dumps({
        "token": "legacy", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": f"Ev{n:06d}", "event_time": int(time.time()),
        "authorizations": [{"team_id": "T0001", "user_id": "UBOT", "is_bot": True}],
        "event": {"event_ts": event.get("ts"), **event},
    })


def signed(body: str, *, secret: str = SECRET, timestamp: int | None = None) -> dict[str, list[str]]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    sig = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    return {"content-type": ["application/json"], "x-slack-request-timestamp": [ts], "x-slack-signature": [sig]}


def dispatch(app: Any, event: dict[str, Any], **sign: Any) -> int:
    body = event_body(event)
    return app.dispatch(BoltRequest(body=body, headers=signed(body, **sign))).status


def mention(text: str, *, channel: str = "C0001", ts: str, user: str = "U0001", thread_ts: str | None = None,
            files: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"type": "app_mention", "user": user, "text": f"<@UBOT> {text}", "channel": channel, "ts": ts}
    if thread_ts:
        ev["thread_ts"] = thread_ts
    if files:
        ev["files"] = files
    return ev


def final_updates(fake: FakeSlack, channel: str | None = None) -> list[Any]:
    """chat.update calls that carry an answer (not progress)."""
    return [c for c in fake.of("chat.update") if "Answered by the offline engine" in json.dumps(c.args)
            and (channel is None or c.args.get("channel") == channel)]


def answer_posts(fake: FakeSlack) -> list[Any]:
    """The messages the bot posted to answer (each updated in place), not the "more on this answer" follow-ups."""
    return [c for c in fake.of("chat.postMessage") if "More on this answer" not in json.dumps(c.args)]


def more_posts(fake: FakeSlack) -> list[Any]:
    """The second message of an answer: the rest of it (further fixes, background), at most one per answer."""
    return [c for c in fake.of("chat.postMessage") if "More on this answer" in json.dumps(c.args)]


def blocks_text(call: Any) -> str:
    blocks = call.args.get("blocks")
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    return json.dumps(blocks)


def test_a_mention_is_answered_in_its_thread_with_one_message_updated_in_place(slack: FakeSlack) -> None:
    app, _bot = make_app(slack)
    assert dispatch(app, mention(f"why did my run die? {OOM_LINE}", ts="1700000001.000100")) == 200
    slack.wait_for(lambda f: final_updates(f))
    posts = answer_posts(slack)
    assert len(posts) == 1, "one message, updated in place: never a flood"
    assert len(more_posts(slack)) <= 1, "the rest of the answer is one second message at most"
    assert posts[0].args["thread_ts"] == "1700000001.000100" and posts[0].args["channel"] == "C0001"
    final = final_updates(slack)[-1]
    placeholder_ts = posts[0].response["ts"]
    assert all(c.args["ts"] == placeholder_ts for c in slack.of("chat.update"))
    text = blocks_text(final)
    assert "*Root cause:* CUDA out of memory" in text
    assert "*Fix:*" in text and "max_tokens_per_mb" in text
    assert "*Sources:*" in text and "card:oom-actor-train" in text
    assert "offline engine" in text
    assert all(c.headers.get("Authorization") == f"Bearer {BOT_TOKEN}" for c in slack.calls)


def test_a_follow_up_in_the_thread_uses_the_earlier_context_also_after_a_restart(slack: FakeSlack) -> None:
    app, _bot = make_app(slack)
    root_ts = "1700000002.000100"
    dispatch(app, mention(f"the trainer printed this: {OOM_LINE}", ts=root_ts))
    slack.wait_for(lambda f: len(final_updates(f)) == 1)
    app2, bot2 = make_app(slack)  # a restarted bot: only the data dir carries the conversation
    handled = Handled(bot2)
    body = {"type": "message", "user": "U0001", "text": "so which setting should I lower?", "channel": "C0001",
            "ts": "1700000002.000200", "thread_ts": root_ts, "channel_type": "channel"}
    assert dispatch(app2, body) == 200
    slack.wait_for(lambda f: len(final_updates(f)) == 2)
    follow = final_updates(slack)[-1]
    posts = answer_posts(slack)
    assert [p.args["thread_ts"] for p in posts] == [root_ts, root_ts]
    text = blocks_text(follow)
    assert "*Root cause:* CUDA out of memory" in text, "the follow-up knows what the thread was about"
    assert "max_tokens_per_mb" in text
    # a plain message in a thread the bot never joined is not answered
    dispatch(app2, {**body, "ts": "1700000003.000200", "thread_ts": "1700000003.000100"})
    handled.wait_for(2)
    assert len(answer_posts(slack)) == 2


def test_an_attached_log_and_config_are_downloaded_with_the_bot_token_diagnosed_and_the_diff_uploaded(
        slack: FakeSlack, tmp_path: Path) -> None:
    app, bot = make_app(slack)
    files = [slack.serve_file("train.log", OOM_LOG.read_bytes()), slack.serve_file("config.yaml", CONFIG.read_bytes())]
    dm = {"type": "message", "user": "U0002", "text": "why did it die?", "channel": "D0001", "ts": "1700000004.000100",
          "channel_type": "im", "files": files}
    assert dispatch(app, dm) == 200
    slack.wait_for(lambda f: f.of("files.completeUploadExternal"))
    assert [(g.name, g.authorization, g.status) for g in slack.file_gets] == [
        ("train.log", f"Bearer {BOT_TOKEN}", 200), ("config.yaml", f"Bearer {BOT_TOKEN}", 200)]
    folder = bot.store.files_dir("D0001:1700000004.000100")
    assert (folder / "train.log").read_bytes() == OOM_LOG.read_bytes()
    assert folder.is_relative_to(bot.store.root)
    text = blocks_text(final_updates(slack)[-1])
    assert "*Root cause:* CUDA out of memory" in text and "`train.log:52`" in text
    assert str(folder) not in text, "paths are shown relative to the thread's folder"
    assert "config.diff" in text
    progress = [c.args["text"] for c in slack.of("chat.update") if "Looking into it" in c.args["text"]]
    assert progress and ":white_check_mark: `diagnose`: root cause cuda-oom" in progress[0]
    done = slack.of("files.completeUploadExternal")[0].args
    assert done["thread_ts"] == "1700000004.000100" and done["channel_id"] == "D0001"
    assert b"max_tokens_per_mb" in slack.uploads[0]
    # a follow-up DM in the thread: the thread's files are investigated again, the same diff is not re-posted
    follow = {**dm, "text": "what do I change first?", "ts": "1700000004.000300", "thread_ts": dm["ts"]}
    follow.pop("files")
    dispatch(app, follow)
    slack.wait_for(lambda f: len(final_updates(f)) == 2)
    text = blocks_text(final_updates(slack)[-1])
    assert "`train.log:52`" in text and "posted earlier in this thread" in text
    assert len(slack.of("files.completeUploadExternal")) == 1 and len(slack.file_gets) == 2


def test_an_oversized_file_is_not_downloaded(slack: FakeSlack) -> None:
    app, _bot = make_app(slack, max_file_bytes=1000)
    big = slack.serve_file("huge.log", b"x" * 5000)
    lying = slack.serve_file("small.log", b"y" * 5000)
    lying["size"] = 10  # the metadata says small: the stream is still capped
    dispatch(app, mention(f"look {OOM_LINE}", ts="1700000005.000100", files=[big, lying]))
    slack.wait_for(lambda f: final_updates(f))
    assert [g.name for g in slack.file_gets] == ["small.log"]
    text = blocks_text(final_updates(slack)[-1])
    assert "huge.log: skipped" in text and "small.log: skipped, larger than" in text


def test_bad_signatures_and_stale_timestamps_are_refused(slack: FakeSlack) -> None:
    app, bot = make_app(slack)
    handled = Handled(bot)
    assert dispatch(app, mention("hi", ts="1700000006.000100"), secret="not-the-secret") == 401
    assert dispatch(app, mention("hi", ts="1700000006.000200"), timestamp=int(time.time()) - 600) == 401
    body = event_body(mention("hi", ts="1700000006.000300"))
    assert app.dispatch(BoltRequest(body=body, headers={"content-type": ["application/json"]})).status == 401
    # the same over real HTTP
    server = serve_http(app, "127.0.0.1", 0)
    import threading

    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/slack/events"
        headers = {k: v[0] for k, v in signed(body, secret="wrong").items()}
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(url, data=body.encode(), headers=headers), timeout=10)
        assert err.value.code == 401
        challenge = json.dumps({"type": "url_verification", "challenge": "abc123", "token": "legacy"})
        headers = {k: v[0] for k, v in signed(challenge).items()}
        with urllib.request.urlopen(urllib.request.Request(url, data=challenge.encode(), headers=headers), timeout=10) as resp:
            assert resp.status == 200 and json.loads(resp.read())["challenge"] == "abc123"
    finally:
        server.shutdown()
        server.server_close()
    # a signed message the bot ignores (a thread it never joined): once it is handled, a refused
    # request that had slipped through to the bot would have been handled (and posted) too
    dispatch(app, {"type": "message", "user": "U0001", "text": "hi", "channel": "C0001", "ts": "1700000006.000400",
                   "thread_ts": "1700000006.000001", "channel_type": "channel"})
    handled.wait_for(1)
    assert handled.count == 1
    assert [c.method for c in slack.calls if c.method != "auth.test"] == []


def test_messages_from_channels_and_users_off_the_allowlists_are_ignored(slack: FakeSlack) -> None:
    app, bot = make_app(slack, allowed_channels=frozenset({"CALLOW"}), allowed_users=frozenset({"U0001", "U0009"}))
    handled = Handled(bot)
    dispatch(app, mention(f"x {OOM_LINE}", channel="COTHER", ts="1700000007.000100"))
    dispatch(app, mention(f"x {OOM_LINE}", channel="CALLOW", user="U0666", ts="1700000007.000200"))
    dispatch(app, mention(f"x {OOM_LINE}", channel="CALLOW", ts="1700000007.000300"))
    handled.wait_for(3)
    posts = answer_posts(slack)
    assert [(p.args["channel"], p.args["thread_ts"]) for p in posts] == [("CALLOW", "1700000007.000300")]


def test_a_burst_from_one_user_is_rate_limited(slack: FakeSlack) -> None:
    app, bot = make_app(slack, rate_burst=2, rate_per_minute=1)
    handled = Handled(bot)
    for i in range(5):
        dispatch(app, mention(f"again {OOM_LINE}", ts=f"1700000008.00010{i}"))
    dispatch(app, mention(f"me too {OOM_LINE}", user="U0002", ts="1700000008.000900"))
    handled.wait_for(6)
    posts = answer_posts(slack)
    limited = [p for p in posts if "faster than I can" in json.dumps(p.args)]
    assert len(limited) == 1, "told once, not once per message"
    assert len(final_updates(slack)) == 3  # two for U0001 (the burst), one for U0002
    assert sum(1 for p in posts if "faster" not in json.dumps(p.args)) == 3


def test_a_planted_secret_is_never_posted(slack: FakeSlack) -> None:
    secrets = ["sk-proj-AbCdEfGhIjKlMnOpQrStUvWx1234", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz12",
               "0123456789abcdef0123456789abcdef01234567", "xoxb-9999999999-8888888888-PlantedSlackToken"]
    log = OOM_LOG.read_text() + (f"\nWANDB_API_KEY={secrets[2]}\nexport OPENAI_API_KEY={secrets[0]}\n"
                                 f"Traceback: authorization: Bearer {secrets[3]}\n{OOM_LINE}\n")
    config = CONFIG.read_text() + f"\n# hf token: {secrets[1]}\nwandb:\n  api_key: {secrets[2]}\n"
    app, _bot = make_app(slack)
    files = [slack.serve_file("run.log", log.encode()), slack.serve_file("cfg.yaml", config.encode())]
    dispatch(app, mention(f"help, my key {secrets[0]} and {secrets[1]} {OOM_LINE}", ts="1700000009.000100", files=files))
    slack.wait_for(lambda f: f.of("files.completeUploadExternal"))
    posted = slack.posted_text()
    assert "Root cause" in posted and slack.uploads
    for secret in secrets + [BOT_TOKEN]:
        assert secret not in posted


def test_the_manifest_asks_for_what_the_bot_uses() -> None:
    import yaml

    manifest = yaml.safe_load((Path(__file__).resolve().parents[1] / "ui" / "slack_manifest.yaml").read_text())
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"app_mentions:read", "chat:write", "files:read", "files:write", "im:history", "channels:history"} <= scopes
    assert {"app_mention", "message.im", "message.channels"} <= set(manifest["settings"]["event_subscriptions"]["bot_events"])
    assert manifest["settings"]["socket_mode_enabled"] is True


def test_the_token_bucket_refills_over_time() -> None:
    from rlmedic.ui.slack_app import TokenBucket

    now = [0.0]
    bucket = TokenBucket(burst=2, per_minute=6, clock=lambda: now[0])
    assert bucket.take("u") == 0 and bucket.take("u") == 0
    assert bucket.take("u") == pytest.approx(10.0)
    assert bucket.take("v") == 0, "buckets are per user"
    now[0] += 10
    assert bucket.take("u") == 0


def test_a_failure_turns_the_progress_message_into_one_line_without_secrets(
        slack: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlmedic.agent.engine as engine

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("cannot reach https://user:hunter2hunter2@example.com with hf_AbCdEfGhIjKlMnOpQrStUvWxYz12")

    monkeypatch.setattr(engine, "answer_events", broken)
    app, _bot = make_app(slack)
    dispatch(app, mention("why?", ts="1700000010.000100"))
    slack.wait_for(lambda f: any("Sorry, that failed" in json.dumps(c.args) for c in f.of("chat.update")))
    [post] = answer_posts(slack)
    [update] = slack.of("chat.update")
    assert update.args["ts"] == post.response["ts"]
    assert "RuntimeError" in update.args["text"]
    assert "hunter2hunter2" not in slack.posted_text() and "hf_AbCdEfGhIjKlMnOpQrStUvWxYz12" not in slack.posted_text()


def test_rlmedic_slack_http_serves_signed_events_end_to_end(slack: FakeSlack, tmp_path: Path) -> None:
    import os
    import re
    import subprocess
    import sys

    env = {**os.environ, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.api_url}
    proc = subprocess.Popen([sys.executable, "-m", "rlmedic", "slack", "--http", "--port", "0", "--offline"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/slack/events", line)
        assert match, line
        body = event_body(mention(f"why? {OOM_LINE}", ts="1700000011.000100"))
        headers = {k: v[0] for k, v in signed(body).items()}
        request = urllib.request.Request(match.group(0), data=body.encode(), headers=headers)
        with urllib.request.urlopen(request, timeout=20) as resp:
            assert resp.status == 200
        slack.wait_for(lambda f: final_updates(f), timeout=60)
        assert "*Root cause:* CUDA out of memory" in blocks_text(final_updates(slack)[-1])
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def _raw_post(port: int, head: str, body: bytes = b"", *, hold: bool = True, timeout: float = 5.0) -> tuple[int, float]:
    """Send a hand-written request (headers as given, ``body`` after them), keep our side open
    when ``hold``, and return (the status the server answered with, seconds it took)."""
    import socket

    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"POST /slack/events HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode() + body)
        if not hold:
            sock.shutdown(socket.SHUT_WR)
        reply = b""
        while b"\r\n" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0  # 0: closed without a reply
    return status, time.monotonic() - start


def test_hostile_content_lengths_are_refused_before_the_body_is_read(slack: FakeSlack, monkeypatch, caplog) -> None:
    """-1 / abc / missing / over 1 MiB: 400 / 400 / 411 / 413 at once, with the sender still
    connected and nothing read; a sender that stalls mid-body is dropped; the server then
    still answers a signed request, and a forged body never reaches the log."""
    import logging
    import threading

    from rlmedic.ui import slack_app

    monkeypatch.setattr(slack_app, "READ_TIMEOUT_S", 1.0)
    # `rlmedic slack` without -v quiets Bolt's logger (an earlier test in this process may have run it), and
    # Bolt's middleware copies that level when the app is built: set it first
    caplog.set_level(logging.INFO, logger="rlmedic.slack.bolt")
    app, _bot = make_app(slack)
    server = serve_http(app, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        assert _raw_post(port, "Content-Length: -1\r\n", b"x" * 300)[0] == 400
        assert _raw_post(port, "Content-Length: abc\r\n", b"x" * 10)[0] == 400
        assert _raw_post(port, "Content-Length: +5\r\n", b"x" * 5)[0] == 400
        assert _raw_post(port, "", b"")[0] == 411
        status, seconds = _raw_post(port, f"Content-Length: {2 << 20}\r\n", b"x" * 1000)
        assert status == 413 and seconds < 3
        # a body that never arrives: dropped after the read timeout, no thread held for ever
        status, seconds = _raw_post(port, "Content-Length: 100\r\n", b"x" * 10, timeout=10)
        assert status == 0 and seconds < 5
        # a forged request with -v logging on: refused, and its body is not in the log
        caplog.set_level(logging.DEBUG)
        body = event_body(mention("PLANTED-BODY-MARKER", ts="1700000012.000100"))
        headers = "".join(f"{k}: {v[0]}\r\n" for k, v in signed(body, secret="wrong").items())
        encoded = body.encode()
        assert _raw_post(port, headers + f"Content-Length: {len(encoded)}\r\n", encoded)[0] == 401
        assert "PLANTED-BODY-MARKER" not in caplog.text and "invalid signature" in caplog.text
        challenge = json.dumps({"type": "url_verification", "challenge": "still-up", "token": "legacy"})
        headers = {k: v[0] for k, v in signed(challenge).items()}
        url = f"http://127.0.0.1:{port}/slack/events"
        with urllib.request.urlopen(urllib.request.Request(url, data=challenge.encode(), headers=headers), timeout=10) as resp:
            assert json.loads(resp.read())["challenge"] == "still-up"
    finally:
        server.shutdown()
        server.server_close()


def test_body_length_is_decided_from_the_header_alone() -> None:
    from rlmedic.ui.slack_app import MAX_BODY_BYTES, body_length

    assert body_length(None) == (411, None) and body_length(" ") == (411, None)
    assert body_length("-1") == (400, None) and body_length("abc") == (400, None) and body_length("1e3") == (400, None)
    assert body_length("٣") == (400, None)  # a non-ASCII digit is not a length
    assert body_length(str(MAX_BODY_BYTES + 1)) == (413, None) and body_length("9" * 40) == (400, None)
    assert body_length(" 42 ") == (200, 42) and body_length(str(MAX_BODY_BYTES)) == (200, MAX_BODY_BYTES)
