"""``rlmedic web``: the chat as a Gradio page, with the diagnosis, the fix, the GPUs and the sources beside it.

Thin: every answer comes from :class:`~rlmedic.agent.session.Session` (the
agent or the offline engine) as events; this module turns them into chat messages (each
tool step a collapsible message, pending then done with its duration) and side panels.

Each browser session (Gradio's ``session_hash``) gets its own conversation and its own
upload folder, which is the only root its tools may read; the folder is size-capped and
deleted when the page closes or the session sits idle past ``session_ttl_s``. The server
binds to loopback unless told otherwise, never makes a share link, and sends no analytics.
"""

from __future__ import annotations

import os
import stat
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError

CHAT_API = "chat"
#: Answers the server works on at once (more wait in Gradio's queue); each session answers one at a time.
WEB_CONCURRENCY = 16
GPU_API = "gpu"
OFFLINE_NOTE = ("**Offline engine:** answers come from rlmedic's tools, playbook cards and docs (no LLM). "
                "Start a model server (`rlmedic serve-model`) for the agent.")


@dataclass
class WebSettings:
    offline: bool = False
    config: Any = None  # LLMConfig or None
    index_dir: Path | None = None
    max_upload_mb: int = 200
    session_ttl_s: float = 3600
    uploads_root: Path | None = None  # default: a private temp folder per server
    ray_address: str | None = None  # a Ray cluster whose job logs each question re-reads (tools/cluster)
    ray_job: str | None = None


@dataclass
class Session:
    """One browser session: its folder (the only readable root) and its conversation."""

    folder: Path
    conversation: Any
    last_seen: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def used_bytes(self) -> int:
        """Bytes the session's uploads take (an explicit-stack walk: an upload of deep folders is no crash)."""
        from rlmedic.confine import walk_tree

        total = 0
        for root, _dirs, files in walk_tree(self.folder):
            for name in files:
                try:
                    st = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                total += st.st_size if stat.S_ISREG(st.st_mode) else 0
        return total


class Sessions:
    """Per-browser-session state, kept server side and swept when idle."""

    def __init__(self, settings: WebSettings) -> None:
        self.settings = settings
        root = settings.uploads_root or Path(tempfile.mkdtemp(prefix="rlmedic-web-"))
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        self.root = root
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._kb: Any = None

    def knowledge(self) -> Any:
        """One knowledge base shared by all sessions (the embedding model loads once)."""
        with self._lock:
            if self._kb is None:
                from rlmedic.knowledge.index import KnowledgeBase

                self._kb = KnowledgeBase(self.settings.index_dir)
            return self._kb

    def get(self, key: str) -> Session:
        from rlmedic.agent.session import Session as Thread

        self.sweep()
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                folder = self.root / f"s-{len(self._sessions)}-{os.urandom(6).hex()}"
                folder.mkdir(mode=0o700)
                conv = Thread(f"web-{folder.name}", offline=self.settings.offline,
                              config=self.settings.config, index_dir=self.settings.index_dir,
                              roots=[folder], env_roots=False, kb=None)
                session = Session(folder, conv)
                self._sessions[key] = session
            session.last_seen = time.monotonic()
        session.conversation._kb = self.knowledge()
        return session

    def close(self, key: str) -> None:
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is not None:
            shutil.rmtree(session.folder, ignore_errors=True)
            session.conversation.store.drop(session.conversation.thread_id)

    def sweep(self) -> None:
        cutoff = time.monotonic() - self.settings.session_ttl_s
        with self._lock:
            stale = [k for k, s in self._sessions.items() if s.last_seen < cutoff]
        for key in stale:
            self.close(key)

    def close_all(self) -> None:
        for key in list(self._sessions):
            self.close(key)
        shutil.rmtree(self.root, ignore_errors=True)

    def __len__(self) -> int:
        return len(self._sessions)


