"""``rlmedic serve-model``: start SGLang's own server for a local model, wait, stop.

SGLang lives in its own environment (its CUDA, torch and kernels cannot share
rlmedic's), so we run ``PY -m sglang.launch_server`` with that environment's Python.
The tool-call and reasoning parsers depend on the model family; :data:`FAMILIES` is the
table (first match wins, flags always override). No serving, routing or sharding of our
own: for several engines use SGLang's router (see README).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable

from rlmedic.errors import UserError


@dataclass(frozen=True)
class Family:
    pattern: str  # regex searched in the lower-cased model path or id
    tool_call_parser: str
    reasoning_parser: str = ""


#: Model family -> SGLang parsers (names as in SGLang's docs, late 2026). Order matters:
#: more specific patterns come first.
FAMILIES: tuple[Family, ...] = (
    Family(r"qwen3[-_.]?coder", "qwen3_coder"),
    Family(r"qwen3.*thinking", "qwen25", "qwen3-thinking"),
    Family(r"qwen3", "qwen25", "qwen3"),
    Family(r"qwq", "qwen25", "deepseek-r1"),
    Family(r"qwen2\.?5|qwen2", "qwen25"),
    Family(r"deepseek[-_.]?r1", "deepseekv3", "deepseek-r1"),
    Family(r"deepseek[-_.]?v3\.2", "deepseekv32", "deepseek-v3"),
    Family(r"deepseek[-_.]?v3\.1", "deepseekv31", "deepseek-v3"),
    Family(r"deepseek[-_.]?v3", "deepseekv3"),
    Family(r"glm[-_.]?4\.[5-9]", "glm45", "glm45"),
    Family(r"gpt[-_.]?oss", "gpt-oss", "gpt-oss"),
    Family(r"kimi[-_.]?k2", "kimi_k2"),
    Family(r"llama[-_.]?4", "pythonic"),
    Family(r"llama[-_.]?3", "llama3"),
    Family(r"mistral|mixtral|ministral|magistral", "mistral"),
)


def family_parsers(model: str) -> tuple[str, str]:
    """(tool-call parser, reasoning parser) for ``model``; ("", "") when unknown."""
    name = model.lower().rstrip("/")
    for fam in FAMILIES:
        if re.search(fam.pattern, name):
            return fam.tool_call_parser, fam.reasoning_parser
    return "", ""


@dataclass
class ServeOptions:
    model: str
    port: int = 30000
    host: str = "127.0.0.1"
    tp: int = 1
    mem_fraction_static: float | None = None
    context_length: int | None = None
    sglang_python: str = ""
    tool_call_parser: str = ""
    reasoning_parser: str = ""  # "none" turns off the family default


def build_command(opts: ServeOptions) -> list[str]:
    """The exact ``sglang.launch_server`` command line for ``opts``."""
    if not opts.model:
        raise UserError("--model is required (a local path or a Hugging Face id)")
    tool_parser, reasoning = family_parsers(opts.model)
    tool_parser = opts.tool_call_parser or tool_parser
    reasoning = opts.reasoning_parser or reasoning
    if not tool_parser:
        raise UserError(
            f"{opts.model}: unknown model family, so no tool-call parser; pass --tool-call-parser "
            "(e.g. qwen25, llama3, mistral)"
        )
    python = sglang_python(opts)
    cmd = [python, "-m", "sglang.launch_server", "--model-path", opts.model,
           "--host", opts.host, "--port", str(opts.port), "--tp", str(opts.tp),
           "--tool-call-parser", tool_parser]
    if reasoning and reasoning != "none":
        cmd += ["--reasoning-parser", reasoning]
    if opts.mem_fraction_static is not None:
        cmd += ["--mem-fraction-static", str(opts.mem_fraction_static)]
    if opts.context_length is not None:
        cmd += ["--context-length", str(opts.context_length)]
    return cmd


def sglang_python(opts: ServeOptions) -> str:
    """The interpreter that runs SGLang: ``--sglang-python``, else ``$RLMEDIC_SGLANG_PYTHON``, else rlmedic's own."""
    return opts.sglang_python or os.environ.get("RLMEDIC_SGLANG_PYTHON") or sys.executable


