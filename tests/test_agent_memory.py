"""The model's memory on disk: private files, and only what the model was sent (redacted)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from conftest import FIXTURES
from fake_openai import FakeOpenAI, replies_from
from rlmedic.agent.engine import answer_events
from rlmedic.agent.llm import LLMConfig
from rlmedic.tools.registry import ToolContext

LOG = FIXTURES / "logs" / "signatures" / "cuda-oom.log"
KEY_LINES = [
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "QyNTUxOQAAACCxO38tKA0yv1SzOvTWhmbyG6vWFqSJwlv7QJ9wTOqMtwAAAJi8Nc5RvDXO",
    "AAAECAwQFBgc=",  # the short last line: only a block redaction catches it
]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture()
def log_with_key(tmp_path: Path) -> Path:
    log = tmp_path / "train.log"
    text = LOG.read_text(encoding="utf-8")
    lines = text.splitlines()
    at = max(0, len(lines) - 3)  # the key sits right before the failure, inside the excerpt the tools quote
    block = ["-----BEGIN OPENSSH PRIVATE KEY-----", *KEY_LINES, "-----END OPENSSH PRIVATE KEY-----"]
    log.write_text("\n".join(lines[:at] + block + lines[at:]) + "\n", encoding="utf-8")
    return log


def test_the_memory_is_private_and_keeps_only_what_the_model_was_sent(
        tmp_path: Path, log_with_key: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "fresh-home"  # not there yet: rlmedic creates it
    monkeypatch.setenv("RLMEDIC_HOME", str(home))
    rows = [{"calls": [{"name": "diagnose", "arguments": {"paths": [str(log_with_key)]}}]},
            {"content": "Root cause: CUDA OOM while training."}]
    with FakeOpenAI(replies_from(rows)) as server:
        events = list(answer_events("why did it die?", attachments=[log_with_key], thread_id="team-a",
                                    ctx=ToolContext.for_roots([str(log_with_key)]),
                                    config=LLMConfig.resolve(base_url=server.base_url)))
        sent = [m["content"] for r in server.requests for m in r["messages"] if m["role"] == "tool"]
    assert events[-1].answer.engine == "llm"
    db = home / "conversations.sqlite"
    assert _mode(home) == 0o700
    companions = [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]
    assert db in companions and all(_mode(p) == 0o600 for p in companions), [(p, oct(_mode(p))) for p in companions]
    raw = b"".join(p.read_bytes() for p in companions)
    for line in KEY_LINES:
        assert line.encode() not in raw, line
    # the stored tool message is the text the model was sent, without the whole result object
    from rlmedic.agent.loop import checkpointer

    saver = checkpointer("team-a")
    state = saver.get({"configurable": {"thread_id": "team-a"}})
    messages = state["channel_values"]["messages"]
    tools = [m for m in messages if m.type == "tool"]
    assert tools and all(m.artifact is None for m in tools)
    assert [m.content for m in tools] == sent
    saver.conn.close()
    # nothing beyond what the model saw: the result's structured data (findings as JSON) is not there
    data = json.dumps(next(e for e in events if type(e).__name__ == "ToolFinished").data)
    assert len(data) > 200 and data.encode()[:200] not in raw
    with sqlite3.connect(db) as conn:  # still a readable LangGraph store
        assert conn.execute("select count(*) from checkpoints").fetchone()[0] > 0


def test_an_existing_world_readable_memory_is_made_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMEDIC_HOME", str(tmp_path))
    db = tmp_path / "conversations.sqlite"
    sqlite3.connect(db).close()
    db.chmod(0o644)
    Path(f"{db}-wal").write_bytes(b"")
    Path(f"{db}-wal").chmod(0o644)
    from rlmedic.agent.loop import checkpointer

    saver = checkpointer("t")
    assert _mode(db) == 0o600 and _mode(Path(f"{db}-wal")) == 0o600
    saver.conn.close()
