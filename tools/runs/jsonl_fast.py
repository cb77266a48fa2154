"""JSONL dumps read a block of lines at a time by numpy, without a parse of every line.

A metrics logger writes the same keys in the same order on every line (``json.dumps`` of one dict
per step): a line is then the first line's bytes with other numbers in it. :func:`find_block`
checks that of up to ``rows`` lines at once, from the positions of their commas (one between each
two values), newlines and braces found in one pass over the file: every line holds exactly as many
commas as the first, one brace, and the bytes the first line has between its values (the key names,
``", "``, ``": "``) at the same place after each comma. Only the columns the checks read are then
parsed (``orjson``, one JSON array per column, ``json`` where orjson refuses NaN or Infinity): a
value the checks do not read is never parsed. ``dumps.read_dump`` hands a block the line-by-line
parse would group the same way (a whole chunk of rows sharing their keys) to ``_take`` as that
group; any block where one line differs is parsed line by line, as before.

What the line-by-line parse does that this does not: it refuses a line whose unread value is not
JSON (``1.2.3``, a torn string with no comma after it). No JSON writer makes one; a torn line, a
stray log line, a nested object, a different key or spacing all send the block to the parse.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

#: Bytes scanned at a time for commas, newlines and braces (small enough to stay in cache)
SCAN_BYTES = 1 << 21
#: A value longer than this sends its column to a slice-per-row read (a padded one would waste memory)
MAX_TOKEN = 64
#: Rows whose separators are compared in one gather
ROWS_AT_ONCE = 1024
_TOKEN = re.compile(rb'\s*"([^"\\]*)"\s*:\s*')


@dataclass
class Layout:
    """The first line of a run of lines: its keys, its parsed row, and the bytes before each value
    (``head`` before the first; ``seps[j]`` from the comma after value ``j`` to value ``j + 1``)
    and after the last (``tail``)."""

    keys: tuple[str, ...]
    first: dict[str, Any]
    head: bytes
    seps: list[bytes]
    tail: bytes


def layout_of(line: bytes, row: Any) -> Layout | None:
    """The layout of a line that parsed to ``row``, or None where it is no flat object of distinct plain keys
    with one comma between each two values (a key with a comma, quote or backslash in it; a nested value)."""
    if not isinstance(row, dict) or not row or not line.startswith(b"{") or b"\\" in line:
        return None
    commas = [m.start() for m in re.finditer(b",", line)]
    if len(commas) != len(row) - 1 or line.count(b"{") != 1:
        return None
    keys: list[str] = []
    starts: list[int] = []
    for b in (1, *[c + 1 for c in commas]):
        m = _TOKEN.match(line, b)
        if m is None:
            return None
        keys.append(m.group(1).decode("utf-8", "replace"))
        starts.append(m.end())
    if tuple(keys) != tuple(row) or len(set(keys)) != len(keys):
        return None
    close = line.rstrip().rfind(b"}")
    ends = [*commas, close]
    if any(e <= s for s, e in zip(starts, ends)) or line[close:].strip() != b"}":
        return None
    if any(line[s:e] != line[s:e].strip() for s, e in zip(starts, ends)):
        return None  # spaces around a value: its bytes would not be the value's own
    return Layout(tuple(keys), row, line[:starts[0]], [line[c:s] for c, s in zip(commas, starts[1:])],
                  line[ends[-1]:])


class Scan:
    """The commas, newlines and braces of a file's bytes, and its lines' bounds."""

    def __init__(self, data: Any) -> None:
        import numpy as np

        self.a = np.frombuffer(data, dtype=np.uint8)
        n = len(self.a)
        commas, newlines, braces = [], [], []
        for off in range(0, n, SCAN_BYTES):
            part = self.a[off:off + SCAN_BYTES]
            commas.append(np.flatnonzero(part == 0x2C) + off)
            newlines.append(np.flatnonzero(part == 0x0A) + off)
            braces.append(np.flatnonzero(part == 0x7B) + off)
        z = [np.zeros(0, dtype=np.int64)]
        self.commas = np.concatenate(commas or z)
        self.braces = np.concatenate(braces or z)
        nl = np.concatenate(newlines or z)
        # a line is [start, end): up to its newline, the last one up to the end of the file when not empty
        ends = nl if (not len(nl) or nl[-1] == n - 1) else np.append(nl, n)
        if not len(nl) and n:
            ends = np.array([n], dtype=np.int64)
        self.starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64) if len(ends) else ends
        self.ends = ends
        # the bytes from every offset as a little-endian word (a strided view, no copy)
        self.words = np.ndarray(shape=(max(n - 7, 0),), dtype="<u8", buffer=self.a, strides=(1,))

    def __len__(self) -> int:
        return len(self.ends)

    def line(self, data: Any, i: int) -> bytes:
        return bytes(data[int(self.starts[i]):int(self.ends[i])])

    def matches(self, pos: Any, text: bytes) -> Any:
        """Whether ``text`` stands at each offset ``pos`` (8-byte words where it is that long, else bytes)."""
        import numpy as np

        ok = np.ones(len(pos), dtype=bool)
        size = len(text)
        if size >= 8 and len(self.words):
            top = len(self.words) - 1  # a line that differs may put the text past the file's end: read short
            for o in sorted({*range(0, size - 7, 8), size - 8}):
                ok &= self.words[np.minimum(pos + o, top)] == np.uint64(int.from_bytes(text[o:o + 8], "little"))
                ok &= pos + o <= top
        else:
            top = len(self.a) - 1
            for o in range(size):
                ok &= (self.a[np.minimum(pos + o, top)] == text[o]) & (pos + o <= top)
        return ok


    def all_at(self, pos: Any, texts: list[bytes]) -> bool:
        """Whether ``texts[j]`` stands at ``pos[:, j]`` for every row and ``j``: one gather of all their
        8-byte words (a text under 8 bytes read as the word that ends with it, or byte by byte at the start)."""
        import numpy as np

        cols, offs, want, short = [], [], [], []
        for j, text in enumerate(texts):
            size = len(text)
            if size < 8:
                short.append(j)
                continue
            for o in sorted({*range(0, size - 7, 8), size - 8}):
                cols.append(j)
                offs.append(o)
                want.append(int.from_bytes(text[o:o + 8], "little"))
        if cols:
            offs_a, want_a = np.asarray(offs, dtype=np.int64), np.asarray(want, dtype=np.uint64)
            if int(pos.max()) + max(offs) >= len(self.words) or int(pos.min()) < 0:
                return False
            for r in range(0, len(pos), ROWS_AT_ONCE):  # a few thousand rows at a time: the offsets stay in cache
                if not (self.words[pos[r:r + ROWS_AT_ONCE, cols] + offs_a] == want_a).all():
                    return False
        return all(self.matches(pos[:, j], texts[j]).all() for j in short)


@dataclass
class Block:
    """``rows`` lines from line ``line`` that share a :class:`Layout`: the group ``dumps._take`` reads."""

    scan: Scan
    layout: Layout
    line: int
    rows: int
    #: each line's value offsets: (rows, keys) starts and ends
    vstart: Any
    vend: Any
    #: the parsed columns (:meth:`parse`): every row's values of them in a row, and as a float matrix
    #: (None where one is no number, null or boolean: numpy refused it)
    names: tuple[str, ...] = ()
    values: list[Any] = field(default_factory=list)
    matrix: Any = None

    @property
    def first(self) -> dict[str, Any]:
        return self.layout.first

    def parse(self, keys: list[str]) -> bool:
        """Parse the columns of ``keys`` (one JSON array of every row's values of them, ``orjson``, ``json``
        where orjson refuses NaN or Infinity); False where one is no JSON value."""
        import numpy as np

        self.names = tuple(keys)
        if not keys:
            return True
        idx = [self.layout.keys.index(k) for k in keys]
        text = _joined(self.scan, self.vstart[:, idx].reshape(-1), self.vend[:, idx].reshape(-1))
        try:
            from orjson import loads
        except ImportError:
            loads = json.loads
        try:
            values = loads(text)
        except ValueError:
            try:
                values = json.loads(text)  # NaN / Infinity, which orjson refuses
            except ValueError:
                return False
        if not isinstance(values, list) or len(values) != self.rows * len(keys):
            return False  # a value with a comma in it
        self.values = values
        try:
            matrix = np.asarray(values, dtype=np.float64)
            self.matrix = matrix.reshape(self.rows, len(keys)) if matrix.ndim == 1 else None
        except (TypeError, ValueError):
            self.matrix = None
        return True

    def column(self, key: str) -> list[Any]:
        """A parsed column's values as JSON gave them."""
        return self.values[self.names.index(key)::len(self.names)]

    def arrays(self, keys: list[str]) -> dict[str, Any] | None:
        """Parsed columns as float arrays (as one ``numpy`` call over the rows makes them), None where a
        value is no number, null or boolean."""
        if self.matrix is None:
            return None
        return {k: self.matrix[:, self.names.index(k)].copy() for k in keys}


