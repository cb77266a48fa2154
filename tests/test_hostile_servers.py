"""Issue 31 in the servers: a log crafted against a shipped record's pattern never starves anyone else.

Before: the crafted 192 KB log held Python's ``re`` (and the GIL) for 100-165 s, so the web
app's other sessions timed out and Slack events stayed unacknowledged for 60 s (Slack wants an
answer within 3 s). Record patterns now run on RE2 (linear, the GIL released) and a big upload's
matching runs in worker processes. Here, through the real Slack app (signed events, a fake
Slack Web API on loopback) and the real Gradio app: while the crafted log is being answered,
another user's event is acknowledged at once and another session gets its answer.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from test_slack import dispatch, final_updates, make_app
from test_web import SNAPSHOT, _ask, _client, _texts, web  # noqa: F401 - the module's Gradio server fixture

from fake_slack import FakeSlack

#: Slack retries an event it has no answer for within 3 s.
SLACK_ACK_S = 3.0


def crafted_log() -> bytes:
    """The shipped torch record's trap: its required literal early, then a start of its pattern on every line."""
    return ("[rank0] caught torch.OutOfMemoryError, retrying with a smaller batch\n" + "entropy\n" * 24_000).encode()


def test_slack_acknowledges_other_events_while_a_crafted_log_is_answered(tmp_path: Path) -> None:
    fake = FakeSlack().start()
    try:
        app, _bot = make_app(fake)
        crafted = {"type": "message", "user": "U0002", "text": "why did it crash?", "channel": "D0001",
                   "ts": "1700000100.000100", "channel_type": "im",
                   "files": [fake.serve_file("train.log", crafted_log())]}
        started = time.monotonic()
        assert dispatch(app, crafted) == 200
        fake.wait_for(lambda f: f.file_gets, timeout=30)  # the crafted log is being read and matched now
        acks = []
        for n in range(3):
            other = {"type": "message", "user": "U0003", "text": "sglang keeps running out of memory, what do I change?",
                     "channel": f"D00{n + 2:02d}", "ts": f"1700000100.00020{n}", "channel_type": "im"}
            t = time.monotonic()
            assert dispatch(app, other) == 200
            acks.append(time.monotonic() - t)
        assert max(acks) < SLACK_ACK_S, f"events acknowledged after {acks} s while the crafted log was matched"
        fake.wait_for(lambda f: {c.args.get("channel") for c in final_updates(f)} >= {"D0001", "D0002", "D0003", "D0004"},
                      timeout=120)
        assert time.monotonic() - started < 120
    finally:
        fake.stop()


def test_another_web_session_is_answered_while_a_crafted_log_is(web, tmp_path: Path) -> None:  # noqa: F811
    url, _sessions = web
    crafted = tmp_path / "train.log"
    crafted.write_bytes(crafted_log())  # 192 KB: under the fixture's 1 MB upload cap
    done: dict[str, float] = {}
    started = time.monotonic()

    def crafted_session() -> None:
        _ask(_client(url), "why did it crash?", [crafted])
        done["crafted"] = time.monotonic() - started

    thread = threading.Thread(target=crafted_session)
    thread.start()
    time.sleep(0.5)  # the crafted upload goes first
    _box, history, *_ = _ask(_client(url), "is anything left on the GPUs?", [SNAPSHOT])
    done["other"] = time.monotonic() - started
    thread.join(timeout=180)
    assert "leftover" in _texts(history).lower()
    assert "crafted" in done, "the crafted log got no answer within 180 s"
    # before issue 31 the other session waited for the crafted one (100-165 s) and timed out
    assert done["other"] < 60, done


def test_concurrent_first_questions_of_separate_sessions_share_one_fresh_index(tmp_path: Path) -> None:
    """Each Slack or web session opens its own KnowledgeBase: on a fresh index their first questions wrote the
    cards' read-side copy at once, through one temporary file ("attempt to write a readonly database")."""
    from rlmedic.knowledge.index import KnowledgeBase

    errors: list[BaseException] = []
    hits: list[int] = []
    start = threading.Barrier(4)

    def first_question() -> None:
        try:
            start.wait()
            hits.append(len(KnowledgeBase(tmp_path / "index").search("sglang runs out of memory", 3, kind="card")))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_question) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert hits == [3, 3, 3, 3]
    assert not list((tmp_path / "index").glob("*.tmp"))


def test_mcp_answers_a_40_mb_path_with_a_short_error(tmp_path: Path) -> None:
    """Issue 31: MCP sent a 40 MB error back for a 40 MB path (errors echoed the argument)."""
    import asyncio
    import os
    import sys

    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    (tmp_path / "train.log").write_text("[rank0]: torch.OutOfMemoryError: CUDA out of memory.\n")
    huge = str(tmp_path / ("p" * 40_000_000))
    measured: dict[str, float] = {}

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-m", "rlmedic", "mcp", "--allow", str(tmp_path)],
                                       env={**os.environ})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            started = time.monotonic()
            result = await session.call_tool("diagnose", {"paths": [huge]})
            measured["seconds"] = time.monotonic() - started
            measured["chars"] = sum(len(getattr(c, "text", "")) for c in result.content)
            assert result.is_error
            # the server is still there, and answers the next call normally
            ok = await session.call_tool("diagnose", {"paths": [str(tmp_path / "train.log")]})
            assert not ok.is_error and "out of memory" in ok.content[0].text.lower()

    asyncio.run(asyncio.wait_for(main(), timeout=120))
    assert measured["chars"] < 2_000, measured
    assert measured["seconds"] < 10, measured
