"""Fast, bounded-memory scanning of (possibly huge) training logs for known signatures.

How it stays fast and small:

* files are read in fixed chunks into one reusable buffer (plain or gzip, never whole),
  so memory does not grow with the file;
* a *literal prefilter* finds candidate lines: Hyperscan when installed (GB/s), else a
  pure-Python ``bytes.find`` loop; regexes run only on lines that contain a literal;
* only the first hits of each signature keep their surrounding lines; later ones are
  counted (by the region loop itself when the line needs no cleaning);
* line numbers are newlines counted between reports (StringZilla's SIMD count when installed),
  and a part of a file past its metric budgets is searched for signatures and AReaL's step lines
  only (:meth:`Scanner._metric_window`).

Reads go through :class:`rlmedic.confine.Confinement` (roots checked after resolving
symlinks); nothing is ever written.
"""

from __future__ import annotations

import io
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

from rlmedic.confine import Confinement, looks_binary, redact, walk_tree
from rlmedic.errors import AccessDenied, UserError
from rlmedic.tools.logs.metrics import AREAL_STEP
from rlmedic.tools.logs.signatures import Catalog, Literal, Signature, required_literals

CHUNK = 8 << 20
_BAR = "│".encode()  # the column bar of AReaL's stats tables
_METRIC_ONLY = frozenset({"#metric"})
MAX_TABLE_ROWS = 400
KEEP_BEFORE = 64 << 10  # bytes of already-scanned text kept for before-context
AFTER_RESERVE = 16 << 10  # bytes held back so hits near a chunk end have after-context
CONTEXT_BEFORE = 30
CONTEXT_AFTER = 8
MATCH_CONTEXT_BEFORE = 25  # lines searched for a signature's `context` regexes
MATCH_CONTEXT_AFTER = 8
PHASE_BEFORE = 40
PHASE_AFTER = 6
MAX_LINE_CHARS = 2000
#: Characters of a stats line the metric collector reads: more than is shown (verl prints a step's ~100
#: metrics on one line of several KB, timing_s/ and perf/ last), bounded for a hostile line.
METRIC_LINE_CHARS = 8192
#: Distinct candidate-line skeletons (digits deleted) whose verdict a scan remembers (:meth:`Scanner._cannot_match`).
MAX_SKELETONS = 4096
REDACT_MARGIN = 8192  # characters past the cut that are redacted with it (longer than any one secret)
DETAILED_PER_KEY = 20  # hits per (signature, file, group, phase) that keep their context
PHASED_PER_KEY = 60  # hits per (signature, file) whose phase is inferred from context
TAIL_LINES = 30
HEAD_BYTES = 64 << 10
MAX_FILES = 5000
READ_PIECE = 1 << 20  # bytes per read call (a failing gzip read loses at most this much)
#: Stats lines of one file all fed to the metric collector (its budget). Past them a file's stats lines
#: are read in a shrinking share of each region (:meth:`Scanner._metric_window`) and its last
#: :data:`METRIC_TAIL_FULL` bytes; AReaL's step lines and lines holding a nan or an inf always. Parsing a
#: stats line costs 10-20 us, the scan around it ~2-3 ns a byte: 64 MiB of key=value lines cost 45-66 s
#: when each was parsed, a 256 MiB AReaL log 7-15 s (issues 30, 31); 2,000 of them cost ~0.04 s. A run's
#: first 2,000 steps are read whole; a 256 MiB log's 123,000 rollout lines past them cost ~0.4 s at 5,000.
METRIC_LINES_FULL = 2_000
#: Stats tables (AReaL's per-step grids: one a training step) of one file all read, the same way.
METRIC_TABLES_FULL = 2_000
#: The last stretch of a file (bytes) read for metrics in full even past the budget: how a run ends.
METRIC_TAIL_FULL = 1 << 20
#: A nan or inf spelled as a value (``loss=nan``, ``tensor(-inf)``, ``Infinity``), not inside a word (``INFO``).
_NON_FINITE = re.compile(rb"(?i)(?<![a-z])(?:nan|inf(?:inity)?)(?![a-z])")
#: The same for Hyperscan (no lookarounds; ``^``/``$`` at line ends): a report lies on the value's line.
_NON_FINITE_HS = rb"(?:^|[^a-z\n])(?:nan|inf(?:inity)?)(?:[^a-z\n]|$)"
_NON_FINITE_ONLY = frozenset({"#nonfinite"})
#: AReaL's step line: it comes before its stats table, which takes the step from it.
_STEP_LINE = b"Train step"
#: Its step and the run's total steps, read off the bytes as the collector reads them off the text.
_STEP_NUMBERS = re.compile(AREAL_STEP.pattern.encode())
DEFAULT_MAX_SCAN_BYTES = 64 << 30
#: Bytes read from stdin or a pipe at most (``RLMEDIC_MAX_STDIN_BYTES``): a pipe may never end
#: (``tail -f``), and what came through it is the only copy, so the cap is tighter than for files.
DEFAULT_MAX_STREAM_BYTES = 8 << 30
STDIN = "-"

LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".gz", ".stdout", ".stderr", ".jsonl", ".json"}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RAY_PREFIX = re.compile(r"^\((\w[\w:./-]*)(?: pid=(\d+))?")
_RAY_PREFIX_FULL = re.compile(r"^\((\w[\w:./-]*)(?: pid=(\d+))?[^)]*\)\s?")
_TS_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # ISO / Python logging / SGLang, with an optional UTC offset (then converted to UTC)
    (re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6})\d*)?(Z|[+-]\d{2}:?\d{2}\b)?"), "ymd"),
    (re.compile(r"\b(\d{4})(\d{2})(\d{2})-(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?"), "ymd"),
    (re.compile(r"\b(\d{4})/(\d{2})/(\d{2})[ T-](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?"), "ymd"),
    (re.compile(r"\b[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?"), "glog"),
    # 11/26/2026 11:16:02 (month first)
    (re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})[ ,T]+(\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?(?: ?([AaPp][Mm])\b)?"), "mdy"),
    # syslog / ctime: "Nov 26 11:16:02", "Thu Nov 26 11:16:02 2026"
    (re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?(?: (\d{4})\b)?"), "bsd"),
)
_MONTHS = {m: i + 1 for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split())}




def _newline_counter() -> Callable[[bytearray, bytes, int, int], int]:
    """``count(buf, b"\\n", start, end)`` for the region loop: StringZilla's SIMD count when installed, else
    ``bytearray.count``.

    Every line number the scan reports is the newlines counted up to it, so a long log's every byte is
    counted once. CPython 3.11 counts one byte at a time (a 256 MiB log: 2.1 billion instructions,
    ~0.2 s, the largest single cost of the scan after Hyperscan's pass); StringZilla's count is ~5x
    faster, and ~1 ms to import. Both count the same (``tests/test_scan_equivalence.py``).
    """
    try:
        import stringzilla

        count = stringzilla.count
        if count(bytearray(b"a\nb\n\nc"), b"\n", 1, 5) == 3:  # the signature relied on, checked
            return count  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - not installed, or a build for another CPU: the plain count
        pass
    return bytearray.count


#: See :func:`_newline_counter`.
count_newlines = _newline_counter()


# ------------------------------------------------------------------ engines -------


class PythonEngine:
    """Pure-Python literal search over a lower-cased copy of the region.

    Literals are folded to lower case and reduced to a minimal set (a literal containing
    another is dropped, its owners moving to the shorter one), so each chunk costs one
    ``lower()`` plus one ``bytes.find`` sweep per remaining literal. The regexes that
    confirm a candidate line keep the exact case.
    """

    name = "python"
    #: Its reports never include ``#nonfinite``: the scanner searches a stats line it leaves unread itself.
    reports_non_finite = False
    #: No report stands for AReaL's step line alone (literals are folded together here).
    step_index = -1

    def __init__(self, literals: list[tuple[Literal, frozenset[str]]]) -> None:
        folded: dict[str, set[str]] = {}
        for lit, owners in literals:
            folded.setdefault(lit.text.lower(), set()).update(owners)
        keep: list[str] = []
        for text in sorted(folded, key=len):
            if not any(k in text for k in keep):
                keep.append(text)
        merged: dict[str, set[str]] = {k: set() for k in keep}
        for text, owners in folded.items():
            for k in keep:
                if k in text:
                    merged[k] |= owners
        self.owners: list[frozenset[str]] = [frozenset(merged[k]) for k in keep] + [_NON_FINITE_ONLY]
        self._needles = [(k.encode(), i) for i, k in enumerate(keep)]

    def scan(self, buf: bytearray, start: int, end: int) -> list[tuple[int, int]]:
        low = buf[start:end].lower()
        out: list[tuple[int, int]] = []
        append = out.append
        for needle, idx in self._needles:
            find = low.find
            pos = find(needle)
            while pos >= 0:
                append((start + pos, idx))
                pos = find(needle, pos + 1)
        out.sort()
        return out

    def scan_sparse(self, buf: bytearray, start: int, end: int) -> list[tuple[int, int]]:
        """What :meth:`HyperscanEngine.scan_sparse` reports, and more: every literal (the scanner skips
        the stats lines it does not want; this engine has no cheaper way to leave them out)."""
        return self.scan(buf, start, end)