def _joined(scan: Scan, start: Any, end: Any) -> bytes:
    """The bytes ``[start, end)`` of each row joined as one JSON array: each row's value read as 8-byte
    words (one gather), space-padded to the longest, a comma after each."""
    import numpy as np

    size = end - start
    if not len(size):
        return b"[]"
    nw = (int(size.max()) + 7) // 8
    if nw * 8 > MAX_TOKEN or int(start.max()) + 8 * nw > len(scan.words):  # long values, or the file's end
        return b"[" + b",".join(bytes(scan.a[s:e]) for s, e in zip(start.tolist(), end.tolist())) + b"]"
    width = 8 * nw
    text = np.empty((len(size), width + 1), dtype=np.uint8)
    text[:, :width] = scan.words[start[:, None] + np.arange(0, width, 8)].view(np.uint8).reshape(len(size), width)
    np.putmask(text[:, :width], np.arange(width) >= size[:, None], np.uint8(0x20))
    text[:, width] = 0x2C  # ","
    text[-1, width] = 0x5D  # "]"
    return b"[" + text.tobytes()


def find_block(scan: Scan, data: Any, line: int, rows: int, layout: Layout) -> Block | None:
    """Lines ``line`` .. ``line + rows`` as one :class:`Block` of ``layout``, or None where any differs."""
    import numpy as np

    s, e = scan.starts[line:line + rows], scan.ends[line:line + rows]
    if len(s) != rows or not rows:
        return None
    lo, hi = int(s[0]), int(e[-1])
    c0, c1 = np.searchsorted(scan.commas, [lo, hi])
    b0, b1 = np.searchsorted(scan.braces, [lo, hi])
    width = len(layout.seps)
    if c1 - c0 != rows * width or b1 - b0 != rows or not (scan.a[s] == 0x7B).all():
        return None
    commas = scan.commas[c0:c1].reshape(rows, width)
    if width and not ((commas[:, 0] > s) & (commas[:, -1] < e)).all():
        return None  # a line's commas must be its own
    if not (scan.matches(s, layout.head) & scan.matches(e - len(layout.tail), layout.tail)).all():
        return None
    if width and not scan.all_at(commas, layout.seps):
        return None
    vstart = np.empty((rows, width + 1), dtype=np.int64)
    vstart[:, 0] = s + len(layout.head)
    vstart[:, 1:] = commas + np.array([len(x) for x in layout.seps], dtype=np.int64)
    vend = np.empty_like(vstart)
    vend[:, :width] = commas
    vend[:, width] = e - len(layout.tail)
    if not (vend > vstart).all():
        return None
    return Block(scan, layout, line, rows, vstart, vend)
