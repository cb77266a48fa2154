"""Benchmark: the LLM path's bounds against a misbehaving model server (issue 31).

Run: ``python benchmarks/model_server.py [--calls 3000] [--arg-mb 8]``

A scripted OpenAI-compatible server on loopback (tests/fake_openai.py) answers the first
request of one question with a pathological reply, then with a short answer. Measured, each
in the same process after a warm-up answer:

- anchor: a reply with one tool call (the normal case);
- ``--calls`` tool calls in one reply (the model repeating itself thousands of times);
- one tool call whose argument is ``--arg-mb`` MB.

Printed: wall and CPU seconds of each answer (the scripted server runs in the same process,
so its own cost is included), peak RSS growth, the bytes sent back to the model after the
first reply, and the ratio to the anchor. Targets: both pathological answers within 10x the
anchor's wall time plus the server's own streaming time, and under 100 KB sent back.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--arg-mb", type=float, default=8.0)
    args = parser.parse_args()

    from fake_openai import FakeOpenAI, replies_from

    from rlmedic.agent.engine import answer_events
    from rlmedic.agent.llm import LLMConfig
    from rlmedic.tools.registry import ToolContext

    work = Path(tempfile.mkdtemp(prefix="rlmedic-bench-"))
    log = work / "train.log"
    shutil.copy(REPO / "tests" / "fixtures" / "logs" / "signatures" / "cuda-oom.log", log)
    normal = json.dumps({"paths": [str(log)]})

    def one(arguments: str, repeat: int) -> tuple[float, float, int, str]:
        rows = [{"calls": [{"name": "diagnose", "arguments": arguments}], "repeat_calls": repeat},
                {"content": "Root cause: CUDA OOM while training."}]
        with FakeOpenAI(replies_from(rows)) as server:
            wall, cpu = time.monotonic(), time.process_time()
            events = list(answer_events("why did my run die?", attachments=[log], ctx=ToolContext.for_roots([str(log)]),
                                        config=LLMConfig.resolve(base_url=server.base_url)))
            wall, cpu = time.monotonic() - wall, time.process_time() - cpu
            back = sum(len(json.dumps(r["messages"])) for r in server.requests[1:])
        return wall, cpu, back, events[-1].answer.engine

    one(normal, 1)  # warm-up: imports, the chat model, the knowledge base
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cases = [("anchor: 1 tool call", normal, 1),
             (f"{args.calls} tool calls in one reply", normal, args.calls),
             (f"one {args.arg_mb:g} MB argument", json.dumps({"paths": ["/x/" + "a" * int(args.arg_mb * 1e6)]}), 1)]
    anchor = None
    for label, arguments, repeat in cases:
        wall, cpu, back, engine = one(arguments, repeat)
        rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
        anchor = anchor or wall
        print(f"{label:32s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  peak RSS +{rss:6.0f} MB  "
              f"sent back {back / 1000:7.1f} KB  engine {engine:7s}  ratio {wall / anchor:5.1f}x")


if __name__ == "__main__":
    main()
