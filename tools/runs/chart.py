"""The curves behind a finding as a PNG, the first step marked: for Slack and the web app.

No plotting library is a dependency (matplotlib is not installed with rlmedic), so this draws
with numpy into a pixel buffer and writes the PNG with zlib: one panel per curve, stacked,
each scaled to its own range, a light grid, the finding's step as a red vertical line, a
non-finite point as a red tick at the top. Labels go in the text beside the picture
(:func:`caption`), which Slack and the web app show anyway.
"""

from __future__ import annotations

import math
import struct
import zlib
from typing import Any

WIDTH, PANEL_H, PAD = 640, 110, 8
COLORS = [(31, 119, 180), (44, 160, 44), (148, 103, 189)]
MARK = (214, 39, 40)
GRID = (225, 225, 225)
FRAME = (160, 160, 160)


def _png(pixels: Any) -> bytes:
    h, w, _ = pixels.shape
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def _line(img: Any, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int]) -> None:
    n = max(abs(x1 - x0), abs(y1 - y0), 1)
    for i in range(n + 1):
        x = round(x0 + (x1 - x0) * i / n)
        y = round(y0 + (y1 - y0) * i / n)
        img[y, x] = color
        if y + 1 < img.shape[0]:
            img[y + 1, x] = color  # two pixels thick: readable when Slack scales it down


def png_chart(curves: dict[str, list[list[Any]]], step: int | None = None, *, width: int = WIDTH) -> bytes:
    """``curves`` as in a finding's ``evidence["plot"]["curves"]`` (key -> [[step, value], ...])."""
    import numpy as np

    items = [(k, pts) for k, pts in curves.items() if pts][:3]
    if not items:
        raise ValueError("no curve to draw")
    height = PAD + len(items) * (PANEL_H + PAD)
    img = np.full((height, width, 3), 255, dtype=np.uint8)
    all_steps = [float(p[0]) for _k, pts in items for p in pts]
    s_lo, s_hi = min(all_steps), max(all_steps)
    span = (s_hi - s_lo) or 1.0
    left, right = PAD, width - PAD - 1

    def xof(s: float) -> int:
        return int(left + (s - s_lo) / span * (right - left))

    for n, (key, pts) in enumerate(items):
        top = PAD + n * (PANEL_H + PAD)
        bottom = top + PANEL_H - 1
        for frac in (0.25, 0.5, 0.75):
            img[int(top + frac * PANEL_H), left:right + 1] = GRID
        img[top, left:right + 1] = FRAME
        img[bottom, left:right + 1] = FRAME
        img[top:bottom + 1, left] = FRAME
        img[top:bottom + 1, right] = FRAME
        values = []
        for s, v in pts:
            try:
                values.append((float(s), float(v)))
            except (TypeError, ValueError):
                values.append((float(s), math.nan))
        finite = [v for _s, v in values if math.isfinite(v)]
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
        vspan = (hi - lo) or 1.0
        color = COLORS[n % len(COLORS)]
        prev = None
        for s, v in values:
            x = xof(s)
            if not math.isfinite(v):
                img[top + 1:top + 12, max(left, x - 1):x + 2] = MARK
                prev = None
                continue
            y = int(bottom - 4 - (v - lo) / vspan * (PANEL_H - 9))
            if prev is not None:
                _line(img, prev[0], prev[1], x, y, color)
            else:
                img[y, x] = color
            prev = (x, y)
        if step is not None and s_lo <= step <= s_hi:
            x = xof(float(step))
            img[top:bottom + 1, max(left, x - 1):min(right, x + 1) + 1] = MARK
    return _png(img)


def caption(finding: Any) -> str:
    """What the picture shows, in words (the PNG carries no text)."""
    ev = finding.evidence if hasattr(finding, "evidence") else finding.get("evidence") or {}
    plot = ev.get("plot") or {}
    names = [f"{k} ({c})" for k, c in zip(plot.get("curves") or {}, ("blue", "green", "purple"))]
    label = f"{ev['label']}: " if ev.get("label") else ""  # which run, when several were read (a zip of runs)
    return f"{label}{', '.join(names)} by step; the red line marks step {plot.get('step')}"


def finding_png(finding: Any) -> bytes | None:
    """The PNG of a finding (a Finding or its dict) that carries curves, else None."""
    ev = finding.evidence if hasattr(finding, "evidence") else (finding.get("evidence") or {})
    plot = ev.get("plot") if isinstance(ev, dict) else None
    if not plot or not plot.get("curves"):
        return None
    return png_chart(plot["curves"], plot.get("step"))