def save_uploads(session: Session, files: list[Any], cap_bytes: int) -> list[Path]:
    """Copy uploaded files into the session folder (the tools' only root); over the cap is refused."""
    saved = []
    used = session.used_bytes()
    for item in files or []:
        src = Path(item if isinstance(item, str) else (item.get("path") if isinstance(item, dict) else item.name))
        with _taking(src) as source:
            size = source.stat().st_size
            if size > cap_bytes:
                raise UserError(f"{src.name}: {size / 1e6:.1f} MB is over the upload cap of {cap_bytes / 1e6:.0f} MB")
            if used + size > 4 * cap_bytes:
                raise UserError(f"this session's uploads would pass {4 * cap_bytes / 1e6:.0f} MB: start a new session")
            name = src.name.replace(os.sep, "_") or "upload"
            dst = session.folder / name
            n = 1
            while dst.exists():
                dst = session.folder / f"{dst.stem}-{n}{dst.suffix}"
                n += 1
            shutil.copyfile(source, dst)
            _drop_gradio_copy(src, dst)
        used += size
        saved.append(dst)
    return saved


#: Gradio keeps an upload in a folder named by its content's hash, so two sessions that upload the
#: same file at once get the same path. Taking one is done under that path's own lock (a big copy
#: holds up only the sessions sending the same file); a path already dropped is read from the
#: session copy it was moved to (same bytes), kept here while that copy exists.
_TAKE_LOCK = threading.Lock()  # guards the two tables below, held only briefly
_PATH_LOCKS: dict[Path, list[Any]] = {}  # path -> [its lock, how many callers use it]
_MOVED: dict[Path, Path] = {}
_MOVED_MAX = 256


class _taking:
    """``with _taking(src) as source``: the file to copy an upload from, the other sessions' drops held off."""

    def __init__(self, src: Path) -> None:
        self.src = src
        self.key = _resolved(src)

    def __enter__(self) -> Path:
        with _TAKE_LOCK:
            entry = _PATH_LOCKS.setdefault(self.key, [threading.Lock(), 0])
            entry[1] += 1
        entry[0].acquire()
        try:
            if self.src.exists():
                return self.src
            with _TAKE_LOCK:
                moved = _MOVED.get(self.key)
            if moved is not None and moved.is_file():
                return moved  # another session took Gradio's copy first: the bytes are the same
            raise UserError(f"{self.src.name}: the upload is gone from the server: upload it again")
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        with _TAKE_LOCK:
            entry = _PATH_LOCKS[self.key]
            entry[0].release()
            entry[1] -= 1
            if entry[1] == 0:
                del _PATH_LOCKS[self.key]


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _drop_gradio_copy(src: Path, moved_to: Path | None = None) -> None:
    """Delete Gradio's own copy of an upload (in its cache folder) once the session has its copy:
    an uploaded log must live in one place, the session folder that is deleted with the session.
    Called under the path's lock (:class:`_taking`); ``moved_to`` (the session's copy) serves a
    session that sent the same file at the same time and comes second."""
    cache = os.environ.get("GRADIO_TEMP_DIR")
    if not cache:
        return
    try:
        resolved, root = src.resolve(), Path(cache).resolve()
        if resolved.is_relative_to(root) and resolved != root:
            resolved.unlink(missing_ok=True)
            if moved_to is not None:
                with _TAKE_LOCK:
                    for gone in [k for k, v in _MOVED.items() if not v.is_file()]:
                        del _MOVED[gone]
                    if len(_MOVED) >= _MOVED_MAX:
                        del _MOVED[next(iter(_MOVED))]
                    _MOVED[resolved] = moved_to
            if resolved.parent != root:
                resolved.parent.rmdir()  # Gradio keeps each upload in a folder of its own
    except OSError:
        pass  # not empty or already gone: the cache goes with the server's folder at shutdown


# ---------------------------------------------------------------------- panels


def gpu_frame(data: dict[str, Any]) -> Any:
    """Memory per GPU, split by holder (each process, other, free), for the bar chart."""
    import pandas as pd

    rows = []
    for g in data.get("gpus") or []:
        gpu = f"GPU {g.get('index')}"
        used_by_procs = 0.0
        for p in g.get("processes") or []:
            gib = (p.get("used_gpu_memory") or 0) / 2**30
            used_by_procs += gib
            label = f"pid {p.get('pid')} {p.get('role', '')}" + (" (leftover)" if p.get("leftover") else "")
            rows.append({"gpu": gpu, "GiB": round(gib, 2), "holder": label})
        used = (g.get("memory_used") or 0) / 2**30
        if used - used_by_procs > 0.05:
            rows.append({"gpu": gpu, "GiB": round(used - used_by_procs, 2), "holder": "other / not visible"})
        rows.append({"gpu": gpu, "GiB": round((g.get("memory_free") or 0) / 2**30, 2), "holder": "free"})
    return pd.DataFrame(rows, columns=["gpu", "GiB", "holder"])


