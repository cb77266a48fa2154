"""What the AReaL loader and the slime parser share: the original text, the edited text, the diff."""

from __future__ import annotations

import re
from pathlib import Path


class EditableText:
    """What the AReaL loader and the slime parser share: a file's original text, its edited text, the diff.

    Subclasses are dataclasses with ``path``, ``original`` and ``text`` fields; edits change
    ``text`` only, so the input file is never touched.
    """

    path: str
    original: str
    text: str

    @property
    def changed(self) -> bool:
        return self.text != self.original

    def dump(self) -> str:
        return self.text

    def diff(self, from_name: str = "", to_name: str = "") -> str:
        """Unified diff from the original text to the current text."""
        name = Path(self.path).name
        return unified_diff(self.original, self.text, from_name or f"a/{name}", to_name or f"b/{name}")


CONTEXT = 3
SLACK = 8  # extra lines kept on each side: repeated lines let difflib align a change a little elsewhere
_HUNK = re.compile(r"^@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@")


def unified_diff(old: str, new: str, fromfile: str, tofile: str) -> str:
    """``difflib.unified_diff`` of two texts, run on the part that differs only.

    The common head and tail are cut off first (in C, by slice comparison), keeping
    :data:`CONTEXT` lines around the change, and the hunk line numbers are shifted back:
    a one-line change in a million-line script costs the change, not a million-line diff.
    """
    import difflib

    if old == new:
        return ""
    head = _common_prefix(old, new)
    head = old.rfind("\n", 0, head) + 1  # whole lines only
    for _ in range(CONTEXT + SLACK):
        if head == 0:
            break
        head = old.rfind("\n", 0, head - 1) + 1
    tail = _common_prefix(old[head:][::-1], new[head:][::-1])
    cut_old, cut_new = len(old) - tail, len(new) - tail
    # extend the middle to the end of the line where the change ends, then CONTEXT more lines
    for _ in range(CONTEXT + SLACK + 1):
        nxt = old.find("\n", cut_old)
        if nxt < 0:
            cut_old, cut_new = len(old), len(new)
            break
        step = nxt + 1 - cut_old
        cut_old, cut_new = cut_old + step, cut_new + step
    offset = old.count("\n", 0, head)
    lines = difflib.unified_diff(old[head:cut_old].splitlines(keepends=True), new[head:cut_new].splitlines(keepends=True),
                                 fromfile=fromfile, tofile=tofile)
    out = []
    for line in lines:
        match = _HUNK.match(line)
        if match:
            line = (f"@@ -{int(match.group(1)) + offset}{match.group(2)} +{int(match.group(3)) + offset}{match.group(4)} @@"
                    + line[match.end():])
        out.append(line)
    return "".join(out)


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of two strings (binary search over C-level slice comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
