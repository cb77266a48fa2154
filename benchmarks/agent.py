"""Benchmark: the agent's own overhead, and the offline answer on a 10 MB log.

Run: ``python benchmarks/agent.py [--steps 10] [--size-mb 10]``

1. Loop overhead per tool step: a scripted OpenAI-compatible server on loopback that
   answers instantly (tests/fake_openai.py) drives tool steps whose tools return at once;
   the per-step time is the slope between runs of N and 2N steps (fixed costs cancel);
   it includes the HTTP round trip and SSE parsing. Target < 50 ms per step.
2. ``rlmedic ask --offline --attach LOG --json`` cold (a fresh process) on a 10 MB
   synthetic log with a failure at the end (benchmarks/logscan.py's generator). Target < 4 s.
3. The same answer warm, in a long-lived process (chat, web, Slack). Target < 1 s.
4. Cold start of the LLM path: a fresh ``rlmedic ask --base-url ... --attach LOG`` process
   against the scripted server: wall and CPU time of that process when its first chat
   request arrives, and wall time to the first answer byte on its stdout. Anchors in the
   same run: ``python -c pass`` and ``rlmedic --help`` (interpreter and CLI start-up).
   Target: first request < 1.5 s CPU.
"""

from __future__ import annotations

# Child processes write and reuse bytecode (.pyc) as on any installed copy; a shell that sets
# PYTHONDONTWRITEBYTECODE (some containers do) would make every cold run recompile rlmedic's modules.
import os as _os

_os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]


class _InstantTools:
    """The registry's tools with an instant ``call``: only the loop's own time is left."""

    def __init__(self) -> None:
        from rlmedic.tools.registry import REGISTRY

        self.registry = REGISTRY

    def tools(self) -> list:
        return self.registry.tools()

    def call(self, name: str, args: dict, ctx: object) -> object:
        from rlmedic.tools.registry import ToolResult

        return ToolResult(name, True, data={"lines": 3}, text="3 relevant lines: ...", arguments=args)


