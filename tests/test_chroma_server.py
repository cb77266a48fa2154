"""``--chroma-url``: the dense index on a real Chroma server (``chroma run``) on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlmedic.ui.cli import app

runner = CliRunner()
#: The `chroma` console script is ``chromadb.cli.cli:app``; run it with this interpreter.
CHROMA = [sys.executable, "-c", "import sys; from chromadb.cli.cli import app; sys.argv[0] = 'chroma'; sys.exit(app())"]


@pytest.fixture
def chroma_server(tmp_path: Path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([*CHROMA, "run", "--path", str(tmp_path / "server-data"), "--host", "127.0.0.1",
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/api/v2/heartbeat", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("the Chroma server did not start")
                time.sleep(0.2)
        yield url, port
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_index_and_search_through_a_chroma_server(tmp_path: Path, chroma_server: tuple[str, int]) -> None:
    url, port = chroma_server
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "rollout.md").write_text(
        "# Rollout servers\n\n## Request timeouts\n\nWhen SGLang rollout requests time out during long generations, "
        "raise rollout.request_timeout and rollout.request_retries so a slow batch is not dropped.\n"
    )
    index_dir = tmp_path / "idx"
    result = runner.invoke(app, ["index", str(docs), "--index-dir", str(index_dir), "--chroma-url", url, "--json"])
    assert result.exit_code == 0, result.output
    assert not (index_dir / "chroma").exists()  # the vectors went to the server

    import chromadb

    client = chromadb.HttpClient(host="127.0.0.1", port=port)
    assert sum(c.count() for c in client.list_collections()) >= 1
    result = runner.invoke(app, ["search", "rollout request timed out", "--kind", "doc", "--index-dir", str(index_dir),
                                 "--chroma-url", url, "--json"])
    assert result.exit_code == 0, result.output
    top = json.loads(result.stdout)["results"][0]
    assert top["source"].endswith("rollout.md") and "request_timeout" in top["text"]


def test_an_unreachable_chroma_server_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = runner.invoke(app, ["search", "anything", "--kind", "card", "--index-dir", str(tmp_path / "idx"),
                                 "--chroma-url", f"http://127.0.0.1:{port}"])
    assert result.exit_code == 2
    assert "cannot reach the Chroma server" in result.output