#: How to point serve-model at SGLang's own venv (SGLang pins its own torch, so it does not
#: install beside rlmedic's CPU build).
SGLANG_PYTHON_HINT = ("install SGLang in its own venv and pass --sglang-python /path/to/that/venv/bin/python "
                      "(or set RLMEDIC_SGLANG_PYTHON)")


def default_python_note(opts: ServeOptions) -> str | None:
    """A line for the user when SGLang would run under rlmedic's own Python (nothing chose another)."""
    if opts.sglang_python or os.environ.get("RLMEDIC_SGLANG_PYTHON"):
        return None
    return f"no --sglang-python given: SGLang would run under rlmedic's own Python ({sys.executable}); {SGLANG_PYTHON_HINT}"


def sglang_missing(python: str, timeout_s: float = 60.0) -> str | None:
    """Why ``python`` cannot run SGLang (no such interpreter, or no ``sglang`` module); None when it can."""
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sglang') else 3)"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, timeout=timeout_s)
    except OSError as exc:
        return f"cannot run {python}: {exc.strerror or exc}"
    except subprocess.TimeoutExpired:
        return None  # a slow interpreter is not a missing module: let the server's own start say more
    if done.returncode == 3:
        return f"{python} has no SGLang (the sglang module is not installed there)"
    return None


def base_url(opts: ServeOptions) -> str:
    host = "127.0.0.1" if opts.host in ("0.0.0.0", "::", "") else opts.host
    return f"http://{host}:{opts.port}/v1"


def health_status(url: str, timeout_s: float = 2.0) -> int | None:
    """HTTP status of ``GET url`` (None when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (our own server)
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, TimeoutError):
        return None


def wait_healthy(process: subprocess.Popen, health_url: str, *, timeout_s: float = 1800.0,
                 interval_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
    """Poll ``/health`` until 200 (it answers 503 while loading); fail if the process dies."""
    deadline = clock() + timeout_s
    while True:
        code = process.poll()
        if code is not None:
            raise UserError(f"the SGLang server exited with code {code} before it was ready (see its output above)")
        if health_status(health_url) == 200:
            return
        if clock() >= deadline:
            raise UserError(f"the SGLang server was not ready after {timeout_s:.0f} s")
        time.sleep(interval_s)


def stop(process: subprocess.Popen, grace_s: float = 20.0) -> int:
    """SIGINT then SIGTERM then SIGKILL to the server's process group; its exit code."""
    if process.poll() is not None:
        return process.returncode
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            return process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
    return process.wait()


def start(cmd: list[str]) -> subprocess.Popen:
    """Start ``cmd`` in its own process group (so a stop reaches its workers too)."""
    try:
        return subprocess.Popen(cmd, start_new_session=True)
    except OSError as exc:
        raise UserError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None


def serve(opts: ServeOptions, *, echo: Callable[[str], None] = print, timeout_s: float = 1800.0,
          interval_s: float = 2.0) -> int:
    """Start, wait for health, print the base URL, run until the server exits or Ctrl-C.

    An interpreter without SGLang is refused before anything starts, with the way to name the
    right one (``--sglang-python``); a server that dies while loading names it too.
    """
    cmd = build_command(opts)
    missing = sglang_missing(cmd[0])
    if missing:
        raise UserError(f"{missing}: {SGLANG_PYTHON_HINT}")
    echo("starting: " + " ".join(cmd))
    process = start(cmd)
    health_url = base_url(opts).removesuffix("/v1") + "/health"
    try:
        try:
            wait_healthy(process, health_url, timeout_s=timeout_s, interval_s=interval_s)
        except UserError as exc:
            if process.poll() is not None:  # it died while loading
                raise UserError(f"{exc}; is {cmd[0]} SGLang's own venv? (--sglang-python)") from None
            raise
        echo(f"ready: {base_url(opts)}  (export RLMEDIC_BASE_URL={base_url(opts)})")
        return process.wait()
    except KeyboardInterrupt:
        echo("stopping the SGLang server...")
        return stop(process)
    except BaseException:
        stop(process)
        raise
