"""The failing function's code, quoted from the user's copy of the framework (``--source PATH``).

A traceback says where it died (``.../site-packages/verl/workers/actor.py:412 in update_policy``)
but not what the code there does. With the framework's source (a clone, or the training
environment's ``site-packages``) the answer and the model can read the lines around the frame,
from the function's ``def`` to a few lines past the failing one. Read-only through the
confinement (the source folder must be an allowed root), bounded (a few frames, a few dozen
lines each, files up to 2 MB), and a frame that does not resolve under the source is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Frames quoted (deepest first), lines per quote, lines after the failing one, bytes read per file.
MAX_FRAMES = 3
MAX_LINES = 40
AFTER = 4
MAX_FILE_BYTES = 2_000_000
#: Where a package's source sits inside a clone (``python/sglang``, ``src/transformers``) besides the top.
LAYOUTS = ("", "python", "src")
_DEF = re.compile(r"^(\s*)(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def frames_in(text: str) -> list[tuple[str, int, str]]:
    """(path, line, function) of every ``File "...", line N, in f`` line of a pasted traceback, in order."""
    return [(m.group(1), int(m.group(2)), m.group(3)) for m in _FRAME.finditer(text)]


@dataclass
class CodeQuote:
    frame: str  # "path:line in func" as the traceback named it
    file: str  # the file read under the source
    func: str
    line: int
    start: int
    end: int
    code: str  # numbered lines, the failing one marked with ">"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.func} (lines {self.start}-{self.end}):\n{self.code}"


def locate(frame_path: str, source: Path) -> Path | None:
    """The file under ``source`` a frame's path names: the longest tail of its path (two parts at least)
    found at the top of ``source`` or in its ``python/`` or ``src/`` folder."""
    parts = [p for p in frame_path.replace("\\", "/").split("/") if p and p not in (".", "..")]
    for k in range(max(0, len(parts) - 10), len(parts) - 1):
        tail = parts[k:]
        for layout in LAYOUTS:
            candidate = source.joinpath(layout, *tail) if layout else source.joinpath(*tail)
            if candidate.is_file():
                return candidate
    return None


def quote_lines(lines: list[str], line: int, func: str) -> tuple[int, int]:
    """(start, end), 1-based and inclusive: from the enclosing ``def func`` (or the nearest def/class with
    less indentation) to ``AFTER`` lines past ``line``, at most ``MAX_LINES``."""
    line = min(max(line, 1), len(lines))
    indent = len(lines[line - 1]) - len(lines[line - 1].lstrip())
    start = max(1, line - MAX_LINES + AFTER + 1)
    for n in range(line, max(0, line - 400), -1):
        m = _DEF.match(lines[n - 1])
        if m and (m.group(2) == func or len(m.group(1)) < indent):
            start = n
            break
    end = min(len(lines), line + AFTER)
    if end - start + 1 > MAX_LINES:
        start = end - MAX_LINES + 1
    return start, end


def quote_frames(frames: list[tuple[str, int, str]], source: str | Path, confinement: Any) -> list[CodeQuote]:
    """Quotes of the deepest frames (nearest the exception) that resolve under ``source``."""
    from rlmedic.redact import redact

    root = Path(source).expanduser()
    confinement.check(root)  # the source must be an allowed root: a UserError names it otherwise
    out: list[CodeQuote] = []
    for path, line, func in reversed(frames):
        if len(out) >= MAX_FRAMES:
            break
        found = locate(path, root)
        if found is None or not line:
            continue
        text = confinement.read_text(found, max_bytes=MAX_FILE_BYTES)
        lines = text.splitlines()
        if line > len(lines):
            continue  # the user's copy is another version of that file: its line numbers do not hold
        start, end = quote_lines(lines, line, func)
        code = "\n".join(f"{'>' if n == line else ' '}{n:5d}  {lines[n - 1]}" for n in range(start, end + 1))
        out.append(CodeQuote(frame=f"{path}:{line} in {func}", file=str(found), func=func, line=line,
                             start=start, end=end, code=redact(code)))
    return out
