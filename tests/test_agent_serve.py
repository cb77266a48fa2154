"""``serve-model``: the SGLang command per model family, and the wait/stop logic.

No GPU: a fake ``sglang.launch_server`` module (put first on PYTHONPATH) speaks the bits
that matter over real HTTP on loopback: ``/health`` answers 503 while "loading", then
200; it starts a worker child in its process group, like SGLang's scheduler processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlmedic.ui.serve_model import ServeOptions, base_url, build_command, family_parsers, serve, stop, wait_healthy
from rlmedic.errors import UserError
from rlmedic.ui.cli import app

FAKE_SGLANG = '''
import argparse, os, signal, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
# a suite started in the background (`cmd &`) hands SIGINT down ignored, and Python then keeps it
# ignored: Ctrl-C (stop()'s first signal) must reach this fake as it reaches SGLang in a terminal
signal.signal(signal.SIGINT, signal.default_int_handler)
p = argparse.ArgumentParser()
p.add_argument("--port", type=int)
p.add_argument("--host")
args, _ = p.parse_known_args()
if os.environ.get("FAKE_CRASH"):
    sys.exit(3)
ready_at = time.monotonic() + float(os.environ.get("FAKE_READY_AFTER", "0.6"))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["FAKE_PIDS"], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        code = 200 if time.monotonic() >= ready_at else 503
        self.send_response(code); self.send_header("Content-Length", "0"); self.end_headers()
server = HTTPServer((args.host, args.port), H)
server.timeout = 0.1
exit_after = float(os.environ.get("FAKE_EXIT_AFTER", "0"))
try:
    while not exit_after or time.monotonic() < ready_at + exit_after:
        server.handle_request()
except KeyboardInterrupt:
    sys.exit(0)
child.kill()  # the server ended on its own (FAKE_EXIT_AFTER): leave no worker behind
'''


@pytest.mark.parametrize(("model", "tool", "reasoning"), [
    ("Qwen/Qwen2.5-7B-Instruct", "qwen25", ""),
    ("/models/Qwen3-8B", "qwen25", "qwen3"),
    ("Qwen/Qwen3-30B-A3B-Thinking-2507", "qwen25", "qwen3-thinking"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder", ""),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3", ""),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral", ""),
    ("deepseek-ai/DeepSeek-V3", "deepseekv3", ""),
    ("deepseek-ai/DeepSeek-V3.1", "deepseekv31", "deepseek-v3"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "deepseekv3", "deepseek-r1"),
    ("zai-org/GLM-4.5-Air", "glm45", "glm45"),
    ("openai/gpt-oss-20b", "gpt-oss", "gpt-oss"),
    ("moonshotai/Kimi-K2-Instruct", "kimi_k2", ""),
])
def test_parsers_follow_the_model_family(model: str, tool: str, reasoning: str) -> None:
    assert family_parsers(model) == (tool, reasoning)
    cmd = build_command(ServeOptions(model=model, sglang_python="/opt/sglang/bin/python"))
    assert cmd[:3] == ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]
    assert cmd[cmd.index("--tool-call-parser") + 1] == tool
    if reasoning:
        assert cmd[cmd.index("--reasoning-parser") + 1] == reasoning
    else:
        assert "--reasoning-parser" not in cmd


def test_full_command_line_and_overrides() -> None:
    opts = ServeOptions(model="/m/Qwen3-8B", port=30001, tp=2, mem_fraction_static=0.8, context_length=32768,
                        sglang_python="/venv/bin/python", tool_call_parser="pythonic", reasoning_parser="none")
    assert build_command(opts) == [
        "/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/m/Qwen3-8B", "--host", "127.0.0.1",
        "--port", "30001", "--tp", "2", "--tool-call-parser", "pythonic", "--mem-fraction-static", "0.8",
        "--context-length", "32768",
    ]
    assert base_url(ServeOptions(model="x", host="0.0.0.0", port=8000)) == "http://127.0.0.1:8000/v1"
    with pytest.raises(UserError, match="--tool-call-parser"):
        build_command(ServeOptions(model="/models/my-own-model"))


def test_cli_dry_run_prints_the_command() -> None:
    result = CliRunner().invoke(app, ["serve-model", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "4",
                                      "--sglang-python", "/sg/bin/python", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == ("/sg/bin/python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
                                     "--host 127.0.0.1 --port 30000 --tp 4 --tool-call-parser llama3")


@pytest.fixture
def fake_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pkg = tmp_path / "fakesite" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(FAKE_SGLANG)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fakesite"))
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    return tmp_path / "pids"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent counts as gone
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def test_wait_for_health_then_stop_the_whole_process_group(fake_sglang: Path) -> None:
    opts = ServeOptions(model="Qwen/Qwen2.5-7B-Instruct", port=_port(), sglang_python=sys.executable)
    process = subprocess.Popen(build_command(opts), start_new_session=True)
    try:
        started = time.monotonic()
        wait_healthy(process, base_url(opts).removesuffix("/v1") + "/health", timeout_s=20, interval_s=0.1)
        assert time.monotonic() - started >= 0.4  # it waited through the 503s
        server_pid, child_pid = map(int, fake_sglang.read_text().split())
        assert _alive(child_pid)
    finally:
        code = stop(process, grace_s=5)
    assert code == 0
    deadline = time.monotonic() + 5
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child_pid) and not _alive(server_pid)


def test_a_server_that_dies_while_loading_is_one_clear_error(fake_sglang: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CRASH", "1")
    opts = ServeOptions(model="Qwen/Qwen2.5-7B-Instruct", port=_port(), sglang_python=sys.executable)
    process = subprocess.Popen(build_command(opts), start_new_session=True)
    with pytest.raises(UserError, match="exited with code 3"):
        wait_healthy(process, base_url(opts).removesuffix("/v1") + "/health", timeout_s=20, interval_s=0.1)


def test_a_server_that_never_gets_ready_times_out_and_is_stopped(fake_sglang: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_READY_AFTER", "600")
    opts = ServeOptions(model="Qwen/Qwen2.5-7B-Instruct", port=_port(), sglang_python=sys.executable)
    lines: list[str] = []
    with pytest.raises(UserError, match="not ready after 1 s"):
        serve(opts, echo=lines.append, timeout_s=1.0, interval_s=0.1)
    server_pid, child_pid = map(int, fake_sglang.read_text().split())
    assert not _alive(server_pid) and not _alive(child_pid)
    assert lines[0].startswith("starting: ") and not any(line.startswith("ready") for line in lines)


def test_serve_prints_the_base_url_when_ready(fake_sglang: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_EXIT_AFTER", "0.5")
    opts = ServeOptions(model="Qwen/Qwen2.5-7B-Instruct", port=_port(), sglang_python=sys.executable)
    lines: list[str] = []
    assert serve(opts, echo=lines.append, timeout_s=20, interval_s=0.1) == 0
    assert lines[1].startswith(f"ready: http://127.0.0.1:{opts.port}/v1")


def test_dry_run_says_when_sglang_would_run_under_rlmedics_own_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMEDIC_SGLANG_PYTHON", raising=False)
    result = CliRunner().invoke(app, ["serve-model", "--model", "Qwen/Qwen2.5-7B-Instruct", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{sys.executable} -m sglang.launch_server ")  # stdout: the command alone
    assert "--sglang-python" in result.stderr and "own Python" in result.stderr
    chosen = CliRunner().invoke(app, ["serve-model", "--model", "Qwen/Qwen2.5-7B-Instruct", "--dry-run",
                                      "--sglang-python", "/sg/bin/python"])
    assert chosen.exit_code == 0 and chosen.stderr == ""


def test_an_interpreter_without_sglang_is_refused_before_starting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMEDIC_SGLANG_PYTHON", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # no sglang anywhere on this path
    lines: list[str] = []
    with pytest.raises(UserError, match="has no SGLang.*--sglang-python"):
        serve(ServeOptions(model="Qwen/Qwen2.5-7B-Instruct", port=_port()), echo=lines.append, timeout_s=5)
    assert lines == []  # nothing was started
    result = CliRunner().invoke(app, ["serve-model", "--model", "Qwen/Qwen2.5-7B-Instruct",
                                      "--sglang-python", str(tmp_path / "no-such-python")])
    assert result.exit_code == 2 and "cannot run" in result.stderr and "--sglang-python" in result.stderr


def test_a_server_that_dies_while_loading_names_the_interpreter(fake_sglang: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CRASH", "1")
    opts = ServeOptions(model="Qwen/Qwen2.5-7B-Instruct", port=_port(), sglang_python=sys.executable)
    with pytest.raises(UserError, match=r"exited with code 3.*--sglang-python"):
        serve(opts, echo=lambda _line: None, timeout_s=20, interval_s=0.1)