class HyperscanEngine:
    """Literal search with Intel Hyperscan (all literals in one pass, SIMD)."""

    name = "hyperscan"

    def __init__(self, literals: list[tuple[Literal, frozenset[str]]]) -> None:
        import hyperscan

        self._hyperscan = hyperscan
        self.owners = [owners for _lit, owners in literals] + [_NON_FINITE_ONLY]
        lits = [lit for lit, _owners in literals]
        exprs = [re.escape(lit.text).encode() for lit in lits]
        flags = [hyperscan.HS_FLAG_CASELESS if lit.caseless else 0 for lit in lits]
        # non-finite values are reported everywhere (rare), so a stats line left unread is checked for free
        self._db = _hyperscan_database(hyperscan, [*exprs, _NON_FINITE_HS],
                                       [*flags, hyperscan.HS_FLAG_CASELESS | hyperscan.HS_FLAG_MULTILINE])
        # a non-finite value is reported one character past its end (or at its last one): on its line
        self._lengths = [len(lit.text.encode()) for lit in lits] + [1]
        # the sparse database (built on first use): the literals of signatures, AReaL's step line, non-finite values
        self._sparse_parts = [(i, e, f) for i, (e, f, (lit, owners)) in enumerate(zip(exprs, flags, literals))
                              if owners != _METRIC_ONLY or lit.text == _STEP_LINE.decode()]
        self._sparse: Any = None
        #: The report index of AReaL's step line alone (a stats literal and nothing else), -1 if none.
        self.step_index = next((i for i, (lit, owners) in enumerate(literals)
                                if owners == _METRIC_ONLY and lit.text == _STEP_LINE.decode() and not lit.caseless), -1)

    #: Whether its reports include the values that are nan or inf (``#nonfinite``).
    reports_non_finite = True

    def scan(self, buf: bytearray, start: int, end: int) -> list[tuple[int, int]]:
        return self._scan(self._db, buf, start, end)

    def scan_sparse(self, buf: bytearray, start: int, end: int) -> list[tuple[int, int]]:
        """Reports of signature literals, of AReaL's step line and of non-finite values only: the stats
        lines of a part of a file read for signatures alone cost no call each."""
        if self._sparse is None:
            hs = self._hyperscan
            ids = [i for i, _e, _f in self._sparse_parts] + [len(self.owners) - 1]
            exprs = [e for _i, e, _f in self._sparse_parts] + [_NON_FINITE_HS]
            flags = [f for _i, _e, f in self._sparse_parts] + [hs.HS_FLAG_CASELESS | hs.HS_FLAG_MULTILINE]
            self._sparse = _hyperscan_database(hs, exprs, flags, ids, kind="hyperscan-sparse")
        return self._scan(self._sparse, buf, start, end)

    def _scan(self, db: Any, buf: bytearray, start: int, end: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        append = out.append
        lengths = self._lengths

        def on_match(idx: int, _from: int, to: int, _flags: int, _ctx: Any) -> None:
            append((start + to - lengths[idx], idx))

        db.scan(memoryview(buf)[start:end], match_event_handler=on_match)
        out.sort()
        return out


def _hyperscan_database(hyperscan: Any, exprs: list[bytes], flags: list[int], ids: list[int] | None = None,
                        kind: str = "hyperscan") -> Any:
    """The block-mode database for these literals: compiled once, then loaded from the disk cache.

    Keyed by the expressions, their flags and ids and the Hyperscan version (a serialized
    database only loads into the library version and CPU features that wrote it; a
    failing load rebuilds it).
    """
    from rlmedic import diskcache

    ids = ids if ids is not None else list(range(len(exprs)))

    def build() -> Any:
        db = hyperscan.Database()
        db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=flags)
        return db

    def load(blob: bytes) -> Any:
        # a deserialized database needs its mode named and a scratch space of its own (python-hyperscan
        # 0.9 gives a compiled one a scratch; without these two every load failed and the cache rebuilt)
        db = hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
        db.scratch = hyperscan.Scratch(db)
        return db

    version = getattr(hyperscan, "__version__", "")
    parts = [str(version), repr(getattr(hyperscan, "HS_VERSION", "")), *exprs, repr(flags), repr(ids)]
    key = diskcache.digest(parts)
    blob = _HS_BLOBS.get(key)
    if blob is not None:  # compiled by this process already: a database of its own (one scratch each)
        return load(blob)
    db = diskcache.cached(kind, key, build, hyperscan.dumpb, load)
    _HS_BLOBS[key] = hyperscan.dumpb(db)
    return db


#: Serialized Hyperscan databases this process compiled or loaded, by key (the disk cache keeps one per
#: kind; a process with several data dirs, as the test suite, compiles each once).
_HS_BLOBS: dict[str, bytes] = {}


def make_engine(
    literals: list[tuple[Literal, frozenset[str]]], prefer: str | None = None
) -> PythonEngine | HyperscanEngine:
    """Hyperscan when importable (and not disabled by ``RLMEDIC_SCAN_ENGINE=python``)."""
    prefer = (prefer or os.environ.get("RLMEDIC_SCAN_ENGINE") or "auto").lower()
    if prefer in ("auto", "hyperscan"):
        try:
            return HyperscanEngine(literals)
        except ImportError:
            if prefer == "hyperscan":
                raise UserError("RLMEDIC_SCAN_ENGINE=hyperscan but the 'hyperscan' package is not installed") from None
        except Exception:  # pragma: no cover - a broken native install falls back
            pass
    return PythonEngine(literals)


# ------------------------------------------------------------------ results -------


@dataclass
class Hit:
    """One matched line. ``before``/``after`` are filled for detailed hits only."""

    sig: str
    file: str
    file_index: int
    line: int
    text: str
    ts: datetime | None = None
    before: list[tuple[int, str]] = field(default_factory=list)
    after: list[tuple[int, str]] = field(default_factory=list)
    phase: str = ""
    group: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    process: str = ""


@dataclass
class HitGroup:
    """All hits of one signature in one file (per group value and phase)."""

    sig: str
    file_index: int
    group: str
    phase: str
    count: int = 0
    detailed: list[Hit] = field(default_factory=list)
    last: Hit | None = None
    #: (signature, line number, line, file name) of a last hit not built yet (see Scanner._count_only)
    pending: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)


@dataclass
class FileInfo:
    name: str
    index: int
    path: str = ""
    size: int = 0
    bytes_read: int = 0
    lines: int = 0
    gzip: bool = False
    binary: bool = False
    truncated: bool = False
    partial: str = ""  # why the file could only be read in part (a gzip cut short)
    mtime: float | None = None
    head: str = ""
    tail: list[tuple[int, str]] = field(default_factory=list)
    frameworks: dict[str, int] = field(default_factory=dict)
    last_ts: datetime | None = None


@dataclass
class ScanResult:
    files: list[FileInfo]
    groups: dict[tuple[str, int, str, str], HitGroup]
    engine: str
    skipped: list[dict[str, str]]
    bytes_read: int
    truncated: bool


# ------------------------------------------------------------------ helpers -------


def clean_line(raw: bytes | bytearray, limit: int | None = MAX_LINE_CHARS) -> str:
    """Decode (invalid UTF-8 replaced), drop ANSI colours and carriage returns; cut past ``limit`` characters."""
    text = bytes(raw).decode("utf-8", errors="replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = " ".join(parts[-3:]) if parts else ""
    if limit is not None and len(text) > limit:
        text = cut_line(text)
    return text


def metric_text(buf: bytearray, ls: int, le: int) -> str:
    """A stats line as the metric collector reads it: cleaned as :func:`clean_line` does, up to
    :data:`METRIC_LINE_CHARS` characters and not cut for display (no marker, nothing redacted: numbers
    are read from it, it is never shown)."""
    return clean_line(buf[ls:min(le, ls + 4 * METRIC_LINE_CHARS)], limit=None)[:METRIC_LINE_CHARS]


def cut_line(text: str) -> str:
    """``text`` redacted, then cut at :data:`MAX_LINE_CHARS`: a key cut in half first would no longer
    match its pattern and its start would leak into a report.

    Only the first ``MAX_LINE_CHARS + REDACT_MARGIN`` characters are redacted (a line can be
    megabytes): a secret straddling the margin lies far past the cut, unless redaction shrank
    the window that much, and then the whole line is redacted.
    """
    window = text[: MAX_LINE_CHARS + REDACT_MARGIN]
    red = redact(window)
    if len(window) < len(text) and len(red) < MAX_LINE_CHARS + REDACT_MARGIN // 2:
        red = redact(text)
    return red[:MAX_LINE_CHARS] + " …[line truncated]"


#: The year of a timestamp whose format has none (glog's ``E1120 10:15:02``) and no hint was given:
#: the diagnosis puts the run's year there (from the other timestamps), so that a year-less line is
#: not ordered after every dated one (the current year is later than a log from last year).
NO_YEAR = 4  # a leap year, so that 29 February parses


def shown_line(full: str, sig: Signature) -> str:
    """The line as evidence: whole when short, else a window of :data:`MAX_LINE_CHARS` that holds the match.

    Signatures are matched against the whole line (an OOM message after column 2000 is
    still found); only what is shown is cut (redacted first, :func:`cut_line`), and the cut
    is marked. A window that starts mid-line starts after a space, so it does not open
    with the tail of a secret.
    """
    if len(full) <= MAX_LINE_CHARS:
        return full
    at = min((m.start() for p in sig.patterns if (m := p.search(full))), default=0)
    if at < MAX_LINE_CHARS // 2:
        return cut_line(full)
    start = at - MAX_LINE_CHARS // 4
    space = full.rfind(" ", max(0, start - 200), start)
    start = space + 1 if space >= 0 else start
    rest = full[start:]
    return f"[line cut: {start} characters before] …" + (cut_line(rest) if len(rest) > MAX_LINE_CHARS else redact(rest))


def parse_timestamp(line: str, year_hint: int | None = None) -> datetime | None:
    """The first timestamp in the line's first 160 characters (AReaL, slime/SGLang, glog).

    A format without a year takes ``year_hint``, else the current year; the scanner passes
    :data:`NO_YEAR` and lets the diagnosis fill in the run's year.
    """
    head = line[:160]
    for rx, kind in _TS_PATTERNS:
        m = rx.search(head)
        if not m:
            continue
        try:
            offset = ""
            if kind == "ymd":
                y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
                frac = m.group(7) or "0"
                offset = (m.group(8) or "") if m.re.groups >= 8 else ""
            elif kind == "mdy":
                mo, d, y, h, mi, s = (int(g) for g in m.groups()[:6])
                frac = m.group(7) or "0"
                if m.group(8) and h <= 12:  # 12-hour clock
                    h = h % 12 + (12 if m.group(8).upper() == "PM" else 0)
            elif kind == "bsd":
                mo = _MONTHS[m.group(1)]
                d, h, mi, s = (int(g) for g in m.groups()[1:5])
                frac = m.group(6) or "0"
                y = int(m.group(7)) if m.group(7) else (year_hint or datetime.now().year)
            else:
                mo, d, h, mi, s = (int(g) for g in m.groups()[:5])
                y = year_hint or datetime.now().year
                frac = m.group(6) or "0"
            ts = datetime(y, mo, d, h, mi, s, int(frac[:6].ljust(6, "0")))
        except ValueError:
            continue
        if offset and offset != "Z":  # compare logs written in different zones: UTC, without a zone
            sign = 1 if offset[0] == "+" else -1
            digits = offset[1:].replace(":", "")
            ts -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4]))
        return ts
    return None


