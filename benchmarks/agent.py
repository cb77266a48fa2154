"""Benchmark: the agent's own overhead, and the offline answer on a 10 MB log.

Run: ``python benchmarks/agent.py [--steps 10] [--size-mb 10]``

1. Loop overhead per tool step: a scripted OpenAI-compatible server on loopback that
   answers instantly (tests/fake_openai.py) drives ``--steps`` tool steps; the loop's time
   is the run's wall time minus the time spent inside the tools, divided by the steps
   (it includes the HTTP round trip to the local server). Target < 50 ms per step.
2. ``rlmedic ask --offline --attach LOG --json`` cold (a fresh process) on a 10 MB
   synthetic log with a failure at the end (benchmarks/logscan.py's generator). Target < 4 s.
3. The same answer warm, in a long-lived process (chat, web, Slack). Target < 1 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]


def loop_overhead(steps: int, log: Path) -> tuple[float, float]:
    from fake_openai import FakeOpenAI, Reply, tool

    from rlmedic.agent.engine import answer_events
    from rlmedic.agent.events import Final, ToolFinished
    from rlmedic.agent.llm import LLMConfig
    from rlmedic.agent.loop import Budgets
    from rlmedic.registry import ToolContext

    replies = [Reply(calls=[tool("excerpt", paths=[str(log)], max_lines=10 + i)]) for i in range(steps)]
    replies.append(Reply(content="Root cause: done."))
    budgets = Budgets(model_calls=steps + 2, tool_calls=steps + 1)
    per_step = []
    for _ in range(2):  # the first run pays imports and graph compilation
        with FakeOpenAI(replies) as server:
            ctx = ToolContext.for_roots([str(log)])
            started = time.perf_counter()
            events = list(answer_events("why?", attachments=[log], ctx=ctx, budgets=budgets,
                                        config=LLMConfig.resolve(base_url=server.base_url)))
            wall = time.perf_counter() - started
        tool_s = sum(e.seconds for e in events if isinstance(e, ToolFinished))
        assert isinstance(events[-1], Final) and events[-1].answer.engine == "llm", events[-1]
        assert sum(isinstance(e, ToolFinished) and e.ok for e in events) == steps
        per_step.append((wall - tool_s) / steps)
    return per_step[0], per_step[1]


def offline_cold(log: Path) -> float:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rlmedic", "ask", "why did my run die?", "--attach", str(log),
                          "--offline", "--json"], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if out.returncode != 0 or '"engine": "offline"' not in out.stdout:
        raise SystemExit(f"cold ask failed: {out.stderr[-500:]}")
    return seconds


def offline_warm(log: Path) -> float:
    from rlmedic.agent.engine import answer_events
    from rlmedic.agent.events import final_answer
    from rlmedic.registry import ToolContext

    times = []
    for _ in range(3):
        ctx = ToolContext.for_roots([str(log)])
        started = time.perf_counter()
        answer = final_answer(answer_events("why did my run die?", attachments=[log], ctx=ctx, offline=True))
        times.append(time.perf_counter() - started)
        assert answer.root_cause, "no root cause found"
    return min(times[1:])


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
        first, warm = loop_overhead(args.steps, small)
        cold = offline_cold(big)
        warm_offline = offline_warm(big)
    rows = [
        (f"loop overhead per tool step (warm, {args.steps} steps)", warm * 1000, "ms", 50),
        ("loop overhead per tool step (first run: imports, compile)", first * 1000, "ms", None),
        (f"ask --offline --attach, cold, {args.size_mb:g} MB log", cold, "s", 4),
        (f"offline answer, warm in-process, {args.size_mb:g} MB log", warm_offline, "s", 1),
    ]
    failed = False
    for name, value, unit, target in rows:
        verdict = "" if target is None else ("  ok" if value < target else f"  OVER target {target} {unit}")
        failed |= target is not None and value >= target
        print(f"{name:60s} {value:8.2f} {unit}{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
