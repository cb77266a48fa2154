"""``rlmedic mcp``: a real MCP client session over stdio and over streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES

MULTIRANK = FIXTURES / "logs" / "multirank"
RLMEDIC = [sys.executable, "-m", "rlmedic"]


async def _exercise(session) -> None:  # noqa: ANN001
    await session.initialize()
    listed = await session.list_tools()
    names = {t.name for t in listed.tools}
    assert {"diagnose", "fix_config", "list_checkpoints", "gpu_status", "search_docs"} <= names
    diagnose = next(t for t in listed.tools if t.name == "diagnose")
    assert diagnose.input_schema["properties"]["paths"]["type"] == "array"
    assert diagnose.annotations is not None and diagnose.annotations.read_only_hint is True

    result = await session.call_tool("diagnose", {"paths": [str(MULTIRANK)]})
    assert not result.is_error
    assert "ROOT CAUSE" in result.content[0].text and "cuda-oom" in result.content[0].text
    data = result.structured_content
    assert data["findings"][data["root"]]["id"] == "cuda-oom"

    refused = await session.call_tool("diagnose", {"paths": ["/etc/passwd"]})
    assert refused.is_error and "outside the allowed roots" in refused.content[0].text
    bad = await session.call_tool("diagnose", {"paths": "not-a-list"})
    assert bad.is_error and "paths" in bad.content[0].text
    nul = await session.call_tool("diagnose", {"paths": [str(MULTIRANK) + "/rank0.log\x00.txt"]})
    assert nul.is_error and "NUL byte" in nul.content[0].text and "internal error" not in nul.content[0].text


def test_mcp_over_stdio() -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def main() -> None:
        params = StdioServerParameters(command=RLMEDIC[0], args=[*RLMEDIC[1:], "mcp", "--allow", str(MULTIRANK)],
                                       env={**os.environ})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await _exercise(session)

    asyncio.run(asyncio.wait_for(main(), timeout=120))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def http_server():
    port = _free_port()
    proc = subprocess.Popen([*RLMEDIC, "mcp", "--http", "--port", str(port), "--allow", str(MULTIRANK)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(proc.stdout.read().decode() if proc.stdout else "server exited")
                time.sleep(0.2)
        else:
            raise AssertionError("MCP HTTP server did not start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_mcp_over_streamable_http(http_server: str) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> None:
        async with streamable_http_client(http_server) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await _exercise(session)

    asyncio.run(asyncio.wait_for(main(), timeout=120))


def test_mcp_allow_must_exist(tmp_path: Path) -> None:
    proc = subprocess.run([*RLMEDIC, "mcp", "--allow", str(tmp_path / "missing")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "no such file" in proc.stderr