def process_key(line: str) -> str:
    """The Ray actor prefix, e.g. ``TrainWorker pid=123``; empty when the line has none."""
    m = _RAY_PREFIX.match(line)
    if not m:
        return ""
    return f"{m.group(1)} pid={m.group(2)}" if m.group(2) else m.group(1)


def _to_gib(value: str, unit: str | None) -> float:
    number = float(value)
    unit = (unit or "GiB").upper().replace("I", "")
    scale = {"B": 1 / (1 << 30), "KB": 1 / (1 << 20), "MB": 1 / 1024, "GB": 1.0, "TB": 1024.0}.get(unit, 1.0)
    return round(number * scale, 3)


def _holds_any(literals: list[Literal] | None) -> Callable[[str], bool]:
    """Whether a line holds one of ``literals`` (a caseless one in any case; always True for None: nothing
    is required), the literals folded once and the line lowered at most once."""
    if literals is None:
        return lambda _line: True
    exact = tuple(lit.text for lit in literals if not lit.caseless)
    folded = tuple(lit.text.lower() for lit in literals if lit.caseless)

    def holds_any(line: str) -> bool:
        for text in exact:
            if text in line:
                return True
        if folded:
            low = line.lower()
            for text in folded:
                if text in low:
                    return True
        return False

    return holds_any


def _plain_match(sig: Signature) -> Callable[[str], bool]:
    """``sig.match`` on the compiled regexes themselves: a line counted by the region loop holds the
    signature's literal, so a lazy pattern's check of its required text would seldom spare the regex."""

    def compiled(rx: Any) -> Any:
        make = getattr(rx, "compiled", None)
        return make() if callable(make) else rx

    searches = tuple(compiled(rx).search for rx in sig.patterns)
    exclude = compiled(sig.exclude).search if sig.exclude is not None else None

    def match(line: str) -> bool:
        if exclude is not None and exclude(line) is not None:
            return False
        for search in searches:
            if search(line) is not None:
                return True
        return False

    return match


def extract_numbers(line: str, extractors: dict[str, list[re.Pattern[str]]]) -> dict[str, Any]:
    """Values named in the catalog's ``extract``; ``*_gib`` values are normalised to GiB."""
    out: dict[str, Any] = {}
    for name, patterns in extractors.items():
        for rx in patterns:
            m = rx.search(line)
            if not m:
                continue
            groups = [g for g in m.groups() if g is not None]
            if not groups:
                continue
            raw = groups[0]
            if name.endswith("_gib"):
                try:
                    out[name] = _to_gib(raw, groups[1] if len(groups) > 1 else None)
                except ValueError:
                    continue
            else:
                try:
                    out[name] = int(raw)
                except ValueError:
                    try:
                        out[name] = float(raw)
                    except ValueError:
                        out[name] = raw.strip()
            break
    return out


_FRAME_LINE = re.compile(r'^\s*File "[^"]+"(?:, line \d+)?,? in ')


def _traceback_above(line: str, before: list[str]) -> list[str] | None:
    """The frame and code lines of the traceback that ends at ``line`` (same process), nearest first."""
    me = process_key(line)
    body: list[str] = []
    for text in reversed(before):
        if process_key(text) != me:
            continue
        bare = _RAY_PREFIX_FULL.sub("", text, count=1) if me else text
        if "Traceback (most recent call last)" in bare:
            return body if any(_FRAME_LINE.match(t) for t in body) else None
        if not bare.startswith((" ", "\t")):  # not a frame or its code: the hit does not end a traceback
            return None
        body.append(bare)
    return None


def infer_phase(catalog: Catalog, line: str, before: list[str], after: list[str]) -> str:
    """Score phase hints around a hit: the hit line counts double, nearer lines more.

    When the hit is the exception that ends a traceback, the traceback's frames say what
    the process was doing (an NCCL timeout raised inside ``update_weights`` happened in
    the weight update, whatever training lines came before): they are scored first, the
    deepest frame weighing most, and the surrounding lines only decide when they say nothing.
    """
    frames = _traceback_above(line, before)
    if frames:
        scores: dict[str, float] = {}
        for distance, text in enumerate(frames):
            weight = 1.0 / (1.0 + distance / 4.0)
            for phase, hints in catalog.phases.items():
                n = sum(1 for h in hints if h.search(text))
                if n:
                    scores[phase] = scores.get(phase, 0.0) + weight * n
        if scores:
            return max(scores.items(), key=lambda kv: kv[1])[0]
    me = process_key(line)
    scores: dict[str, float] = {}
    window = [(0, line)] + [(i + 1, t) for i, t in enumerate(reversed(before))] + [(i + 1, t) for i, t in enumerate(after)]
    for distance, text in window:
        other = process_key(text)
        if me and other and other != me:
            continue
        weight = 2.0 if distance == 0 else 1.0 / (1.0 + distance / 4.0)
        # The Ray prefix ("(TrainWorker pid=1)") is on every line of an actor: matched per line it
        # would outvote what the lines say (a weight update runs inside the trainer actor too).
        body = _RAY_PREFIX_FULL.sub("", text, count=1) if other else text
        for phase, hints in catalog.phases.items():
            n = sum(1 for h in hints if h.search(body))  # several hints on one line = stronger evidence
            if n:
                scores[phase] = scores.get(phase, 0.0) + weight * n
    if me:  # the actor's name is one weak hint, counted once
        actor = me.split(" pid=")[0]
        for phase, hints in catalog.phases.items():
            if any(h.search(actor) for h in hints):
                scores[phase] = scores.get(phase, 0.0) + 1.0
    if not scores:
        return ""
    return max(scores.items(), key=lambda kv: kv[1])[0]


def detect_frameworks(catalog: Catalog, text: str) -> dict[str, int]:
    found = {}
    for name, markers in catalog.frameworks.items():
        n = sum(len(m.findall(text)) for m in markers)
        if n:
            found[name] = n
    return found


# ------------------------------------------------------------------ sources -------


@dataclass
class Source:
    """One input to scan: a confined file path, in-memory text, or a pipe read once (stdin)."""

    name: str
    path: Path | None = None
    data: bytes | None = None
    stream: BinaryIO | None = None


def stream_source(given: str | os.PathLike[str]) -> Source | None:
    """A :class:`Source` for ``-`` (stdin) or a pipe path (``/dev/stdin``, ``<(...)``); else None.

    Pipes are not files in a directory tree, so the confinement roots (which resolve paths
    and refuse anything that is not a regular file) cannot vouch for them; they are taken
    here instead, explicitly: only stdin and FIFOs/sockets the user named, read once, in
    chunks, up to :data:`DEFAULT_MAX_STREAM_BYTES`. Terminals and other devices are refused.
    """
    name = os.fspath(given)
    if name == STDIN:
        stdin = sys.stdin.buffer if sys.stdin is not None and hasattr(sys.stdin, "buffer") else None
        if stdin is None:
            raise UserError("-: no standard input to read")
        try:
            tty = os.isatty(stdin.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):
            tty = False  # an in-memory stdin (tests, embedding): not a terminal
        if tty:
            raise UserError("-: standard input is a terminal; pipe a log in (kubectl logs POD | rlmedic diagnose -)")
        return Source(name="<stdin>", stream=stdin)
    try:
        mode = os.stat(name).st_mode
    except OSError:
        return None  # missing: the confinement layer says so in its own words
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        try:
            # opened without blocking: a named pipe nobody writes to would otherwise hang the open
            # forever; with no writer the reads then end at once (an empty log), with one they block
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
            os.set_blocking(fd, True)
            return Source(name=name, stream=os.fdopen(fd, "rb"))  # the scanner closes it
        except OSError as exc:
            raise UserError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise UserError(f"{name}: is a device, not a log; pipe a log in or name a file")
    return None


