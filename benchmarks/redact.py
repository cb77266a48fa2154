"""Benchmark: how fast :func:`rlmedic.redact.redact` is on log text, and what redaction costs a diagnosis.

Run: ``python benchmarks/redact.py [--size-mb 10] [--compare-rev REV]``

It writes the synthetic training log of ``benchmarks/logscan.py`` (healthy AReaL/SGLang noise
and a failure at the end), plants a secret on one line in 500, then times

* ``redact`` line by line over every line (the worst case: the log tools only redact the
  lines they report) and on the whole text as one string;
* the same with the redaction of an older commit (``--compare-rev``, e.g. the commit
  before the table of secret kinds), loaded from ``git show REV:core/confine.py``;
* a full ``diagnose`` on the log (scan + metrics + findings, redacting what it reports).

It checks that every planted secret is gone from the redacted text.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from logscan import write_log  # noqa: E402

SECRET = "0123456789abcdef0123456789abcdef01234567"
PLANTS = (
    f"(TrainWorker pid=7) wandb: WANDB_API_KEY={SECRET}",
    f"(TrainWorker pid=7) Namespace(lr=1e-06, wandb_key='{SECRET}', seed=1)",
    f"(TrainWorker pid=7) wandb.login(key='{SECRET}')",
    f"(TrainWorker pid=7) {{\\\"WANDB_API_KEY\\\": \\\"{SECRET}\\\"}}",
)


def old_redact(rev: str) -> Callable[[str], str]:
    """The ``redact`` function of ``core/confine.py`` at ``rev`` (run in its own namespace)."""
    repo = Path(__file__).resolve().parent.parent
    source = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:core/confine.py"], check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("old_confine")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:core/confine.py", "exec"), module.__dict__)  # noqa: S102 - our own file at another commit
    return module.redact


def timed(fn: Callable[[], object], repeat: int = 3) -> tuple[float, object]:
    """Best CPU time of ``repeat`` runs (CPU, not wall clock: the figures hold on a shared machine)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=10)
    ap.add_argument("--compare-rev", default=None, help="a git revision whose core/confine.py redact() to compare with")
    args = ap.parse_args(argv)

    from rlmedic.redact import redact
    from rlmedic.confine import Confinement
    from rlmedic.tools.logs.diagnose import diagnose

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.log"
        write_log(path, args.size_mb << 20, failures=True)
        lines = path.read_text(encoding="utf-8").splitlines()
        for i in range(250, len(lines), 500):
            lines[i] = PLANTS[(i // 500) % len(PLANTS)]
        text = "\n".join(lines) + "\n"
        path.write_text(text, encoding="utf-8")
        mb = len(text.encode()) / 1e6
        planted = sum(1 for line in lines if SECRET in line)

        rows: list[tuple[str, Callable[[str], str]]] = [("table (this tree)", redact)]
        if args.compare_rev:
            rows.append((f"regex list ({args.compare_rev})", old_redact(args.compare_rev)))
        print(f"log: {mb:.1f} MB, {len(lines):,} lines, {planted} with a planted secret")
        for name, fn in rows:
            per_line_s, out_lines = timed(lambda fn=fn: [fn(line) for line in lines])
            whole_s, out_text = timed(lambda fn=fn: fn(text))
            left_lines = sum(SECRET in line for line in out_lines)
            left_text = out_text.count(SECRET)
            print(f"{name:28s} per line {per_line_s:6.3f} s {mb / per_line_s:7.0f} MB/s   "
                  f"whole text {whole_s:6.3f} s {mb / whole_s:7.0f} MB/s   secrets left: {left_lines} / {left_text}")
        diag_s, diag = timed(lambda: diagnose([path], confinement=Confinement.for_paths([tmp])), repeat=2)
        root = diag.root_finding.id if diag.root_finding else None
        print(f"diagnose (scan + report)    {diag_s:6.3f} s {mb / diag_s:7.0f} MB/s   root: {root}")
    crafted(redact)
    return 0


def crafted(redact: Callable[[str], str]) -> None:
    """Issue 31's quadratic inputs at 100 KB and 400 KB: the ratio is ~4 when redaction is linear (16 if quadratic)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_redact import CRAFTED  # the same inputs the tests time

    print("crafted input (issue 31)        100 KB     400 KB   ratio (linear ~4, quadratic ~16)")
    for name, make in CRAFTED.items():
        small, _ = timed(lambda make=make: redact(make(100_000)))
        big, _ = timed(lambda make=make: redact(make(400_000)))
        print(f"{name:30s} {small:8.3f} s {big:8.3f} s   {big / max(small, 1e-6):5.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
