"""Web and chat front doors: load on ``rlmedic web`` and time to the first streamed token.

1. ``rlmedic web --offline`` in its own process; N concurrent gradio_client sessions, each
   uploading a log and asking Q questions. Prints errors, p50/p95 answer latency and the
   server's peak RSS.
2. Time from "enter" to the first streamed token through the agent (Session.ask)
   against the scripted SGLang-style server, minus that server's own time to first token
   measured by a plain streaming request in the same run.

    .venv/bin/python benchmarks/web.py [--sessions 20] [--questions 5] [--upload-mb 5] [--skip-first-token]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOG = REPO / "tests" / "fixtures" / "logs" / "multirank" / "rank2.log"
QUESTIONS = ["why did my run die?", "what should I change first?", "is this an OOM in training or generation?",
             "how do I resume from the last checkpoint?", "which config key matters most here?"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> float:
    """RSS of the server and its worker processes together."""
    import psutil

    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20


def _own_rss_mb(pid: int) -> float:
    """RSS of the server process alone (without its workers)."""
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def _upload(upload_mb: int) -> Path:
    """The file each session uploads: the small fixture log, or a generated training log of ``upload_mb`` MB."""
    if not upload_mb:
        return LOG
    sys.path.insert(0, str(REPO / "benchmarks"))
    from logscan import write_log  # the same synthetic AReaL log as the scan benchmark (an OOM at its end)

    path = Path(tempfile.mkdtemp(prefix="rlmedic-upload-")) / "train.log"
    write_log(path, upload_mb << 20)
    return path


def _all_at_once(user: Callable[[int], None], sessions: int) -> None:
    """Run ``user(i)`` for every session on its own thread, all started before any is awaited."""
    threads = [threading.Thread(target=user, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _own_copy(upload: Path, i: int) -> Path:
    """Session ``i``'s own log: the same run with a first and a last line of its own (each user uploads a
    different file: no cache keyed by content, of the whole file or of its head, is shared between sessions)."""
    if upload == LOG:
        return LOG
    own = upload.parent / f"s{i}" / upload.name
    if own.exists():
        return own
    own.parent.mkdir(exist_ok=True)
    with open(own, "w") as fh, open(upload) as src:
        fh.write(f"[2025-11-22 09:59:59] session {i} log starts here\n")
        shutil.copyfileobj(src, fh)
        fh.write(f"[2025-11-22 23:59:59] session {i} log ends here\n")
    return own


def _summary(latencies: list[float]) -> tuple[float, float, float]:
    lat = sorted(latencies)
    if not lat:
        return float("nan"), float("nan"), float("nan")
    return statistics.median(lat), lat[min(len(lat) - 1, int(0.95 * len(lat)))], lat[-1]


def in_process(sessions: int, questions: int, upload: Path, home: str) -> tuple[list[float], list[float], float]:
    """The anchor: the same sessions, uploads and questions through the web app's own session store
    (``Sessions``, ``save_uploads``, the conversation's ``ask``) in this process, same threads, no Gradio.
    Returns (first-question latencies, follow-up latencies, wall)."""
    os.environ["RLMEDIC_HOME"] = home
    from rlmedic.ui.web import Sessions, WebSettings, save_uploads

    store = Sessions(WebSettings(offline=True))
    for _ in store.get("warm").conversation.ask(QUESTIONS[0]):  # the knowledge base loads once, as in the server
        pass
    firsts: list[float] = []
    follow: list[float] = []
    lock = threading.Lock()

    def user(i: int) -> None:
        mine = _own_copy(upload, i)
        session = store.get(f"user-{i}")
        for q in range(questions):
            started = time.monotonic()
            with session.lock:
                if q == 0:
                    session.conversation.attach(*save_uploads(session, [str(mine)], 200 << 20))
                for _ in session.conversation.ask(QUESTIONS[q % len(QUESTIONS)]):
                    pass
            with lock:
                (firsts if q == 0 else follow).append(time.monotonic() - started)

    started = time.monotonic()
    _all_at_once(user, sessions)
    wall = time.monotonic() - started
    store.close_all()
    return firsts, follow, wall


def load(sessions: int, questions: int, upload_mb: int = 0, rounds: int = 1) -> None:
    from gradio_client import Client, handle_file

    upload = _upload(upload_mb)

    for i in range(sessions * rounds + 1):  # written before the clock starts, in both runs
        _own_copy(upload, i)
    port = _free_port()
    home = tempfile.mkdtemp(prefix="rlmedic-bench-")
    env = {**os.environ, "RLMEDIC_HOME": home, "GRADIO_ANALYTICS_ENABLED": "False"}
    launched = time.monotonic()
    server = subprocess.Popen([sys.executable, "-m", "rlmedic", "web", "--offline", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.3)
        # warm the knowledge base once, as a long-lived server is
        Client(url, verbose=False).predict({"text": QUESTIONS[0], "files": []}, [], api_name="/chat")
        startup = time.monotonic() - launched
        latencies: list[float] = []
        firsts: list[float] = []
        errors: list[str] = []
        import psutil

        base_rss, base_own = _rss_mb(server.pid), _own_rss_mb(server.pid)
        peak = [base_rss, base_own]
        lock = threading.Lock()

        def user(i: int) -> None:
            mine = _own_copy(upload, i)
            try:
                client = Client(url, verbose=False)
            except Exception as exc:  # noqa: BLE001
                with lock:
                    errors.append(f"connect: {exc}")
                return
            for q in range(questions):
                files = [handle_file(str(mine))] if q == 0 else []
                started = time.monotonic()
                try:
                    client.predict({"text": QUESTIONS[q % len(QUESTIONS)], "files": files}, [], api_name="/chat")
                    with lock:
                        (firsts if q == 0 else latencies).append(time.monotonic() - started)
                except Exception as exc:  # noqa: BLE001
                    with lock:
                        errors.append(str(exc)[:120])

        def watch_rss(stop: threading.Event) -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _rss_mb(server.pid))
                peak[1] = max(peak[1], _own_rss_mb(server.pid))
                stop.wait(0.5)

        stop = threading.Event()
        watcher = threading.Thread(target=watch_rss, args=(stop,), daemon=True)
        watcher.start()
        started = time.monotonic()
        _all_at_once(user, sessions)
        stop.set()
        wall = time.monotonic() - started
        rss_after = _rss_mb(server.pid)
        own_after = _own_rss_mb(server.pid)
        r1_firsts, r1_lat, r1_errors = list(firsts), list(latencies), list(errors)  # round 1: the figures below
        again: list[float] = []
        for r in range(1, rounds):  # more sessions with files of their own: is the RSS bounded?
            _all_at_once(lambda i, r=r: user(r * sessions + i), sessions)
            again.append(_own_rss_mb(server.pid))
        # one more session alone on the quiet server: what a follow-up on the same upload costs by itself
        alone = Client(url, verbose=False)
        quiet = []
        for q in range(3):
            files = [handle_file(str(_own_copy(upload, rounds * sessions)))] if q == 0 else []
            t0 = time.monotonic()
            alone.predict({"text": QUESTIONS[q], "files": files}, [], api_name="/chat")
            quiet.append(time.monotonic() - t0)
        size = f"{upload.stat().st_size / 2**20:.1f} MiB"
        print(f"web load: {sessions} sessions x {questions} questions (1 upload of {size} each, a different file per "
              f"session, follow-ups without), offline engine, {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f} at the end")
        answers = len(r1_firsts) + len(r1_lat)
        print(f"  server start-up to the first answer {startup:.1f} s (index built on first use, then kept)")
        print(f"  answers {answers}, errors {len(r1_errors)}, wall {wall:.1f} s, throughput {answers / wall:.2f} answers/s")
        for label, lat in (("all", r1_firsts + r1_lat), ("with the upload", r1_firsts), ("follow-ups", r1_lat)):
            p50, p95, top = _summary(lat)
            print(f"  latency {label:16s} p50 {p50:.2f} s, p95 {p95:.2f} s, max {top:.2f} s ({len(lat)})")
        print(f"  server RSS before the load {base_rss:.0f} MB, peak {peak[0]:.0f} MB, after {rss_after:.0f} MB "
              f"(with its {len(psutil.Process(server.pid).children(recursive=True))} workers; the server process "
              f"alone {base_own:.0f} -> peak {peak[1]:.0f} -> {own_after:.0f} MB)")
        print(f"  one session alone afterwards: with the upload {quiet[0]:.2f} s, follow-ups "
              + ", ".join(f"{x * 1000:.0f} ms" for x in quiet[1:]))
        if again:
            print(f"  server process alone after {len(again)} more round(s) of {sessions} new sessions (errors now "
                  f"{len(errors)}): " + ", ".join(f"{x:.0f} MB" for x in again))
        for e in errors[:5]:
            print(f"  error: {e}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    a_first, a_follow, a_wall = in_process(sessions, questions, upload, home)
    print(f"anchor, the same sessions in-process without Gradio (same threads, same files, this run): wall {a_wall:.1f} s")
    for label, lat in (("all", a_first + a_follow), ("with the upload", a_first), ("follow-ups", a_follow)):
        p50, p95, top = _summary(lat)
        print(f"  latency {label:16s} p50 {p50:.2f} s, p95 {p95:.2f} s, max {top:.2f} s ({len(lat)})")
    _, web_p95, _ = _summary(r1_firsts + r1_lat)
    _, anchor_p95, _ = _summary(a_first + a_follow)
    print(f"ratio web / anchor: wall {wall / a_wall:.2f}x, p95 {web_p95 / anchor_p95:.2f}x")


def first_token(rounds: int = 10) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    import httpx
    from fake_openai import FakeOpenAI, Reply

    from rlmedic.agent.events import TextDelta
    from rlmedic.agent.llm import LLMConfig
    from rlmedic.agent.session import Session

    server_delay = 0.2
    replies = [Reply(content="The run died of a CUDA OOM during training; lower actor.mb_spec.max_tokens_per_mb.",
                     delay_s=server_delay)]
    with FakeOpenAI(replies) as server:
        direct, agent = [], []
        conv = Session(config=LLMConfig.resolve(base_url=server.base_url), env_roots=False, persist=False)
        conv.knowledge()
        for _ in range(rounds):
            t = time.perf_counter()
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            with httpx.stream("POST", server.base_url + "/chat/completions", json=body, timeout=30) as r:
                for line in r.iter_lines():
                    if '"content":"' in line.replace(" ", "") and '"content":""' not in line.replace(" ", ""):
                        break
            direct.append(time.perf_counter() - t)
            conv.reset()
            t = time.perf_counter()
            for event in conv.ask("why did my run die?"):
                if isinstance(event, TextDelta) and event.text:
                    agent.append(time.perf_counter() - t)
                    break
        d, a = statistics.median(direct), statistics.median(agent)
        print(f"first token ({rounds} rounds, scripted server with {server_delay * 1000:.0f} ms latency):")
        print(f"  server alone {d * 1000:.0f} ms, through the agent {a * 1000:.0f} ms, overhead {(a - d) * 1000:.0f} ms "
              f"(target < 300 ms), ratio {a / d:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of new sessions on the same server (>1: is its RSS bounded?)")
    parser.add_argument("--upload-mb", type=int, default=0, help="upload a generated log of this size (0: a small fixture)")
    parser.add_argument("--skip-first-token", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    if not args.skip_first_token:
        first_token()
    if not args.skip_load:
        load(args.sessions, args.questions, args.upload_mb, args.rounds)


if __name__ == "__main__":
    main()