class PipeStream(io.RawIOBase):
    """A pipe read once: the bytes already peeked at first, then the rest, up to a cap.

    :attr:`capped` says the cap cut it off (the scan reports the input as truncated).
    """

    def __init__(self, raw: BinaryIO, prefix: bytes, limit: int) -> None:
        self.raw = raw
        self._prefix = prefix
        self.limit = limit
        self.taken = 0
        self.capped = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        room = min(len(view), self.limit - self.taken)
        if room <= 0:
            if self.raw.read(1):
                self.capped = True
            return 0
        if self._prefix:
            n = min(room, len(self._prefix))
            view[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
        else:
            data = self.raw.read(room) if not hasattr(self.raw, "read1") else self.raw.read1(room)  # type: ignore[attr-defined]
            n = len(data)
            view[:n] = data
        self.taken += n
        return n

    def close(self) -> None:
        if self.raw is not getattr(sys.stdin, "buffer", None):
            self.raw.close()
        super().close()


def expand_paths(
    paths: Iterable[str | os.PathLike[str]], confinement: Confinement
) -> tuple[list[Source], list[dict[str, str]]]:
    """Files to scan (directories walked recursively, sorted); escapes are refused."""
    sources: list[Source] = []
    skipped: list[dict[str, str]] = []
    seen: set[Path] = set()
    for given in paths:
        resolved = confinement.existing(given)
        shown = confinement.shown(given)
        if resolved.is_file():
            if resolved not in seen:  # the same file named twice (or also inside a named folder) counts once
                seen.add(resolved)
                sources.append(Source(name=shown, path=resolved))
            continue
        if not resolved.is_dir():
            raise UserError(f"{given}: not a regular file or directory")
        def unlistable(exc: OSError, given: str | os.PathLike[str] = given, resolved: Path = resolved) -> None:
            where = os.path.join(confinement.shown(given), os.path.relpath(exc.filename or resolved, resolved))
            skipped.append({"file": where, "reason": f"cannot list ({exc.strerror or exc})"})

        for root, dirs, files in walk_tree(resolved, onerror=unlistable):  # not os.walk: it recursed
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for fname in sorted(files):
                if fname.startswith("."):
                    continue
                full = Path(root) / fname
                display = os.path.join(shown, os.path.relpath(full, resolved))
                suffix = full.suffix.lower()
                if suffix and suffix not in LOG_SUFFIXES and not re.search(r"\.(?:log|out|err)\.\d+$", fname):
                    skipped.append({"file": display, "reason": "not a log file name"})
                    continue
                try:
                    real = confinement.check(full)
                except AccessDenied:
                    skipped.append({"file": display, "reason": "symlink outside the allowed roots"})
                    continue
                except UserError as exc:  # a symlink loop...
                    skipped.append({"file": display, "reason": str(exc).removeprefix(f"{full}: ")})
                    continue
                if not real.is_file():  # a FIFO, socket or device with a log's name: never opened, but named
                    skipped.append({"file": display, "reason": "not a regular file"})
                    continue
                if real in seen:
                    continue
                seen.add(real)
                sources.append(Source(name=display, path=real))
                if len(sources) > MAX_FILES:
                    raise UserError(f"{given}: more than {MAX_FILES} log files; point at a narrower directory")
    return sources, skipped


def _open_source(src: Source, confinement: Confinement | None) -> tuple[BinaryIO, bool, int, float | None]:
    """(binary stream, is_gzip, size on disk, mtime); gzip is detected by its magic bytes."""
    if src.stream is not None:
        env_cap = os.environ.get("RLMEDIC_MAX_STDIN_BYTES")
        limit = int(env_cap) if env_cap else DEFAULT_MAX_STREAM_BYTES
        prefix = src.stream.read(2)
        while len(prefix) < 2:  # a pipe may hand over a single byte first
            more = src.stream.read(2 - len(prefix))
            if not more:
                break
            prefix += more
        pipe = PipeStream(src.stream, prefix, limit)
        if prefix == b"\x1f\x8b":
            return GzipStream(pipe), True, 0, None  # type: ignore[arg-type,return-value]
        return pipe, False, 0, None  # type: ignore[return-value]
    if src.data is not None:
        raw: BinaryIO = io.BytesIO(src.data)
        size, mtime = len(src.data), None
    else:
        assert src.path is not None and confinement is not None
        raw = confinement.open_binary(src.path)
        st = os.fstat(raw.fileno())
        size, mtime = st.st_size, st.st_mtime
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return GzipStream(raw), True, size, mtime  # type: ignore[return-value]
    return raw, False, size, mtime


#: A gzip member expanding more than this many times its compressed size is cut off
#: (``RLMEDIC_MAX_GZIP_RATIO``): logs compress 5-20x; a decompression bomb 300-1000x.
DEFAULT_MAX_GZIP_RATIO = 100
#: The ratio is judged only past this much output, so a small, very repetitive log passes.
GZIP_RATIO_GRACE = 64 << 20


def _inflater() -> tuple[Callable[..., Any], type[BaseException] | tuple[type[BaseException], ...]]:
    """(decompressobj factory, its error types): ISA-L's (python-isal, ~1.5x zlib) when installed, else zlib's."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.decompressobj, zlib.error
    return isal_zlib.decompressobj, (isal_zlib.error, zlib.error)


def max_gzip_ratio() -> float:
    raw = os.environ.get("RLMEDIC_MAX_GZIP_RATIO", "").strip()
    if not raw:
        return DEFAULT_MAX_GZIP_RATIO
    try:
        value = float(raw)
    except ValueError:
        value = 0
    if not value > 1:
        raise UserError(f"RLMEDIC_MAX_GZIP_RATIO={raw!r}: expected a number above 1 (e.g. 100)")
    return value


class GzipStream(io.RawIOBase):
    """Decompress a gzip file (all its members) as it is read, tolerating a missing end.

    ``gzip.GzipFile`` raises on a stream cut short and throws away what the failing read
    had decompressed; a log gzipped by a run that was killed is exactly that. Here the
    data before the cut comes out, and :attr:`cut` says the end was missing.

    A stream that expands past :func:`max_gzip_ratio` times the compressed bytes read
    (after :data:`GZIP_RATIO_GRACE` of output) stops there: :attr:`bomb` says so, and the
    scan reports the file as read in part. A 3.5 MB bomb of 1 GB stops after 64 MiB.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.cut = False
        self.bomb = False
        self.ratio = max_gzip_ratio()
        self.compressed_in = 0
        self.produced = 0
        self._new, self._errors = _inflater()
        self._z = self._new(wbits=31)
        self._input = b""
        self._output = b""
        self._ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._output and not self._ended:
            if not self._input:
                self._input = self.raw.read(1 << 16)
                self.compressed_in += len(self._input)
                if not self._input:
                    self._ended = True
                    self.cut = not self._z.eof
                    break
            if self._z.eof:  # one member ended and more input follows: the next member
                self._z = self._new(wbits=31)
            try:
                self._output = self._z.decompress(self._input, max(len(view), 1 << 16))
            except self._errors as exc:
                raise zlib.error(str(exc)) from None
            self._input = self._z.unused_data if self._z.eof else self._z.unconsumed_tail
            self.produced += len(self._output)
            if self.produced > GZIP_RATIO_GRACE and self.produced > self.ratio * max(self.compressed_in, 1):
                self.bomb = self._ended = True  # what came out so far is still scanned
        n = min(len(view), len(self._output))
        view[:n] = self._output[:n]
        self._output = self._output[n:]
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


# ------------------------------------------------------------------ scanner -------


class Scanner:
    """Scan sources for catalog signatures; feed stats lines to ``on_metric``."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        on_metric: Callable[[int, int, str], None] | None = None,
        on_table: Callable[[int, int, str], None] | None = None,
        on_step: Callable[[int, int, int, int], None] | None = None,
        engine: str | None = None,
        max_bytes: int | None = None,
        chunk: int = CHUNK,
    ) -> None:
        self.catalog = catalog
        self.on_metric = on_metric
        self.on_table = on_table  # whole stats tables (rows with "│"), when the collector takes them
        # AReaL's step lines as (file, line, step, total), read off their bytes: one a training step, so a
        # dense log has tens of thousands (~4 us each saved against decoding and parsing them as text)
        self.on_step = on_step
        self.engine = make_engine(catalog.all_literals(), engine)
        # one object for "stats line only", so the region loop tells its reports apart by identity
        self._owners: list[frozenset[str]] = [_METRIC_ONLY if o == _METRIC_ONLY else o for o in self.engine.owners]
        self.max_bytes = max_bytes if max_bytes is not None else max_scan_bytes()
        self.chunk = max(chunk, 2 * (KEEP_BEFORE + AFTER_RESERVE))
        self.groups: dict[tuple[str, int, str, str], HitGroup] = {}
        self._phased: dict[tuple[str, int], int] = {}
        # file -> {a signature's own literal owner set: (signature, its group)} for the signatures whose later
        # hits in that file are only counted (see _count_only); the region loop counts those on its own
        self._counted_only: dict[int, dict[frozenset[str], tuple[Signature, HitGroup, Callable[[str], bool]]]] = {}
        self._last_phase: dict[tuple[str, int], str] = {}
        repeated = catalog.common_extract.get("repeated")
        self._repeated = {"repeated": repeated} if repeated else {}
        # a counted-only line runs the "repeated" extractor only if its required text is there
        # (~10% of a warning-dense scan went to that search on lines without it)
        found = [required_literals(rx.pattern) for rx in repeated or []]
        self._may_repeat = _holds_any(
            None if any(lits is None for lits in found) else [lit for lits in found for lit in lits or []]
        )
        self.bytes_read = 0
        self.truncated = False
        self._metric_lines: dict[tuple[str, int], int] = {}  # ("lines"|"tables", file) -> met so far (the budgets)
        self._budget_at: dict[tuple[str, int], int] = {}  # ("lines"|"tables", file) -> file offset where it ran out
        self._metric_texts = [((lit.text.lower() if lit.caseless else lit.text).encode(), lit.caseless)
                              for lit in catalog.metric_literals]
        self._skeletons: dict[tuple[frozenset[str], bytes], bool] = {}  # see _cannot_match
        # the owner sets of signature literals alone (no stats line, no nan): the region loop looks a line
        # holding only one of them up in the skeleton cache first (a frozenset is keyed as the set of ids it is)
        self._refused_alone = {o for o in self._owners if not o & {"#metric", "#nonfinite"}}
        # a signature -> the owner set of the literals it owns alone, where it has any (see _counted_only)
        self._own_literal = {next(iter(o)): o for o in self._refused_alone if len(o) == 1}

    # -- public ------------------------------------------------------------------

    def scan(self, sources: list[Source], confinement: Confinement | None = None) -> ScanResult:
        workers = self._parallel_workers(sources)
        if workers > 1:
            result = self._scan_parallel(sources, confinement, workers)
            if result is not None:
                return result
        return self._scan_here(sources, confinement)

    def _scan_here(self, sources: list[Source], confinement: Confinement | None = None) -> ScanResult:
        files: list[FileInfo] = []
        skipped: list[dict[str, str]] = []
        for src in sources:
            info = FileInfo(name=src.name, index=len(files), path=str(src.path or ""))
            if self.truncated:
                skipped.append({"file": src.name, "reason": "scan byte cap reached"})
                continue
            try:
                stream, info.gzip, info.size, info.mtime = _open_source(src, confinement)
            except UserError as exc:  # one unreadable rank log must not hide the others
                skipped.append({"file": src.name, "reason": str(exc).removeprefix(f"{src.path}: ")})
                continue
            try:
                with stream:
                    self._scan_stream(stream, info)
            except (OSError, EOFError, zlib.error) as exc:
                skipped.append({"file": src.name, "reason": f"unreadable ({exc})"})
                continue
            if info.binary:
                skipped.append({"file": src.name, "reason": "binary file"})
                continue
            files.append(info)
        self._finish()
        return ScanResult(files, self.groups, self.engine.name, skipped, self.bytes_read, self.truncated)

    # -- several files on several cores -----------------------------------------------

    def _collector(self) -> Any:
        """The MetricCollector both callbacks belong to (None when there are no callbacks); False: something else."""
        from rlmedic.tools.logs.metrics import MetricCollector

        owners = {id(getattr(cb, "__self__", cb)): getattr(cb, "__self__", None)
                  for cb in (self.on_metric, self.on_table) if cb is not None}
        if not owners:
            return None
        owner = next(iter(owners.values()))
        return owner if len(owners) == 1 and isinstance(owner, MetricCollector) else False

    def _parallel_workers(self, sources: list[Source]) -> int:
        """How many processes to scan ``sources`` with (1: here, in this process).

        Several files (a folder of rank logs) of :data:`PARALLEL_MIN_BYTES` or more in
        all, on a machine with two cores or more where workers can be forked from this
        process (see :func:`_fork_is_safe`), else with :data:`PARALLEL_MIN_CORES` or more
        (``RLMEDIC_SCAN_PROCESSES=N`` sets the number; 1 turns it off), when the byte cap
        cannot be reached (a file cut by it decides what the next files see) and this
        scanner has seen nothing yet.
        """
        raw = os.environ.get("RLMEDIC_SCAN_PROCESSES", "").strip()
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        # a forked worker starts in milliseconds; one from a fork server imports and loads the catalog
        # again, which on 2 cores ate the gain
        if len(sources) < 2 or cores < 2 or self.groups or self.bytes_read or self.truncated:
            return 1  # one file (the common case) asks no more: _fork_is_safe imports multiprocessing (~10 ms)
        limit = int(raw) if raw.isdigit() else (cores if cores >= PARALLEL_MIN_CORES or _fork_is_safe() else 1)
        if min(limit, cores, len(sources)) < 2:
            return 1
        if any(src.path is None or src.stream is not None or src.data is not None for src in sources):
            return 1
        collector = self._collector()
        if collector is False or (collector is not None and (collector.series or collector.current_step)):
            return 1
        total = worst = 0
        for src in sources:
            try:
                size = os.stat(src.path).st_size  # type: ignore[arg-type]
            except OSError:
                return 1
            total += size
            worst += size * (max_gzip_ratio() if str(src.path).endswith(".gz") else 1)
        if total < PARALLEL_MIN_BYTES or worst >= self.max_bytes:
            return 1
        return min(limit, cores, len(sources))

    def _scan_parallel(self, sources: list[Source], confinement: Confinement | None, workers: int) -> ScanResult | None:
        """Each file scanned by a worker process, merged in file order exactly as one process would have.

        Returns None (the caller scans here instead) when a worker hit a case a merge cannot
        reproduce: a byte cap, a file that broke part-way, the collector-wide metric caps.
        """
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        collector = self._collector()
        if _fork_is_safe():
            # a copy of this process: the catalog, patterns and literal database are loaded already
            context = multiprocessing.get_context("fork")
        elif "forkserver" in multiprocessing.get_all_start_methods():
            # one server imports the scanner once; each worker is a fork of it (no threads of ours copied)
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["rlmedic.tools.logs.scan", "rlmedic.tools.logs.metrics"])
        else:
            context = multiprocessing.get_context("spawn")
        builtin = self.catalog is _builtin_catalog_if_loaded()
        env = {k: v for k, v in os.environ.items() if k.startswith("RLMEDIC_")}  # caps, engine, data dir
        init = (None if builtin else self.catalog, self.engine.name, self.max_bytes, self.chunk,
                collector.config if collector else None, env)
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_init, initargs=init) as pool:
            results = list(pool.map(_worker_scan, sources, [confinement] * len(sources)))
        if any(r["truncated"] for r in results):
            return None
        if any(r["skipped"] and (r["groups"] or (r["metrics"] and r["metrics"]["series"])) for r in results):
            return None  # a file that broke part-way leaves state the next file would have continued from
        if collector is not None and not collector.fits([r["metrics"] for r in results]):
            return None
        files: list[FileInfo] = []
        skipped: list[dict[str, str]] = []
        for r in results:
            index = len(files)  # as in one process: the index of the next file kept
            for (sig, _i, group, phase), grp in r["groups"].items():
                grp.file_index = index
                for hit in (*grp.detailed, *([grp.last] if grp.last else [])):
                    hit.file_index = index
                self.groups[(sig, index, group, phase)] = grp
            if collector is not None:
                collector.absorb(r["metrics"], index)
            self.bytes_read += r["bytes_read"]
            skipped += r["skipped"]
            for info in r["files"]:
                info.index = index
                files.append(info)
        return ScanResult(files, self.groups, self.engine.name, skipped, self.bytes_read, self.truncated)

    # -- the loop ----------------------------------------------------------------

    def _scan_stream(self, stream: BinaryIO, info: FileInfo) -> None:
        # a plain file smaller than a chunk gets a buffer of its size (zeroing 8 MB cost a small log's
        # diagnose ~6 ms); one that grows meanwhile is read on in more rounds, as any file past a chunk
        room_for = self.chunk if not info.size or info.gzip else min(self.chunk, info.size + 1)
        buf = bytearray(room_for + KEEP_BEFORE + AFTER_RESERVE)
        view = memoryview(buf)
        filled = 0  # bytes valid in buf
        proc = 0  # where unscanned text starts in buf
        line_no = 1  # line number at buf[proc]
        first = True
        eof = False
        try:
            while not eof:
                room = len(buf) - filled
                want = min(room, max(0, self.max_bytes - self.bytes_read))
                if room == 0:
                    n = -1  # only unscanned text in the buffer (one enormous line): scan it before reading on
                else:
                    n = _fill(stream, view, filled, want, info) if want and not info.partial else 0
                if n == 0:
                    eof = True
                    if want == 0 and room > 0 and not info.partial and _has_more(stream):
                        info.truncated = self.truncated = True  # the byte cap stopped the read, not the end of the file
                elif n > 0:
                    filled += n
                    info.bytes_read += n
                    self.bytes_read += n
                if first:
                    first = False
                    if looks_binary(bytes(buf[: min(filled, 8192)])):
                        info.binary = True
                        return
                    info.head = bytes(buf[: min(filled, HEAD_BYTES)]).decode("utf-8", errors="replace")
                    info.frameworks = detect_frameworks(self.catalog, info.head)
                if eof:
                    end = filled
                else:
                    limit = filled - AFTER_RESERVE
                    if limit <= proc:  # less than the after-context reserve so far: read on before scanning
                        end = proc
                    else:
                        end = buf.rfind(b"\n", proc, limit) + 1
                        if end <= proc:  # one enormous line: cut it at the limit
                            end = limit
                if end > proc:
                    line_no = self._scan_region(buf, proc, end, filled, line_no, info, eof)
                if eof:
                    info.lines = line_no - 1 if filled and buf[filled - 1 : filled] == b"\n" else line_no
                    if filled == 0:
                        info.lines = 0
                    self._capture_tail(buf, filled, info)
                    break
                keep_from = max(0, end - KEEP_BEFORE)
                if keep_from > 0:
                    # keep whole lines of before-context; inside one enormous line keep its tail,
                    # so the buffer always frees room (else the next read gets no space and the
                    # scan would stop as if the byte cap were reached)
                    newline = buf.find(b"\n", keep_from, end)
                    keep_from = newline + 1 if newline >= 0 else keep_from
                remaining = filled - keep_from
                buf[0:remaining] = buf[keep_from:filled]
                filled, proc = remaining, end - keep_from
        finally:
            view.release()

    def _capture_tail(self, buf: bytearray, filled: int, info: FileInfo) -> None:
        end = filled
        if end and buf[end - 1 : end] == b"\n":
            end -= 1
        lines: list[str] = []
        pos = end
        while len(lines) < TAIL_LINES and pos > 0:
            start = buf.rfind(b"\n", 0, pos) + 1
            lines.append(clean_line(buf[start:pos]))
            pos = start - 1
        lines.reverse()
        last = info.lines
        info.tail = [(last - len(lines) + 1 + i, t) for i, t in enumerate(lines)]
        for _n, text in reversed(info.tail):
            ts = parse_timestamp(text, NO_YEAR)
            if ts:
                info.last_ts = ts
                break

    def _scan_region(
        self, buf: bytearray, start: int, end: int, filled: int, line_no: int, info: FileInfo, eof: bool = False
    ) -> int:
        """Scan ``buf[start:end]`` (whole lines); return the line number at ``end``.

        A file past its budget of stats lines (:data:`METRIC_LINES_FULL`) or of stats tables
        (:data:`METRIC_TABLES_FULL`) has them read only in the region's last part (:meth:`_metric_window`);
        before it, the region is read for signatures, AReaL's step lines and values that are nan or inf.
        """
        fi = info.index
        budget_at = self._budget_at
        lines_from = self._metric_window(buf, start, end, filled, info, eof, "lines") if ("lines", fi) in budget_at else start
        tables_from = self._metric_window(buf, start, end, filled, info, eof, "tables") if ("tables", fi) in budget_at else start
        # where stats lines are not read in full the sparse database leaves them unreported; stats tables
        # read in full there are found below the AReaL step line that comes before each (_table_below)
        sparse_to = lines_from
        matches = self.engine.scan_sparse(buf, start, sparse_to) if sparse_to > start else []
        matches += self.engine.scan(buf, sparse_to, end)
        counted = start
        owners = self._owners
        on_metric = self.on_metric
        on_table = self.on_table
        on_step = self.on_step
        skeletons = self._skeletons
        refused_alone = self._refused_alone
        metric_only = _METRIC_ONLY if on_metric is not None else None
        non_finite = _NON_FINITE_ONLY
        reports_non_finite = self.engine.reports_non_finite
        met = self._metric_lines
        lines_key, tables_key = ("lines", fi), ("tables", fi)
        find = buf.find
        rfind = buf.rfind
        # AReaL's step line where the region is read for signatures only: its numbers, nothing else
        step_idx = self.engine.step_index if on_step is not None and on_metric is not None else -1
        step_numbers = _STEP_NUMBERS.match
        counted_only = self._counted_only.setdefault(fi, {})
        i = 0
        n = len(matches)
        if on_table is not None and on_metric is not None and sparse_to > start and tables_from <= start:
            # a table whose step line ended the previous region starts this one
            found = self._table_below(buf, start - 1, end, filled, line_no, counted, info, eof, matches, 0, tables_from)
            if found is not None:
                line_no, counted, i, tables_from = found
        while i < n:
            pos, idx = matches[i]
            own = owners[idx]
            step_here = idx == step_idx and pos < sparse_to and pos < tables_from
            if step_here or own in counted_only:
                # two hot paths, for a report alone on its line (no other report before the line's end):
                # * an AReaL step line where a long log past its budgets is read for signatures only: what
                #   the stats-line path below does for it, without its branches (no table row; its numbers
                #   go to on_step when they read as the collector reads them);
                # * a hit of a signature that is only counted from now on (a warning printed on every tenth
                #   line), on a line with nothing to clean: matched and counted here, as _handle_line and
                #   _count_only would (their skeleton cache only spares a regex)
                le = find(b"\n", pos, end)
                if le < 0:
                    le = end
                if i + 1 >= n or matches[i + 1][0] >= le:
                    ls = rfind(b"\n", start, pos) + 1
                    if ls < start:
                        ls = start
                    if step_here:
                        m = step_numbers(buf, pos, le)
                        if m is not None and pos - ls < METRIC_LINE_CHARS // 2 \
                                and find(_BAR, ls, ls + 200 if ls + 200 < le else le) < 0 \
                                and find(b"\r", ls, le) < 0 and find(b"\x1b", ls, le) < 0:
                            line_no += count_newlines(buf, b"\n", counted, ls)
                            counted = ls
                            on_step(fi, line_no, int(m[1]), int(m[2]))  # type: ignore[misc]
                            i += 1
                            continue
                    else:
                        raw = buf[ls:le]
                        if b"\x1b" not in raw and b"\r" not in raw:
                            i += 1
                            sig, grp, match = counted_only[own]
                            full = raw.decode("utf-8", errors="replace")
                            if match(full):
                                line_no += count_newlines(buf, b"\n", counted, ls)
                                counted = ls
                                self._count(sig, grp, line_no, full, info.name)
                            continue
            if own is metric_only or own is non_finite:
                # the hot path of a metric-dense log: a line that only names metrics and is no table row
                # read as a table goes to the collector as it is, without building the set of its ids
                le = find(b"\n", pos, end)
                if le < 0:
                    le = end
                nxt = i + 1
                named = own is metric_only
                forced = not named
                while nxt < n and matches[nxt][0] < le:
                    other = owners[matches[nxt][1]]
                    if other is metric_only:
                        named = True  # the line's other metric names (a key=value line names three or four)
                    elif other is non_finite:
                        forced = True
                    else:
                        break
                    nxt += 1
                if on_metric is not None and (nxt >= n or matches[nxt][0] >= le):
                    ls = buf.rfind(b"\n", start, pos) + 1
                    if ls < start:
                        ls = start
                    row = on_table is not None and find(_BAR, ls, ls + 200 if ls + 200 < le else le) >= 0
                    if not row or pos < tables_from:
                        i = nxt
                        if not named and not self._names_metric(buf, ls, le):
                            continue  # a non-finite value on a line that names no metric
                        if not row and pos >= lines_from:
                            seen = met.get(lines_key, 0) + 1
                            met[lines_key] = seen
                            if seen > METRIC_LINES_FULL and lines_key not in budget_at:
                                lines_from = self._spent(buf, le, end, filled, info, eof, "lines")
                        else:
                            step_line = find(_STEP_LINE, ls, le) >= 0
                            if not (forced or step_line or (not reports_non_finite and _NON_FINITE.search(buf, ls, le))):
                                continue
                            if step_line and pos < sparse_to and pos >= tables_from and on_table is not None:
                                line_no += count_newlines(buf, b"\n", counted, ls)
                                counted = ls
                                on_metric(fi, line_no, metric_text(buf, ls, le))
                                found = self._table_below(buf, le, end, filled, line_no, counted, info, eof, matches, i,
                                                          tables_from)
                                if found is not None:
                                    line_no, counted, i, tables_from = found
                                continue
                        line_no += count_newlines(buf, b"\n", counted, ls)
                        counted = ls
                        if on_step is not None and not row:
                            m = _STEP_NUMBERS.search(buf, ls, le)
                            if m is not None and m.start() - ls < METRIC_LINE_CHARS // 2 and find(b"\r", ls, le) < 0 \
                                    and find(b"\x1b", ls, le) < 0:  # what feed would read off the cleaned text
                                on_step(fi, line_no, int(m[1]), int(m[2]))
                                continue
                        on_metric(fi, line_no, metric_text(buf, ls, le))
                        continue
            ls = buf.rfind(b"\n", start, pos) + 1
            if ls < start:
                ls = start
            le = buf.find(b"\n", pos, end)
            if le < 0:
                le = end
            if own in refused_alone and le - ls <= MAX_LINE_CHARS:
                # signature literals alone on the line, whose skeleton was refused before (see _cannot_match):
                # the line is skipped before any set is built (a literal every step's stats table prints)
                j, key_ids = i + 1, own
                while j < n and matches[j][0] < le and owners[matches[j][1]] in refused_alone:
                    if owners[matches[j][1]] is not key_ids:
                        key_ids = key_ids | owners[matches[j][1]]
                    j += 1
                if j >= n or matches[j][0] >= le:
                    # a skeleton is refused (True) only if it holds no ANSI colour or carriage return
                    if skeletons.get((key_ids, bytes(buf[ls:le]).translate(None, b"0123456789"))) is True:
                        i = j
                        continue
            ids: set[str] = set()
            while i < n and matches[i][0] < le:
                ids |= owners[matches[i][1]]
                i += 1
            nan_here = "#nonfinite" in ids
            if nan_here:
                ids.discard("#nonfinite")
                if "#metric" not in ids and on_metric is not None and self._names_metric(buf, ls, le):
                    ids.add("#metric")
            if not ids:
                continue
            line_no += count_newlines(buf, b"\n", counted, ls)
            counted = ls
            row = on_table is not None and "#metric" in ids and buf.find(_BAR, ls, min(le, ls + 200)) >= 0
            if row and pos >= tables_from:
                # a stats-table row: hand the whole table to the collector at once (one decode, one
                # compiled findall), then go on after it; other signatures' hits inside it still count
                block_end = self._table_end(buf, ls, end)
                if block_end > le:
                    text = buf[ls:block_end].decode("utf-8", errors="replace")
                    if "\x1b" not in text and "\r" not in text:
                        on_table(fi, line_no, text)  # type: ignore[misc]
                        seen = met.get(tables_key, 0) + 1
                        met[tables_key] = seen
                        if seen > METRIC_TABLES_FULL and tables_key not in budget_at:
                            tables_from = self._spent(buf, block_end, end, filled, info, eof, "tables")
                        ids.discard("#metric")
                        if ids:
                            self._handle_line(buf, ls, le, filled, line_no, ids, info)
                        line_no, counted, i = self._literals_inside(buf, matches, i, block_end, start, end, filled,
                                                                    line_no, counted, info)
                        continue
            if on_metric is not None and len(ids) == 1 and "#metric" in ids:
                if pos >= (tables_from if row else lines_from):  # a row read alone: a one-row table, a cut one
                    seen = met.get(lines_key, 0) + 1
                    met[lines_key] = seen
                    if seen > METRIC_LINES_FULL and lines_key not in budget_at:
                        lines_from = self._spent(buf, le, end, filled, info, eof, "lines")
                    on_metric(fi, line_no, metric_text(buf, ls, le))  # a stats line only
                elif buf.find(_STEP_LINE, ls, le) >= 0 or nan_here or (not reports_non_finite and _NON_FINITE.search(buf, ls, le)):
                    # read for signatures only: AReaL's step line (its table takes the step from it) and a
                    # line holding a nan or an inf still go to the collector
                    on_metric(fi, line_no, metric_text(buf, ls, le))
            else:
                self._handle_line(buf, ls, le, filled, line_no, ids, info)
        line_no += count_newlines(buf, b"\n", counted, end)
        return line_no

    def _table_below(
        self, buf: bytearray, le: int, end: int, filled: int, line_no: int, counted: int, info: FileInfo, eof: bool,
        matches: list[tuple[int, int]], i: int, tables_from: int,
    ) -> tuple[int, int, int, int] | None:
        """The stats table under the AReaL step line ending at ``le``, in a part scanned with the sparse
        database (its rows are not reported there): handed to the collector whole, as a reported row
        would have been. Returns (line number, counted-to offset, next match, where tables are read in
        full from) after it, or None when no table follows within three lines."""
        ls = le + 1
        for _ in range(4):  # "Stats (1/1):", the top border, then the first row
            if ls >= end:
                return None
            nl = buf.find(b"\n", ls, end)
            row_end = end if nl < 0 else nl
            if buf.find(_BAR, ls, min(row_end, ls + 200)) >= 0:
                break
            ls = row_end + 1
        else:
            return None
        line_no += count_newlines(buf, b"\n", counted, ls)
        counted = ls
        block_end = self._table_end(buf, ls, end)
        fi = info.index
        if block_end > row_end:
            text = buf[ls:block_end].decode("utf-8", errors="replace")
            if "\x1b" in text or "\r" in text:
                return None
            self.on_table(fi, line_no, text)  # type: ignore[misc]
            key = ("tables", fi)
            seen = self._metric_lines.get(key, 0) + 1
            self._metric_lines[key] = seen
            if seen > METRIC_TABLES_FULL and key not in self._budget_at:
                tables_from = self._spent(buf, block_end, end, filled, info, eof, "tables")
        else:  # a table of one row: read as a line, as the scan does where rows are reported
            self.on_metric(fi, line_no, metric_text(buf, ls, row_end))  # type: ignore[misc]
            block_end = row_end
        line_no, counted, i = self._literals_inside(buf, matches, i, block_end, 0, end, filled, line_no, counted, info)
        return line_no, counted, i, tables_from

    def _literals_inside(
        self, buf: bytearray, matches: list[tuple[int, int]], i: int, block_end: int, lo: int, end: int, filled: int,
        line_no: int, counted: int, info: FileInfo,
    ) -> tuple[int, int, int]:
        """The signature literals inside a stats table handed whole to the collector (rare): each one's line
        is checked as the scan checks any line (the table's own metric and nan/inf hits are left out: the
        table carries them). Returns (line number, counted-to offset, next match)."""
        owners = self._owners
        n = len(matches)
        while i < n and matches[i][0] < block_end:
            pos, idx = matches[i]
            own = owners[idx]
            # most reports in a table are its metric names: told apart by identity, no set built for them
            mids = None if own is _METRIC_ONLY or own is _NON_FINITE_ONLY else own - _METRIC_ONLY - _NON_FINITE_ONLY
            if mids:
                ls = buf.rfind(b"\n", lo, pos) + 1
                le = buf.find(b"\n", pos, end)
                le = end if le < 0 else le
                line_no += count_newlines(buf, b"\n", counted, ls)
                counted = ls
                self._handle_line(buf, ls, le, filled, line_no, set(mids), info)
            i += 1
        return line_no, counted, i

    def _spent(self, buf: bytearray, at: int, end: int, filled: int, info: FileInfo, eof: bool, kind: str) -> int:
        """The file's budget of ``kind`` (lines, tables) ran out at ``buf[at]``: remember where, and return
        where the rest of this region is read in full for them again (see :meth:`_metric_window`)."""
        self._budget_at[(kind, info.index)] = max(1, info.bytes_read - filled + at)
        nl = buf.find(b"\n", at, end)
        return self._metric_window(buf, nl + 1 if nl >= 0 else end, end, filled, info, eof, kind)

    def _metric_window(self, buf: bytearray, start: int, end: int, filled: int, info: FileInfo, eof: bool,
                       kind: str) -> int:
        """Where the part of ``buf[start:end]`` read in full for stats lines or tables (``kind``) starts (a
        line start), the file being past that budget: its last 1/4 while the file is under twice the size
        read when the budget ran out, then 1/16, 1/64... Each doubling of the file is read half as much
        as the one before, so whatever the file's size, all its parts past the budget together cost at most
        half the budget's parsing (halving the share instead cost half the budget per doubling: a
        256 MiB AReaL log read 3,700 tables past its 2,000). The file's last :data:`METRIC_TAIL_FULL` bytes
        are read in full (how the run ends: a streak to the end, the last step). Each series keeps its
        newest points anyway (:data:`~rlmedic.tools.logs.metrics.MAX_POINTS`)."""
        first = info.bytes_read - filled  # the file offset of buf[0]
        stride = 1 << min(20, 2 * ((first + end) // self._budget_at[(kind, info.index)]).bit_length())
        cut = end - (end - start) // stride
        if eof:
            cut = min(cut, end - METRIC_TAIL_FULL)
        elif info.size and not info.gzip:  # a file's size is known: its last stretch is read in full
            cut = min(cut, max(start, info.size - METRIC_TAIL_FULL - first))
        if cut <= start:
            return start
        nl = buf.rfind(b"\n", start, cut)
        return nl + 1 if nl >= 0 else start

    def _names_metric(self, buf: bytearray, ls: int, le: int) -> bool:
        """Whether the line holds one of the catalog's metric literals (a line with a non-finite value,
        found where stats lines are not reported)."""
        line = bytes(buf[ls:le])
        low = line.lower() if any(caseless for _t, caseless in self._metric_texts) else line
        return any(text in (low if caseless else line) for text, caseless in self._metric_texts)

    @staticmethod
    def _table_end(buf: bytearray, ls: int, end: int) -> int:
        """End of the run of table rows starting at ``ls`` (lines with a ``│`` near their start).

        Only whole rows inside the scanned region count; a table cut by the region's end is
        finished by the next region (rows are still read one by one there).
        """
        pos = ls
        rows = 0
        while pos < end and rows < MAX_TABLE_ROWS:
            nl = buf.find(b"\n", pos, end)
            if nl < 0:
                break
            nxt = nl + 1
            if nxt >= end or buf.find(_BAR, nxt, min(end, nxt + 200)) < 0:
                return nl
            pos = nxt
            rows += 1
        return pos - 1 if pos > ls else ls

    # -- one candidate line --------------------------------------------------------

    def _cannot_match(self, raw: bytes, ids: set[str]) -> bool:
        """Whether none of the signatures ``ids`` can match the line ``raw``, judged by the text their
        patterns require on the line with its digits deleted, once per distinct such skeleton.

        A literal that stats print on every step (``timeperf/update_weights`` holds ``update_weight``)
        makes the same line, values aside, a candidate thousands of times; a skeleton seen before
        costs one ``translate`` and one lookup. Lines with ANSI colours or carriage returns (cleaned
        before matching) are not judged here.
        """
        if len(raw) > MAX_LINE_CHARS or b"\x1b" in raw or b"\r" in raw:
            return False
        key = (frozenset(ids), raw.translate(None, b"0123456789"))
        verdict = self._skeletons.get(key)
        if verdict is None:
            if len(self._skeletons) >= MAX_SKELETONS:
                self._skeletons.clear()
            skeleton = key[1].decode("utf-8", errors="replace")
            by_id = self.catalog.by_id
            verdict = self._skeletons[key] = not any(by_id[s].may_match_without_digits(skeleton) for s in ids)
        return verdict

    def _handle_line(
        self, buf: bytearray, ls: int, le: int, filled: int, line_no: int, ids: set[str], info: FileInfo
    ) -> None:
        metric = "#metric" in ids
        if metric:  # a stats line too: it goes to the collector, when there is one, whatever the signatures say
            ids.discard("#metric")
            metric = self.on_metric is not None
        if ids and self._cannot_match(bytes(buf[ls:le]), ids):
            ids = set()
        if not ids and not metric:
            return
        full = clean_line(buf[ls:le], limit=None)  # signatures see the whole line, however long
        text = full if len(full) <= MAX_LINE_CHARS else clean_line(buf[ls:le])
        if metric:
            self.on_metric(info.index, line_no, full[:METRIC_LINE_CHARS])  # type: ignore[misc]
        if not ids:
            return
        by_id = self.catalog.by_id
        cands = [by_id[s] for s in ids] if len(ids) == 1 else sorted((by_id[s] for s in ids), key=lambda s: s.order)
        ctx: tuple[list[str], list[str]] | None = None
        for sig in cands:
            if not sig.match(full):
                continue
            if sig.context:
                if ctx is None:
                    ctx = (
                        [t for _n, t in _lines_before(buf, ls, MATCH_CONTEXT_BEFORE, line_no)],
                        [t for _n, t in _lines_after(buf, le, filled, MATCH_CONTEXT_AFTER, line_no)],
                    )
                me = process_key(text)
                window = [full] + [t for t in ctx[0] + ctx[1] if not me or process_key(t) in ("", me)]
                if not any(rx.search(t) for rx in sig.context for t in window):
                    continue
            self._record(sig, buf, ls, le, filled, line_no, full, info)
            return

    def _record(
        self, sig: Signature, buf: bytearray, ls: int, le: int, filled: int, line_no: int, text: str, info: FileInfo
    ) -> None:
        if self._count_only(sig, line_no, text, info):
            return
        numbers = extract_numbers(text, self.catalog.common_extract)
        numbers.update(extract_numbers(text, sig.extract))
        text = shown_line(text, sig)  # from here on, the evidence shown (a long line cut around its match)
        group = str(numbers.get(sig.group_by, "")) if sig.group_by else ""
        pkey = (sig.id, info.index)
        before: list[tuple[int, str]] | None = None
        after: list[tuple[int, str]] | None = None
        phase = sig.phase if sig.phase != "context" else ""
        if sig.phase == "context":
            done = self._phased.get(pkey, 0)
            if done < PHASED_PER_KEY:
                before = _lines_before(buf, ls, max(PHASE_BEFORE, CONTEXT_BEFORE), line_no)
                after = _lines_after(buf, le, filled, max(PHASE_AFTER, CONTEXT_AFTER), line_no)
                phase = infer_phase(
                    self.catalog, text, [t for _n, t in before[-PHASE_BEFORE:]], [t for _n, t in after[:PHASE_AFTER]]
                )
                self._phased[pkey] = done + 1
                self._last_phase[pkey] = phase
            else:
                phase = self._last_phase.get(pkey, "")
        key = (sig.id, info.index, group, phase)
        grp = self.groups.get(key)
        if grp is None:
            grp = self.groups[key] = HitGroup(sig=sig.id, file_index=info.index, group=group, phase=phase)
        repeated = numbers.get("repeated")
        grp.count += int(repeated) + 1 if isinstance(repeated, int) else 1
        hit = Hit(
            sig=sig.id,
            file=info.name,
            file_index=info.index,
            line=line_no,
            text=text,
            phase=phase,
            group=group,
            numbers=numbers,
            process=process_key(text),
        )
        if len(grp.detailed) < DETAILED_PER_KEY:
            if before is None:
                before = _lines_before(buf, ls, CONTEXT_BEFORE, line_no)
            if after is None:
                after = _lines_after(buf, le, filled, CONTEXT_AFTER, line_no)
            hit.before = before[-CONTEXT_BEFORE:]
            hit.after = after[:CONTEXT_AFTER]
            # an undated line takes the time of the nearest dated line before it from the same process
            # only: in a merged log the line above may be another actor's, which it would not be once
            # the log is split per rank (and the answer must not depend on the layout)
            me = hit.process
            hit.ts = parse_timestamp(text, NO_YEAR) or next(
                (ts for _n, t in reversed(hit.before) if process_key(t) == me and (ts := parse_timestamp(t, NO_YEAR))),
                None,
            )
            self._note_frameworks(info, [t for _n, t in hit.before] + [text])
            grp.detailed.append(hit)
        else:
            hit.ts = parse_timestamp(text, NO_YEAR)
        grp.last = hit
        grp.pending = None

    def _count_only(self, sig: Signature, line_no: int, full: str, info: FileInfo) -> bool:
        """Count a hit whose group already holds its detailed hits; build its :class:`Hit` only if it stays last.

        A warning printed on every tenth line (SGLang's KV-cache retractions) is recorded
        thousands of times, and only the count and the last one are kept: extracting
        numbers and parsing the timestamp of each would cost more than the scan itself.
        :meth:`_finish` builds the last one exactly as :meth:`_record` would have.
        Signatures grouped by an extracted value, or extracting ``repeated`` themselves,
        take the full path.
        """
        if sig.group_by or "repeated" in sig.extract:
            return False
        if sig.phase == "context":
            pkey = (sig.id, info.index)
            if self._phased.get(pkey, 0) < PHASED_PER_KEY:
                return False
            phase = self._last_phase.get(pkey, "")
        else:
            phase = sig.phase
        grp = self.groups.get((sig.id, info.index, "", phase))
        if grp is None or len(grp.detailed) < DETAILED_PER_KEY:
            return False
        if not sig.context and sig.phase != "context" and sig.id in self._own_literal:
            # its hits alone on a line are counted by the region loop from now on
            self._counted_only.setdefault(info.index, {})[self._own_literal[sig.id]] = (sig, grp, _plain_match(sig))
        self._count(sig, grp, line_no, full, info.name)
        return True

    def _count(self, sig: Signature, grp: HitGroup, line_no: int, full: str, name: str) -> None:
        """One more hit of a group past its detailed hits: counted (with the repeats a line says it stands
        for), and kept as the group's last line."""
        repeated = None
        if self._repeated and self._may_repeat(full):
            repeated = extract_numbers(full, self._repeated).get("repeated")
        grp.count += int(repeated) + 1 if isinstance(repeated, int) else 1
        grp.pending = (sig, line_no, full, name)

    def _finish(self) -> None:
        """Build the last hit of each group that :meth:`_count_only` left as a line."""
        for grp in self.groups.values():
            if grp.pending is None:
                continue
            sig, line_no, full, name = grp.pending
            numbers = extract_numbers(full, self.catalog.common_extract)
            numbers.update(extract_numbers(full, sig.extract))
            text = shown_line(full, sig)
            grp.last = Hit(
                sig=sig.id, file=name, file_index=grp.file_index, line=line_no, text=text, phase=grp.phase,
                group="", numbers=numbers, process=process_key(text), ts=parse_timestamp(text, NO_YEAR),
            )
            grp.pending = None

    def _note_frameworks(self, info: FileInfo, lines: list[str]) -> None:
        for name, n in detect_frameworks(self.catalog, "\n".join(lines)).items():
            info.frameworks[name] = info.frameworks.get(name, 0) + n


#: Below this many bytes in all, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 256 << 20
#: Cores a machine needs before files are scanned in parallel when workers cannot be forked (a server
#: with threads) unless RLMEDIC_SCAN_PROCESSES asks.
PARALLEL_MIN_CORES = 4

_WORKER: dict[str, Any] = {}


def _fork_is_safe() -> bool:
    """Whether scan workers may be forked from this process: only where fork exists and no other
    thread of ours runs (a fork copies the calling thread alone; a lock another thread held
    would stay locked in the child). A server's scans use a fork server instead."""
    import multiprocessing
    import threading

    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _builtin_catalog_if_loaded() -> Catalog | None:
    from rlmedic.tools.logs import signatures

    return signatures.builtin_catalog() if signatures.builtin_catalog.cache_info().currsize else None


def _worker_init(catalog: Catalog | None, engine: str, max_bytes: int, chunk: int, metrics: dict[str, Any] | None,
                 env: dict[str, str]) -> None:
    """A scan worker's setup: the parent's RLMEDIC_* settings, the catalog (the shipped one from the disk cache,
    else the one sent), the engine and the caps."""
    from rlmedic.tools.logs.signatures import builtin_catalog

    for key in [k for k in os.environ if k.startswith("RLMEDIC_") and k not in env]:
        del os.environ[key]
    os.environ.update(env)

    _WORKER.update(catalog=catalog or builtin_catalog(), engine=engine, max_bytes=max_bytes, chunk=chunk, metrics=metrics)


def _worker_scan(src: Source, confinement: Confinement | None) -> dict[str, Any]:
    """Scan one file in a worker process as file 0; the parent renumbers and merges."""
    collector = None
    if _WORKER["metrics"] is not None:
        from rlmedic.tools.logs.metrics import MetricCollector

        collector = MetricCollector(_WORKER["metrics"])
    scanner = Scanner(_WORKER["catalog"], engine=_WORKER["engine"], max_bytes=_WORKER["max_bytes"], chunk=_WORKER["chunk"],
                      on_metric=collector.feed if collector else None,
                      on_table=collector.feed_table if collector else None,
                      on_step=collector.step_line if collector else None)
    result = scanner._scan_here([src], confinement)
    return {"files": result.files, "groups": result.groups, "skipped": result.skipped, "bytes_read": result.bytes_read,
            "truncated": result.truncated, "metrics": collector.file_state(0) if collector else None}


def _has_more(stream: BinaryIO) -> bool:
    """Whether a stream has at least one more byte (read when the byte cap is reached, to say the scan was cut)."""
    try:
        return bool(stream.read(1))
    except (OSError, EOFError, zlib.error):
        return False


_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


def max_scan_bytes() -> int:
    """The byte cap of one scan: ``RLMEDIC_MAX_SCAN_BYTES`` (bytes, or with a K/M/G/T suffix), else 64 GiB.

    Zero, a negative number or text is a :class:`UserError`: a cap of nothing would scan
    nothing and report "No error found".
    """
    raw = os.environ.get("RLMEDIC_MAX_SCAN_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_SCAN_BYTES
    match = _SIZE.fullmatch(raw.replace("_", ""))
    if not match or len(match.group(1)) > 18:
        raise UserError(f"RLMEDIC_MAX_SCAN_BYTES={raw[:40]!r}: not a number of bytes (e.g. 1000000 or 500M); unset it for no cap")
    value = int(match.group(1)) << (10 * " KMGT".index(match.group(2).upper() or " "))
    if value <= 0:
        raise UserError(f"RLMEDIC_MAX_SCAN_BYTES={raw}: must be more than 0 bytes (0 would scan nothing); unset it for no cap")
    return value


def _fill(stream: BinaryIO, view: memoryview, start: int, want: int, info: FileInfo) -> int:
    """Read up to ``want`` bytes into ``view[start:]`` in pieces; 0 at the end of the stream.

    A stream that breaks part-way (corrupt gzip data, a read error) keeps what came before
    the break: ``info.partial`` says why it stopped. A gzip whose end is missing ends quietly
    (:class:`GzipStream`) and is noted the same way.
    """
    got = 0
    while got < want:
        try:
            n = stream.readinto(view[start + got : start + min(want, got + READ_PIECE)])
        except (OSError, EOFError, zlib.error) as exc:  # a read error, corrupt compressed data
            if not info.bytes_read and not got:
                raise  # nothing readable at all: the caller skips the file
            info.partial = f"the stream breaks after {info.bytes_read + got} bytes ({exc}); the rest was not read"
            break
        if not n:
            if getattr(stream, "bomb", False) and not info.partial:
                info.truncated = True
                info.partial = (
                    f"the gzip stream expands more than {stream.ratio:g}x its compressed size (a decompression bomb?); "  # type: ignore[attr-defined]
                    f"stopped after {stream.produced} bytes (RLMEDIC_MAX_GZIP_RATIO)"  # type: ignore[attr-defined]
                )
            if getattr(stream, "cut", False) and not info.partial:
                info.partial = "the gzip stream ends early (the file was cut off); what was there was scanned"
            pipe = stream if isinstance(stream, PipeStream) else getattr(stream, "raw", None)
            if isinstance(pipe, PipeStream) and pipe.capped:
                info.truncated = True
                info.partial = (
                    f"input read from a pipe stops at the cap of {pipe.limit} bytes (RLMEDIC_MAX_STDIN_BYTES); "
                    "the rest was not read"
                )
            break
        got += n
    return got


def _lines_before(buf: bytearray, ls: int, count: int, line_no: int) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pos = ls - 1  # the newline ending the previous line
    while len(out) < count and pos > 0:
        start = buf.rfind(b"\n", 0, pos) + 1
        out.append((line_no - len(out) - 1, clean_line(buf[start:pos])))
        pos = start - 1
    out.reverse()
    return out


def _lines_after(buf: bytearray, le: int, filled: int, count: int, line_no: int) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pos = le + 1
    while len(out) < count and pos < filled:
        end = buf.find(b"\n", pos, filled)
        if end < 0:
            end = filled
        out.append((line_no + len(out) + 1, clean_line(buf[pos:end])))
        pos = end + 1
    return out


def iter_text_sources(text: str, name: str) -> Iterator[Source]:
    yield Source(name=name, data=text.encode("utf-8", errors="replace"))