def _llm_run(steps: int, log: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one LLM run with ``steps`` tool steps."""
    from fake_openai import FakeOpenAI, Reply, tool

    from rlmedic.agent.engine import answer_events
    from rlmedic.agent.events import Final, ToolFinished
    from rlmedic.agent.llm import LLMConfig
    from rlmedic.agent.loop import Budgets
    from rlmedic.tools.registry import ToolContext

    replies = [Reply(calls=[tool("excerpt", paths=[str(log)], max_lines=10 + i)]) for i in range(steps)]
    replies.append(Reply(content="Root cause: done."))
    budgets = Budgets(model_calls=steps + 2, tool_calls=steps + 1)
    with FakeOpenAI(replies) as server:
        ctx = ToolContext.for_roots([str(log)])
        started, cpu = time.perf_counter(), time.process_time()
        events = list(answer_events("why?", attachments=[log], ctx=ctx, budgets=budgets, registry=_InstantTools(),
                                    config=LLMConfig.resolve(base_url=server.base_url)))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert isinstance(events[-1], Final) and events[-1].answer.engine == "llm", events[-1]
    assert sum(isinstance(e, ToolFinished) and e.ok for e in events) == steps
    return wall, cpu


def loop_overhead(steps: int, log: Path) -> tuple[float, float, float]:
    """(wall per step, CPU per step, wall of the ``steps``-step question) with instant tools, after a warm-up.

    Per step = the slope between runs of ``steps`` and ``2 * steps`` tool steps (best of
    3 each), so the fixed cost (probe, agent build, final answer) cancels out. The CPU
    figure includes the in-process scripted server, so it is an upper bound.
    """
    _llm_run(2, log)  # imports, graph compilation, first connections
    short = min((_llm_run(steps, log) for _ in range(3)), key=lambda r: r[0])
    long = min((_llm_run(2 * steps, log) for _ in range(3)), key=lambda r: r[0])
    return (long[0] - short[0]) / steps, (long[1] - short[1]) / steps, short[0]


def offline_cold(log: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of a fresh ``rlmedic ask --offline`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rlmedic", "ask", "why did my run die?", "--attach", str(log),
                          "--offline", "--json"], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0 or '"engine": "offline"' not in out.stdout:
        raise SystemExit(f"cold ask failed: {out.stderr[-500:]}")
    return seconds, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def offline_warm(log: Path) -> float:
    from rlmedic.agent.engine import answer_events
    from rlmedic.agent.events import final_answer
    from rlmedic.tools.registry import ToolContext

    times = []
    for _ in range(3):
        ctx = ToolContext.for_roots([str(log)])
        started = time.perf_counter()
        answer = final_answer(answer_events("why did my run die?", attachments=[log], ctx=ctx, offline=True))
        times.append(time.perf_counter() - started)
        assert answer.root_cause, "no root cause found"
    return min(times[1:])


def _cold_cpu(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU seconds) of one fresh process running ``argv`` to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - started, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def llm_cold(log: Path) -> dict[str, float]:
    """Cold start of the LLM path: CPU/wall at the first chat request, wall at the first answer byte."""
    import psutil
    from fake_openai import FakeOpenAI, Reply, tool

    seen: dict[str, float] = {}
    replies = [Reply(calls=[tool("diagnose", paths=[str(log)])]), Reply(content="Root cause: CUDA OOM in training.")]
    with FakeOpenAI(replies) as server:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rlmedic", "ask", "why did my run die?", "--attach", str(log),
                                 "--base-url", server.base_url], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        child = psutil.Process(proc.pid)

        def first_request(body: dict) -> None:
            if "request_wall" not in seen:
                times = child.cpu_times()
                seen["request_wall"] = time.perf_counter() - started
                seen["request_cpu"] = times.user + times.system

        server.on_chat = first_request
        assert proc.stdout is not None
        if proc.stdout.read(1):
            seen["first_byte_wall"] = time.perf_counter() - started
        proc.stdout.read()
        proc.wait(timeout=120)
    if proc.returncode != 0 or "request_cpu" not in seen:
        raise SystemExit("cold LLM ask failed")
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--size-mb", type=float, default=10.0)
    args = parser.parse_args(argv)
    from logscan import write_log

    with tempfile.TemporaryDirectory(prefix="rlmedic-bench-") as tmp:
        os.environ.setdefault("RLMEDIC_HOME", str(Path(tmp) / "home"))
        small = Path(tmp) / "small.log"
        write_log(small, 200_000)
        big = Path(tmp) / "train.log"
        write_log(big, int(args.size_mb * 1024 * 1024))
        per_step, per_step_cpu, question = loop_overhead(args.steps, small)
        cold, cold_cpu = offline_cold(big)
        warm_offline = offline_warm(big)
        _, pass_cpu = _cold_cpu([sys.executable, "-c", "pass"])
        _, help_cpu = _cold_cpu([sys.executable, "-m", "rlmedic", "--help"])
        llm = llm_cold(small)
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall times stretch under load)")
    rows = [
        ("loop overhead per tool step (wall, instant tools and server)", per_step * 1000, "ms", 50),
        ("  (CPU time per step, scripted server included)", per_step_cpu * 1000, "ms", None),
        (f"  (one question of {args.steps} instant steps, wall)", question * 1000, "ms", None),
        (f"ask --offline --attach, cold, {args.size_mb:g} MB log", cold, "s", 4),
        (f"  (CPU time of that process)", cold_cpu, "s", None),
        (f"offline answer, warm in-process, {args.size_mb:g} MB log", warm_offline, "s", 1),
        ("LLM ask, cold: CPU of the process at its first model request", llm["request_cpu"], "s", 1.5),
        ("  (wall time to that first request)", llm["request_wall"], "s", None),
        ("  (wall time to the first answer byte on stdout)", llm.get("first_byte_wall", float("nan")), "s", None),
        ("  anchor: python -c pass, CPU", pass_cpu, "s", None),
        ("  anchor: rlmedic --help, CPU", help_cpu, "s", None),
        ("  ratio: first-request CPU / rlmedic --help CPU", llm["request_cpu"] / max(help_cpu, 1e-6), "x", None),
    ]
    failed = False
    for name, value, unit, target in rows:
        verdict = "" if target is None else ("  ok" if value < target else f"  OVER target {target} {unit}")
        failed |= target is not None and value >= target
        print(f"{name:60s} {value:8.2f} {unit}{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
