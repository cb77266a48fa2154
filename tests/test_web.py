"""``rlmedic web``: the Gradio app on loopback, driven by gradio_client and by a headless browser."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from pathlib import Path

import pytest
from conftest import FIXTURES

LOG = FIXTURES / "logs" / "multirank" / "rank2.log"
SNAPSHOT = FIXTURES / "gpu" / "a40_leftovers.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    from rlmedic.ui.web import WebSettings, launch

    uploads = tmp_path_factory.mktemp("uploads")
    port = _free_port()
    demo, sessions = launch(WebSettings(offline=True, max_upload_mb=1, uploads_root=uploads), port=port, block=False)
    try:
        yield f"http://127.0.0.1:{port}/", sessions
    finally:
        demo.close()
        sessions.close_all()


def _client(url: str):
    from gradio_client import Client

    return Client(url, verbose=False)


def _ask(client, text: str, files: list[Path] = ()):  # noqa: ANN001, ANN202
    from gradio_client import handle_file

    return client.predict({"text": text, "files": [handle_file(str(f)) for f in files]}, [], api_name="/chat")


def _texts(history: list[dict]) -> str:
    out = []
    for m in history:
        content = m.get("content")
        if isinstance(content, list):
            out += [c.get("text", "") for c in content if isinstance(c, dict)]
        else:
            out.append(str(content))
    return "\n".join(out)


def test_a_question_gets_an_answer_naming_the_fix(web) -> None:
    url, _sessions = web
    _box, history, *_ = _ask(_client(url), "sglang keeps running out of memory during rollout, what do I change?")
    text = _texts(history)
    assert "mem_fraction_static" in text or "mem-fraction-static" in text
    assert "Sources" in text and "offline engine" in text


def test_an_uploaded_log_gets_its_root_cause_and_tool_steps(web) -> None:
    url, sessions = web
    box, history, diag, diff, download, plot, gpu, sources, note, _curve = _ask(_client(url), "why did my run die?", [LOG])
    steps = [m for m in history if (m.get("metadata") or {}).get("title", "").endswith("diagnose")]
    assert steps and steps[0]["metadata"]["status"] == "done" and steps[0]["metadata"]["duration"] >= 0
    assert "root cause cuda-oom" in _texts(steps)
    assert "Root cause" in diag and "rank2.log:13" in diag and "cuda" in diag.lower()
    assert "rank2.log:13" in sources and "card:oom-actor-train" in sources
    assert box == {"text": "", "files": []} or not (box or {}).get("files")


def test_a_gpu_snapshot_fills_the_gpu_panel(web) -> None:
    url, _sessions = web
    *_, plot, gpu, _sources, _note, _curve = _ask(_client(url), "is anything left on the GPUs?", [SNAPSHOT])
    assert "leftover" in gpu.lower()
    rows = plot["value"]["data"] if isinstance(plot, dict) and "value" in plot else plot["data"]
    assert any("leftover" in str(r) for r in rows) and any("free" in str(r) for r in rows)


def test_two_sessions_keep_their_own_conversations(web) -> None:
    url, sessions = web
    a, b = _client(url), _client(url)
    results: dict[str, object] = {}

    def run(name: str, client, text: str, files: list[Path]) -> None:  # noqa: ANN001
        results[name] = _ask(client, text, files)

    threads = [threading.Thread(target=run, args=("a", a, "why did my run die?", [LOG])),
               threading.Thread(target=run, args=("b", b, "is anything left on the GPUs?", [SNAPSHOT]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    hist_a, hist_b = _texts(results["a"][1]), _texts(results["b"][1])
    assert "rank2.log" in hist_a and "a40_leftovers" not in hist_a
    assert "a40_leftovers" in hist_b and "rank2.log" not in hist_b
    # a follow-up in session a still sees only its own upload
    follow = _texts(_ask(a, "and what should I change?")[1])
    assert "a40_leftovers" not in follow
    folders = [p for p in sessions.root.iterdir() if p.is_dir()]
    with_log = [f for f in folders if (f / "rank2.log").exists()]
    with_snap = [f for f in folders if (f / "a40_leftovers.json").exists()]
    assert with_log and with_snap and not set(with_log) & set(with_snap)


def test_an_upload_over_the_cap_is_refused(web, tmp_path: Path) -> None:
    url, _sessions = web
    big = tmp_path / "huge.log"
    big.write_bytes(b"x" * (2 * 1024 * 1024))
    with pytest.raises(Exception) as info:
        _ask(_client(url), "why?", [big])
    assert "size" in str(info.value).lower() or "large" in str(info.value).lower() or "1mb" in str(info.value).lower()


def test_no_endpoint_reads_outside_the_session_folder(web, tmp_path: Path) -> None:
    url, _sessions = web
    secret = tmp_path / "outside.log"
    secret.write_text("torch.OutOfMemoryError: CUDA out of memory. OUTSIDE-SECRET\n")
    import httpx

    client = _client(url)
    # a server-side path the browser never uploaded is refused by the server (raw API call:
    # gradio_client would upload a local file itself)
    payload = {"data": [{"text": "why?", "files": [{"path": str(secret), "meta": {"_type": "gradio.FileData"}}]}, []]}
    event = httpx.post(url + "gradio_api/call/chat", json=payload, timeout=30).json()["event_id"]
    with httpx.stream("GET", url + f"gradio_api/call/chat/{event}", timeout=60) as stream:
        body = "".join(stream.iter_text())
    assert "event: error" in body and "OUTSIDE-SECRET" not in body
    # and a question naming the path reads nothing: the tools' only root is the session folder
    _box, history, diag, *_ = client.predict({"text": f"diagnose {secret}", "files": []}, [], api_name="/chat")
    assert "OUTSIDE-SECRET" not in _texts(history) and "OUTSIDE-SECRET" not in diag
    # the file routes do not serve it either
    for route in (f"gradio_api/file={secret}", f"file={secret}"):
        assert "OUTSIDE-SECRET" not in httpx.get(url + route, timeout=10).text


def test_closing_a_session_deletes_its_folder(tmp_path: Path) -> None:
    from rlmedic.ui.web import Sessions, WebSettings, save_uploads

    sessions = Sessions(WebSettings(offline=True, uploads_root=tmp_path / "up", session_ttl_s=0.0))
    s = sessions.get("a")
    save_uploads(s, [str(LOG)], 10**7)
    assert (s.folder / "rank2.log").exists()
    sessions.get("b")  # sweeps: a's idle time is past the TTL
    assert not s.folder.exists()
    sessions.close_all()
    assert not (tmp_path / "up").exists()


def test_two_sessions_sending_the_same_file_at_once_both_get_it(tmp_path: Path, monkeypatch) -> None:
    """Gradio keeps identical uploads at one path (its folder is the content's hash): the session that
    copies it first deletes it, and the other, at the same moment or just after, still gets the bytes."""
    from rlmedic.ui.web import Sessions, WebSettings, save_uploads

    cache = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(cache))
    sessions = Sessions(WebSettings(offline=True, uploads_root=tmp_path / "up"))
    body = LOG.read_bytes()
    for round_ in range(5):
        shared = cache / f"hash{round_}" / "rank2.log"  # one path, as Gradio gives both sessions
        shared.parent.mkdir(parents=True)
        shared.write_bytes(body)
        got: dict[str, object] = {}
        start = threading.Barrier(2)

        def send(key: str, src: Path = shared) -> None:
            start.wait()
            try:
                got[key] = save_uploads(sessions.get(key), [str(src)], 10**7)
            except Exception as exc:  # noqa: BLE001 - the assertion below names it
                got[key] = exc

        threads = [threading.Thread(target=send, args=(f"s{round_}-{k}",)) for k in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for key, value in got.items():
            assert isinstance(value, list), f"{key}: {value!r}"
            assert value[0].read_bytes() == body
        assert not shared.parent.exists()  # and Gradio's copy is gone
    # a third session sending that path later still gets it while a session holds the copy
    late = save_uploads(sessions.get("late"), [str(cache / "hash0" / "rank2.log")], 10**7)
    assert late[0].read_bytes() == body
    sessions.close_all()


@pytest.mark.browser
def test_the_page_in_a_headless_browser(web, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    url, _sessions = web
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: .ci/run installs it (apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--disable-quic"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(120_000)  # a loaded 2-core machine starts chromium slowly
            page.goto(url, wait_until="domcontentloaded", timeout=120_000)
            page.locator("textarea").first.wait_for(timeout=60_000)
            page.set_input_files("input[type=file]", str(LOG))
            page.wait_for_timeout(500)
            box = page.locator("textarea").first
            box.fill("why did my run die?")
            box.press("Enter")
            # the answer (the tool step's own body may render collapsed once it is done)
            page.get_by_text("max_tokens_per_mb").first.wait_for(timeout=120_000)
            shot = Path(os.environ.get("RLMEDIC_WEB_SCREENSHOT") or tmp_path / "web.png")
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            assert page.get_by_text("diagnose").count() >= 1
        finally:
            browser.close()


# ---------------------------------------------------------------------- issue 21: hostile input


def test_a_secret_typed_into_the_question_never_comes_back_in_the_history(web) -> None:
    url, _sessions = web
    key = "0123456789abcdef0123456789abcdef01234567"
    _box, history, *_ = _ask(_client(url), f"my run died, I launched it with WANDB_API_KEY={key} set, why?")
    text = _texts(history)
    assert key not in text and "WANDB_API_KEY=[REDACTED]" in text


def test_gradios_copy_of_an_upload_is_deleted_once_the_session_has_it(web) -> None:
    url, sessions = web
    _ask(_client(url), "why did my run die?", [LOG])
    cache = sessions.root / "gradio"
    assert os.environ["GRADIO_TEMP_DIR"] == str(cache)  # Gradio's cache lives in the server's folder
    assert list(sessions.root.glob("s-*/rank2.log"))  # the session's own copy
    assert not list(cache.rglob("rank2.log"))  # Gradio's copy is gone


def _serve(tmp_path: Path):  # noqa: ANN202
    """`rlmedic web --offline` in its own process, with its own temp folder; (process, port, first stderr line)."""
    import subprocess
    import sys
    import time

    port = _free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path), "RLMEDIC_HOME": str(tmp_path / "home")}
    env.pop("GRADIO_TEMP_DIR", None)
    proc = subprocess.Popen([sys.executable, "-m", "rlmedic", "web", "--offline", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # printed once the server listens
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.2)
    return proc, port, line


def _upload(port: int, path: Path) -> None:
    import httpx

    with path.open("rb") as fh:
        reply = httpx.post(f"http://127.0.0.1:{port}/gradio_api/upload", files={"files": (path.name, fh)}, timeout=30)
    assert reply.status_code == 200, reply.text


@pytest.mark.slow  # two server processes, each importing Gradio
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_the_server_stops_within_5_s_and_leaves_no_upload_behind(how: str, tmp_path: Path) -> None:
    """SIGTERM (a container stop) and Ctrl-C: the rlmedic-web-* folder, with the sessions' uploads
    and Gradio's cache in it, is deleted, and the process is gone within 5 s. No share-link hint."""
    import signal
    import subprocess
    import time

    marker = tmp_path / "planted.log"
    marker.write_text("torch.OutOfMemoryError: CUDA out of memory. PLANTED-UPLOAD-MARKER\n")
    proc, port, line = _serve(tmp_path)
    try:
        assert line.startswith("rlmedic web: http://127.0.0.1:"), line
        _upload(port, marker)
        folders = list(tmp_path.glob("rlmedic-web-*"))
        assert len(folders) == 1 and list(folders[0].rglob("planted.log"))  # Gradio's copy, in our folder
        started = time.monotonic()
        proc.send_signal(getattr(signal, how))
        out, err = proc.communicate(timeout=15)
        assert time.monotonic() - started < 5, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert not list(tmp_path.glob("rlmedic-web-*"))
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p != marker and "PLANTED-UPLOAD-MARKER" in p.read_text(errors="replace")]
    assert "share=True" not in out + err + line
