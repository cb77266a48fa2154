"""``rlmedic chat``: driven through a pipe and through a pseudo-terminal."""

from __future__ import annotations

import pytest
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import FIXTURES

LOG = FIXTURES / "logs" / "multirank" / "rank2.log"
CONFIG = FIXTURES / "configs" / "areal" / "mb_tokens.yaml"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "RLMEDIC_HOME": str(tmp_path / "home"), "NO_COLOR": "1", "TERM": "xterm",
            "RLMEDIC_BASE_URL": "http://127.0.0.1:9/v1"}


def test_piped_chat_attaches_answers_and_saves(tmp_path: Path) -> None:
    script = "\n".join([
        "/help",
        f"/attach {LOG}",
        "why did my run die?",
        f"/attach {tmp_path / 'missing.log'}",
        "/frobnicate",
        f"/save {tmp_path / 'chat.md'}",
        "/detach",
        "/quit",
        "never asked",
    ]) + "\n"
    proc = subprocess.run([sys.executable, "-m", "rlmedic", "chat", "--offline"], input=script, capture_output=True,
                          text=True, timeout=240, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "/attach PATH" in out and "offline engine" in out
    assert f"attached: {LOG}" in out
    # the tool step, compact, then the answer naming the root cause's fix and the evidence line
    assert "> diagnose paths=rank2.log" in out and "< diagnose: root cause cuda-oom" in out
    assert "max_tokens_per_mb" in out and "rank2.log:13" in out
    assert "no such file or directory" in out and "unknown command /frobnicate" in out
    assert "? never asked" not in out  # /quit ended the session
    saved = (tmp_path / "chat.md").read_text()
    assert saved.startswith("# rlmedic conversation") and "## Q: why did my run die?" in saved and "cuda-oom" not in saved[:20]
    assert "**Sources**" in saved and "rank2.log:13" in saved


def test_piped_chat_falls_back_offline_with_a_notice(tmp_path: Path) -> None:
    """No --offline and no model server listening: one notice line, then the offline answer."""
    proc = subprocess.run([sys.executable, "-m", "rlmedic", "chat", "--attach", str(LOG)],
                          input="why did it die?\n", capture_output=True, text=True, timeout=240, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "note: offline" in proc.stdout and "max_tokens_per_mb" in proc.stdout


def test_save_refuses_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "keep.md"
    target.write_text("mine\n")
    proc = subprocess.run([sys.executable, "-m", "rlmedic", "chat", "--offline"], input=f"/save {target}\n",
                          capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert "already exists" in proc.stdout and target.read_text() == "mine\n"


@pytest.mark.slow
def test_terminal_chat_streams_and_ctrl_c_keeps_the_session(tmp_path: Path) -> None:
    """Through a pseudo-terminal, against a scripted SGLang-style server: the tool step and the
    streamed answer show; Ctrl-C during a slow answer stops it and the prompt comes back."""
    import pexpect
    from fake_openai import FakeOpenAI, Reply, tool

    replies = [
        Reply(calls=[tool("diagnose", paths=[str(LOG)])]),
        Reply(content="The run died of a CUDA OOM in training at rank2.log:13; lower actor.mb_spec.max_tokens_per_mb."),
        Reply(content="slow", delay_s=60),
    ]
    with FakeOpenAI(replies) as server:
        env = {**_env(tmp_path), "RLMEDIC_BASE_URL": server.base_url}
        child = pexpect.spawn(sys.executable, ["-m", "rlmedic", "chat"], env=env, encoding="utf-8", timeout=120,
                              dimensions=(50, 200))
        try:
            child.expect("rlmedic>")
            child.sendline(f"/attach {LOG}")
            child.expect("attached:")
            child.expect("rlmedic>")
            child.sendline("why did my run die?")
            child.expect("> diagnose paths=rank2.log")
            child.expect("< diagnose: root cause cuda-oom")
            child.expect("lower actor.mb_spec.max_tokens_per_mb")
            child.expect("rlmedic>")
            child.sendline("and what else?")
            deadline = time.monotonic() + 60
            while len(server.requests) < 3:  # the model has the question and answers slowly (60 s)
                assert time.monotonic() < deadline, "the follow-up never reached the model"
                time.sleep(0.05)
            started = time.monotonic()
            child.sendintr()
            child.expect(r"\[stopped\]")
            child.expect("rlmedic>")
            assert time.monotonic() - started < 15
            child.sendline("/help")
            child.expect("/attach PATH")
            child.expect("rlmedic>")
            child.sendeof()  # Ctrl-D quits
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
    assert child.exitstatus == 0
    history = tmp_path / "home" / "chat_history"
    assert history.exists() and "why did my run die?" in history.read_text()
