"""Web and chat front doors: load on ``rlmedic web`` and time to the first streamed token.

1. ``rlmedic web --offline`` in its own process; N concurrent gradio_client sessions, each
   uploading a log and asking Q questions. Prints errors, p50/p95 answer latency and the
   server's peak RSS.
2. Time from "enter" to the first streamed token through the agent (Conversation.ask)
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
    import psutil

    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20


def _upload(upload_mb: int) -> Path:
    """The file each session uploads: the small fixture log, or a generated training log of ``upload_mb`` MB."""
    if not upload_mb:
        return LOG
    sys.path.insert(0, str(REPO / "benchmarks"))
    from logscan import write_log  # the same synthetic AReaL log as the scan benchmark (an OOM at its end)

    path = Path(tempfile.mkdtemp(prefix="rlmedic-upload-")) / "train.log"
    write_log(path, upload_mb << 20)
    return path


def _own_copy(upload: Path, i: int) -> Path:
    """Session ``i``'s own log: the same run with one line of its own (each user uploads a different file)."""
    if upload == LOG:
        return LOG
    own = upload.parent / f"s{i}" / upload.name
    own.parent.mkdir(exist_ok=True)
    shutil.copyfile(upload, own)
    with open(own, "a") as fh:
        fh.write(f"[2025-11-22 23:59:59] session {i} log ends here\n")
    return own


def load(sessions: int, questions: int, upload_mb: int = 0) -> None:
    from gradio_client import Client, handle_file

    upload = _upload(upload_mb)

    port = _free_port()
    env = {**os.environ, "RLMEDIC_HOME": tempfile.mkdtemp(prefix="rlmedic-bench-"), "GRADIO_ANALYTICS_ENABLED": "False"}
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
        latencies: list[float] = []
        errors: list[str] = []
        peak = [_rss_mb(server.pid)]
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
                        latencies.append(time.monotonic() - started)
                except Exception as exc:  # noqa: BLE001
                    with lock:
                        errors.append(str(exc)[:120])

        def watch_rss(stop: threading.Event) -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _rss_mb(server.pid))
                stop.wait(0.5)

        stop = threading.Event()
        watcher = threading.Thread(target=watch_rss, args=(stop,), daemon=True)
        watcher.start()
        started = time.monotonic()
        threads = [threading.Thread(target=user, args=(i,)) for i in range(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        wall = time.monotonic() - started
        lat = sorted(latencies)
        p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else float("nan")
        size = f"{upload.stat().st_size / 2**20:.1f} MiB"
        print(f"web load: {sessions} sessions x {questions} questions (1 upload of {size} each, follow-ups without), "
              f"offline engine, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        print(f"  answers {len(lat)}, errors {len(errors)}, wall {wall:.1f} s, throughput {len(lat) / wall:.2f} answers/s")
        print(f"  latency p50 {statistics.median(lat):.2f} s, p95 {p95:.2f} s, max {lat[-1]:.2f} s" if lat else "  no answers")
        print(f"  server peak RSS {peak[0]:.0f} MB")
        for e in errors[:5]:
            print(f"  error: {e}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def first_token(rounds: int = 10) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    import httpx
    from fake_openai import FakeOpenAI, Reply

    from rlmedic.agent.conversation import Conversation
    from rlmedic.agent.events import TextDelta
    from rlmedic.agent.llm import LLMConfig

    server_delay = 0.2
    replies = [Reply(content="The run died of a CUDA OOM during training; lower actor.mb_spec.max_tokens_per_mb.",
                     delay_s=server_delay)]
    with FakeOpenAI(replies) as server:
        direct, agent = [], []
        conv = Conversation(config=LLMConfig.resolve(base_url=server.base_url), env_roots=False)
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
    parser.add_argument("--upload-mb", type=int, default=0, help="upload a generated log of this size (0: a small fixture)")
    parser.add_argument("--skip-first-token", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    if not args.skip_first_token:
        first_token()
    if not args.skip_load:
        load(args.sessions, args.questions, args.upload_mb)


if __name__ == "__main__":
    main()
