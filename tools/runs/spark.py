"""A curve as one line of block characters, with the finding's first step marked under it.

The terminal, Slack text and an answer's evidence all show this; it needs no library.
"""

from __future__ import annotations

import math
from typing import Any

BARS = "▁▂▃▄▅▆▇█"
WIDTH = 48


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if not math.isfinite(v):
        return str(v)
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.3g}"


def sparkline(values: Any, width: int = WIDTH) -> str:
    """``values`` squeezed into ``width`` cells (each the mean of its share); NaN/Inf shows as ``!``."""
    vals = [float(v) for v in values]
    if not vals:
        return ""
    n = len(vals)
    cells: list[float] = []
    for i in range(min(width, n)):
        lo, hi = i * n // min(width, n), (i + 1) * n // min(width, n)
        part = vals[lo:max(hi, lo + 1)]
        cells.append(math.nan if any(not math.isfinite(v) for v in part) else sum(part) / len(part))
    finite = [c for c in cells if math.isfinite(c)]
    if not finite:
        return "!" * len(cells)
    lo, hi = min(finite), max(finite)
    span = hi - lo
    out = []
    for c in cells:
        if not math.isfinite(c):
            out.append("!")
        elif span == 0:
            out.append(BARS[3])
        else:
            out.append(BARS[min(len(BARS) - 1, int((c - lo) / span * (len(BARS) - 1) + 0.5))])
    return "".join(out)


def marked(key: str, steps: Any, values: Any, step: int | None = None, width: int = WIDTH) -> str:
    """Two lines: ``key  ▁▂▅█▇▃▁  first -> last (steps a-b)`` and a ``^ step N`` marker under the cell of ``step``."""
    steps = [int(s) for s in steps]
    line = sparkline(values, width)
    if not line:
        return f"{key}: no points"
    vals = list(values)
    head = f"{key}  "
    text = f"{head}{line}  {_fmt(vals[0])} -> {_fmt(vals[-1])} (steps {steps[0]}-{steps[-1]})"
    if step is None or len(steps) < 2:
        return text
    n = len(steps)
    cells = len(line)
    i = next((j for j, s in enumerate(steps) if s >= step), n - 1)
    col = min(cells - 1, i * cells // n)
    return text + "\n" + " " * (len(head) + col) + f"^ step {step}"
