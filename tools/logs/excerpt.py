"""LLM-sized excerpts of huge logs: the lines that matter, numbered, repeats collapsed.

A model should never receive megabytes of log. :func:`build_excerpt` runs the diagnosis,
then spends a line budget on (1) a window around the root error, (2) the first line of
each other finding, (3) where the log ends, collapsing runs of near-identical lines
("… 57 similar lines") and keeping original line numbers so answers can cite them. The
result is redacted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rlmedic.confine import Confinement, redact
from rlmedic.tools.logs.diagnose import Diagnosis, diagnose, diagnose_text
from rlmedic.tools.logs.scan import Source

_NORMALISE = re.compile(r"0x[0-9a-fA-F]+|\d+")
ROOT_SHARE = 0.6
OTHER_BEFORE, OTHER_AFTER = 2, 1
TAIL = 10


@dataclass
class _Window:
    file: str
    rows: list[tuple[int, str, bool]]  # (line, text, is_hit)


def _collapse(rows: list[tuple[int, str, bool]]) -> list[tuple[int | None, str, bool]]:
    """Runs of lines equal up to numbers become one line plus a count."""
    out: list[tuple[int | None, str, bool]] = []
    i = 0
    while i < len(rows):
        j = i
        key = _NORMALISE.sub("#", rows[i][1])
        while j + 1 < len(rows) and not rows[j + 1][2] and not rows[i][2] and _NORMALISE.sub("#", rows[j + 1][1]) == key:
            j += 1
        out.append(rows[i])
        if j > i:
            out.append((None, f"… {j - i} similar line(s) collapsed (to line {rows[j][0]})", False))
        i = j + 1
    return out


def _window_for(diagnosis: Diagnosis, file: str, line: int, before: int, after: int) -> _Window | None:
    hit = diagnosis.hits.get(f"{file}:{line}")
    if hit is None:
        return None
    rows = [(n, t, False) for n, t in hit.before[-before:]] if before else []
    rows.append((hit.line, hit.text, True))
    rows += [(n, t, False) for n, t in hit.after[:after]]
    return _Window(file, rows)


def excerpt_from_diagnosis(diagnosis: Diagnosis, *, max_lines: int = 120, max_chars: int | None = None) -> str:
    """The excerpt for an existing diagnosis (no second scan)."""
    max_lines = max(10, max_lines)
    windows: list[_Window] = []
    root = diagnosis.root_finding
    budget = max_lines
    if root is not None and root.line:
        room = max(4, int(max_lines * ROOT_SHARE))
        after = min(8, room // 4)
        w = _window_for(diagnosis, root.file, root.line, room - after - 1, after)
        if w:
            windows.append(w)
    for f in diagnosis.findings:
        if f is root or not f.line:
            continue
        w = _window_for(diagnosis, f.file, f.line, OTHER_BEFORE, OTHER_AFTER)
        if w:
            windows.append(w)
    for info in diagnosis.files:
        if info.tail:
            windows.append(_Window(info.name, [(n, t, False) for n, t in info.tail[-TAIL:]]))
    if not windows:
        for info in diagnosis.files:
            head = info.head.splitlines()[:TAIL]
            windows.append(_Window(info.name, [(i + 1, t, False) for i, t in enumerate(head)]))

    # merge windows per file, dedupe lines, keep file order of first appearance
    order: list[str] = []
    per_file: dict[str, dict[int, tuple[str, bool]]] = {}
    for w in windows:
        if w.file not in per_file:
            order.append(w.file)
            per_file[w.file] = {}
        rows = per_file[w.file]
        for n, t, is_hit in _collapse(w.rows):  # type: ignore[assignment]
            if n is None:
                continue
            if budget <= 0 and n not in rows:
                break
            if n not in rows:
                budget -= 1
            rows[n] = (t, is_hit or rows.get(n, ("", False))[1])

    out: list[str] = []
    if root is not None:
        out.append(f"# rlmedic: root cause {root.id} at {root.file}:{root.line}: {root.summary.split('. ')[0]}")
    else:
        out.append("# rlmedic: no error-level finding")
    if diagnosis.stats.get("truncated"):
        out.append("# rlmedic: the scan stopped at the byte cap (RLMEDIC_MAX_SCAN_BYTES); later lines were not read")
    for file in order:
        rows = per_file[file]
        if not rows:
            continue
        out.append(f"==> {file} <==")
        numbers = sorted(rows)
        width = len(str(numbers[-1]))
        prev = None
        collapsed = _collapse([(n, rows[n][0], rows[n][1]) for n in numbers])
        for n, text, is_hit in collapsed:
            if n is not None and prev is not None and n > prev + 1:
                out.append(f"  {'':>{width}} | …")
            if n is None:
                out.append(f"  {'':>{width}} | {text}")
                continue
            out.append(f"{'>' if is_hit else ' '} {n:>{width}} | {text}")
            prev = n
    text = redact("\n".join(out))
    if max_chars is not None and len(text) > max_chars:
        text = text[: max(0, max_chars - 20)].rsplit("\n", 1)[0] + "\n… [excerpt cut]"
    return text


def build_excerpt(
    path_or_paths: str | os.PathLike[str] | list[str | os.PathLike[str]],
    *,
    max_lines: int = 120,
    max_tokens: int | None = None,
    confinement: Confinement,
    streams: Sequence[Source] = (),
) -> str:
    """The most relevant ``max_lines`` lines (about ``max_tokens`` tokens) of the logs, redacted.

    ``streams``: stdin or pipes the front door opened (see :func:`~rlmedic.tools.logs.diagnose.diagnose`).
    """
    paths = list(path_or_paths) if isinstance(path_or_paths, (list, tuple)) else [path_or_paths]
    diagnosis = diagnose(paths, confinement=confinement, streams=streams)
    return excerpt_from_diagnosis(diagnosis, max_lines=max_lines, max_chars=max_tokens * 4 if max_tokens else None)


def excerpt_text(text: str, *, name: str = "<input>", max_lines: int = 120, max_tokens: int | None = None) -> str:
    """Same as :func:`build_excerpt` for pasted text."""
    diagnosis = diagnose_text(text, name)
    return excerpt_from_diagnosis(diagnosis, max_lines=max_lines, max_chars=max_tokens * 4 if max_tokens else None)