def gpu_markdown(data: dict[str, Any]) -> str:
    if not data.get("gpus"):
        return f"No GPU visible ({data.get('source', '')}): {data.get('message') or data.get('status') or ''}"
    lines = [f"**{data.get('hostname') or 'host'}** ({data.get('source')}), driver {data.get('driver_version') or '?'}"]
    for a in data.get("advice") or []:
        text = a.get("message") or a.get("summary") or ""
        lines.append(f"- **{a.get('severity')}**: {text}")
    return "\n".join(lines)


def sources_markdown(answer: Any) -> str:
    from rlmedic.ui.render import citation_link

    if not answer.citations:
        return "_No sources for this answer._"
    return "\n".join(f"{i}. {citation_link(c)}" for i, c in enumerate(answer.citations, 1))


# ---------------------------------------------------------------------- the app


def build_app(settings: WebSettings) -> tuple[Any, Sessions]:
    """The Gradio Blocks app and its session store (not launched)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from rlmedic.memory import collector_paused

    with collector_paused():
        import gradio as gr

    from rlmedic.agent.events import Failed, Final, Notice, TextDelta, ToolFinished, ToolStarted
    from rlmedic.ui.render import answer_markdown, model_markdown, root_markdown, step_args, step_result

    from rlmedic.redact import redact

    sessions = Sessions(settings)
    cap = settings.max_upload_mb * 1024 * 1024
    # Gradio's upload cache inside the server's private folder: deleted with it on shutdown
    # (also on SIGTERM), never left in /tmp/gradio with someone's logs in it
    cache = sessions.root / "gradio"
    cache.mkdir(mode=0o700, exist_ok=True)
    os.environ["GRADIO_TEMP_DIR"] = str(cache)

    def shown(history: list[Any]) -> list[Any]:
        """The chat as sent to the browser: every message redacted (a secret typed into the question
        must not come back in the history, nor one the model repeats)."""
        out = []
        for m in history:
            content = getattr(m, "content", None) if not isinstance(m, dict) else m.get("content")
            if isinstance(content, str) and redact(content) != content:
                if isinstance(m, dict):
                    m = {**m, "content": redact(content)}
                else:
                    m = gr.ChatMessage(role=m.role, content=redact(content), metadata=m.metadata)
            out.append(m)
        return out

    def respond(message: dict[str, Any] | str, history: list[Any], request: gr.Request):  # noqa: ANN202
        session = sessions.get(request.session_hash or "anonymous")
        text = message if isinstance(message, str) else (message or {}).get("text", "")
        files = [] if isinstance(message, str) else (message or {}).get("files", [])
        history = list(history or [])
        panels = {"diag": gr.update(), "diff": gr.update(), "download": gr.update(), "plot": gr.update(),
                  "gpu": gr.update(), "sources": gr.update(), "note": gr.update(), "curve": gr.update()}

        prefix = f"{session.folder}/"

        def local(text: Any) -> Any:  # paths inside the session folder are shown by their names
            return text.replace(prefix, "") if isinstance(text, str) else text

        def out(box: Any = None):  # noqa: ANN202
            return (box if box is not None else gr.update(), shown(history), local(panels["diag"]), panels["diff"],
                    panels["download"], panels["plot"], panels["gpu"], local(panels["sources"]), panels["note"],
                    panels["curve"])

        with session.lock:
            try:
                saved = save_uploads(session, files, cap)
            except UserError as exc:
                history.append(gr.ChatMessage(role="assistant", content=f"Upload refused: {exc}"))
                yield out({"text": text, "files": []})
                return
            if saved:
                session.conversation.attach(*saved)
            if settings.ray_address and (text or "").strip():  # the job's logs on every node, in the session's ray/
                from rlmedic.tools.cluster.frontdoor import sync_folder

                try:
                    session.conversation.attach(sync_folder(session.folder / "ray", settings.ray_address, job=settings.ray_job).folder)
                except UserError as exc:
                    panels["note"] = gr.update(value=f"Ray cluster not read: {exc}", visible=True)
            names = ", ".join(p.name for p in saved)
            user_text = text.strip() or ("Why did my run die?" if saved else "")
            if not user_text:
                yield out()
                return
            history.append(gr.ChatMessage(role="user", content=redact(user_text) + (f"\n\n📎 {names}" if names else "")))
            yield out({"text": "", "files": []})
            steps: dict[str, int] = {}
            started: dict[str, float] = {}
            streamed = -1
            try:
                for event in session.conversation.ask(user_text):
                    if isinstance(event, ToolStarted):
                        started[event.id] = time.monotonic()
                        history.append(gr.ChatMessage(role="assistant", content=step_args(event.args) or "…",
                                                      metadata={"title": f"🔧 {event.name}", "status": "pending",
                                                                "id": event.id}))
                        steps[event.id] = len(history) - 1
                    elif isinstance(event, ToolFinished):
                        i = steps.get(event.id)
                        took = time.monotonic() - started.get(event.id, time.monotonic())
                        line = step_result(event.name, event.ok, event.data, event.error)
                        if i is not None:
                            old = history[i]
                            history[i] = gr.ChatMessage(role="assistant", content=f"{old.content}\n\n{line}",
                                                        metadata={"title": f"🔧 {event.name}", "status": "done",
                                                                  "duration": round(took, 2), "id": event.id})
                        if event.ok and event.name == "gpu_status" and isinstance(event.data, dict):
                            panels["plot"] = gpu_frame(event.data)
                            panels["gpu"] = gpu_markdown(event.data)
                    elif isinstance(event, Notice):  # notices can quote the model or its server
                        history.append(gr.ChatMessage(role="assistant", content=f"ℹ️ {model_markdown(event.text)}"))
                        if event.text.startswith("offline"):
                            panels["note"] = gr.update(value=OFFLINE_NOTE + f" ({model_markdown(event.text)})", visible=True)
                    elif isinstance(event, TextDelta):
                        if streamed < 0:
                            history.append(gr.ChatMessage(role="assistant", content=""))
                            streamed = len(history) - 1
                        history[streamed] = gr.ChatMessage(role="assistant",
                                                           content=history[streamed].content + model_markdown(event.text))
                    elif isinstance(event, Failed):
                        history.append(gr.ChatMessage(role="assistant", content=f"⚠️ {event.error}"))
                    elif isinstance(event, Final):
                        answer = event.answer
                        content = local(answer_markdown(answer))
                        if streamed >= 0:
                            history[streamed] = gr.ChatMessage(role="assistant", content=content)
                        else:
                            history.append(gr.ChatMessage(role="assistant", content=content))
                        panels["diag"] = root_markdown(answer)
                        chart = curve_png(session.folder, answer)
                        panels["curve"] = gr.update(value=chart[0], label=chart[1], visible=True) if chart else \
                            gr.update(value=None, visible=False)
                        panels["sources"] = sources_markdown(answer)
                        if answer.config_diff:
                            panels["diff"] = answer.config_diff
                            panels["download"] = _download(session, answer.config_diff)
                    yield out()
            except UserError as exc:
                history.append(gr.ChatMessage(role="assistant", content=f"⚠️ {exc}"))
                yield out()

    def read_gpus(request: gr.Request):  # noqa: ANN202
        from rlmedic.tools.registry import REGISTRY

        session = sessions.get(request.session_hash or "anonymous")
        result = REGISTRY.call("gpu_status", {}, session.conversation.context())
        if not result.ok:
            return gr.update(), f"⚠️ {result.error}"
        return gpu_frame(result.data), gpu_markdown(result.data)

    def closed(request: gr.Request) -> None:
        sessions.close(request.session_hash or "anonymous")

    # gradio injects the request by the annotation's class; this module's annotations are strings
    for fn in (respond, read_gpus, closed):
        fn.__annotations__["request"] = gr.Request

    # delete_cache: Gradio's copies of outputs (the corrected-config download) older than a session go too
    ttl = max(60, int(settings.session_ttl_s))
    with gr.Blocks(title="rlmedic", delete_cache=(ttl, ttl)) as demo:
        gr.Markdown("## rlmedic: why did my RL run die?\nDrop a training log (`.gz` is fine), a config, a launch "
                    "script or a GPU snapshot, and ask.")
        note = gr.Markdown(OFFLINE_NOTE, visible=settings.offline)
        with gr.Row():
            with gr.Column(scale=3):
                chatbot = gr.Chatbot(label="rlmedic", height=620, buttons=["copy"], feedback_options=None)
                box = gr.MultimodalTextbox(file_count="multiple", sources=["upload"], placeholder=(
                    "Ask about a failed run, or drop logs/configs here"), show_label=False)
            with gr.Column(scale=2):
                with gr.Tab("Diagnosis"):
                    diag = gr.Markdown("_The root cause shows here._")
                    curve = gr.Image(label="curves behind the finding", type="filepath", visible=False,
                                     interactive=False)
                with gr.Tab("Config fix"):
                    diff = gr.Code(language=None, label="diff", interactive=False)
                    download = gr.File(label="corrected config (diff)", interactive=False)
                with gr.Tab("GPUs"):
                    plot = gr.BarPlot(x="gpu", y="GiB", color="holder", label="memory per GPU")
                    gpu_md = gr.Markdown("_Upload a snapshot (`rlmedic gpu --save gpu.json`) or read this machine._")
                    gpu_btn = gr.Button("Read this machine's GPUs")
                with gr.Tab("Sources"):
                    sources = gr.Markdown("_Cited sources show here._")
        box.submit(respond, [box, chatbot], [box, chatbot, diag, diff, download, plot, gpu_md, sources, note, curve],
                   api_name=CHAT_API)
        gpu_btn.click(read_gpus, None, [plot, gpu_md], api_name=GPU_API)
        demo.unload(closed)
    return demo, sessions


def curve_png(folder: Path, answer: Any) -> tuple[str, str] | None:
    """The curves behind the answer's finding (a run folder's diagnosis) as a PNG in the session's
    folder, the first step marked, and its caption; None when the answer has no curves."""
    from rlmedic.ui.slack_render import answer_chart

    chart = answer_chart(answer)
    if chart is None:
        return None
    path = folder / "curves.png"
    path.write_bytes(chart[0])
    return str(path), chart[1]


def _download(session: Session, diff: str) -> str:
    path = session.folder / "corrected-config.diff"
    path.write_text(diff, encoding="utf-8")
    return str(path)


def launch(settings: WebSettings, *, host: str = "127.0.0.1", port: int = 7860, auth: tuple[str, str] | None = None,
           block: bool = True) -> tuple[Any, Sessions]:
    """Start the server (loopback by default, no share link); ``block=False`` returns at once (tests).

    Blocking, it waits for Ctrl-C or SIGTERM itself (not in Gradio's loop, whose shutdown can wait
    on open connections): the upload folders (sessions and Gradio's cache) are deleted first,
    then the server is closed with a few seconds' grace.
    """
    import signal
    import sys

    from rlmedic.knowledge.known.match import use_processes
    from rlmedic.memory import few_malloc_arenas

    few_malloc_arenas()
    demo, sessions = build_app(settings)
    # the known-issue regexes over a new big upload run in worker processes: in the server's own
    # process they hold the GIL for seconds and its event loop (the other sessions' uploads) starves
    use_processes(max(1, min(4, os.cpu_count() or 1)))
    # answers mostly wait (on those workers, on a model server): a slow one must not hold the queue
    demo.queue(default_concurrency_limit=WEB_CONCURRENCY)
    stop = threading.Event()
    previous: dict[int, Any] = {}
    if block:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda _n, _f: stop.set())
    try:
        # quiet: Gradio's banner ends with a hint to set share=True, which rlmedic never does
        demo.launch(server_name=host, server_port=port, auth=auth, share=False, prevent_thread_lock=True,
                    max_file_size=f"{settings.max_upload_mb}mb", allowed_paths=[str(sessions.root)],
                    ssr_mode=False, quiet=True, footer_links=["api"])
        if not block:
            return demo, sessions
        shown_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        print(f"rlmedic web: http://{shown_host}:{demo.server_port}/ (Ctrl-C stops; uploads are deleted then)",
              file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
        print("rlmedic web: stopping", file=sys.stderr, flush=True)
    finally:
        if block:
            sessions.close_all()
            closer = threading.Thread(target=demo.close, daemon=True, name="rlmedic-web-close")
            closer.start()
            closer.join(timeout=3.0)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            use_processes(0)
    return demo, sessions
