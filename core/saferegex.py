"""Hand-written regexes (known-issue records, a team's own records) that run in linear time.

Python's ``re`` backtracks. ``A.*(?:\\n.*)*B`` scans to the end of the text from every ``A``
(quadratic: a crafted 192 KB log held ``ask`` for minutes, a plausible 195 KB RL log for 17 s),
and ``^(\\w+\\s?)+$`` is exponential on a 45-character line. A record's patterns therefore run on
RE2 (``google-re2``), an automaton that reads each character of the text a bounded number of
times whatever the pattern, so matching a log costs time in proportion to its length; and
:func:`problem` refuses, with one line that says what to write instead, the shapes that make
no sense in a log pattern on any engine:

* a repetition without bound of something that can match a line break (``(?:.|\\n)*``,
  ``[\\s\\S]*``, ``(\\n.*)*``): it ties a word on line 1 to one on line 90,000 of a log. Bound it
  in lines: ``(?:\\n.*){0,40}`` (at most 40 lines further down);
* a repetition without bound inside another one (``(\\w+\\s?)+``): catastrophic on a
  backtracking engine, and never needed;
* what RE2 cannot run in linear time (back-references, look-arounds, conditionals), counts over
  1000 (RE2's own limit: write ``(?:.*\\n){0,20}`` for "within 20 lines", not ``[\\s\\S]{0,1500}``),
  and patterns longer than :data:`MAX_PATTERN_CHARS`.

:func:`compile` returns a :class:`LinearPattern` with the few methods the matcher uses
(``search``, and a match's ``string``, ``start``, ``end``, ``span``, ``group``). It encodes a text
to UTF-8 once for all the patterns run on it, not once per pattern.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any

#: Characters a record's pattern may have (a record's patterns are a line of a log, not a grammar).
MAX_PATTERN_CHARS = 2000
#: The largest count RE2 accepts in ``{m,n}``.
MAX_COUNT = 1000
#: Memory RE2 may use for one pattern's program and its automaton (bytes); over it the automaton
#: is rebuilt as it goes (still linear), and a pattern whose program alone does not fit is refused.
MAX_MEM = 32 << 20


class UnsafePattern(ValueError):
    """A pattern :func:`problem` refuses (the message is one line, fit for a record's problem list)."""


# ------------------------------------------------------------------------- the static check


try:
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

_MAXREPEAT = _c.MAXREPEAT
_DOTALL = _c.SRE_FLAG_DOTALL
_NEWLINE_CATEGORIES = {"CATEGORY_SPACE", "CATEGORY_NOT_DIGIT", "CATEGORY_NOT_WORD", "CATEGORY_LINEBREAK"}
_SPACE_CODES = frozenset(map(ord, " \t\n\r\f\v"))
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def _set_has_newline(items: list[tuple[Any, Any]]) -> bool:
    negate, hit = False, False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            hit |= arg == 10
        elif name == "RANGE":
            hit |= arg[0] <= 10 <= arg[1]
        elif name == "CATEGORY":
            hit |= str(arg) in _NEWLINE_CATEGORIES
    return hit != negate


def _can_cross_lines(items: Any, dotall: bool) -> bool:
    """Whether some string the parsed ``items`` match holds a line break."""
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            if arg == 10:
                return True
        elif name == "NOT_LITERAL":
            if arg != 10:
                return True
        elif name == "ANY":
            if dotall:
                return True
        elif name == "IN":
            if _set_has_newline(arg):
                return True
        elif name in _REPEATS:
            if arg[1] > 0 and _can_cross_lines(arg[2], dotall):
                return True
        elif name == "SUBPATTERN":
            _group, add, remove, sub = arg
            inner = (dotall or bool(add & _DOTALL)) and not (remove & _DOTALL)
            if _can_cross_lines(sub, inner):
                return True
        elif name == "BRANCH":
            if any(_can_cross_lines(b, dotall) for b in arg[1]):
                return True
        elif name == "ATOMIC_GROUP":
            if _can_cross_lines(arg, dotall):
                return True
    return False


def _only_space(items: Any) -> bool:
    """Whether the parsed ``items`` match whitespace only (``\\s*`` between a name and its value may
    span lines: it cannot tie one line's text to another's)."""
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            ok = arg in _SPACE_CODES
        elif name == "IN":
            ok = all((str(o) == "LITERAL" and a in _SPACE_CODES) or (str(o) == "CATEGORY" and str(a) == "CATEGORY_SPACE")
                     for o, a in arg)
        elif name in _REPEATS:
            ok = _only_space(arg[2])
        elif name == "SUBPATTERN":
            ok = _only_space(arg[3])
        elif name == "BRANCH":
            ok = all(_only_space(b) for b in arg[1])
        else:
            ok = False
        if not ok:
            return False
    return True


_NESTED = ("a repetition without bound inside another one (like (\\w+\\s?)+) takes exponential time on a "
           "backtracking engine; repeat one thing ([\\w\\s]+) or bound the outer count")


def _has_unbounded(items: Any) -> bool:
    """Whether the parsed ``items`` hold a repetition without bound."""
    for op, arg in items:
        name = str(op)
        if name in _REPEATS:
            if arg[1] == _MAXREPEAT or _has_unbounded(arg[2]):
                return True
        elif name == "SUBPATTERN":
            if _has_unbounded(arg[3]):
                return True
        elif name == "BRANCH":
            if any(_has_unbounded(b) for b in arg[1]):
                return True
        elif name in ("ATOMIC_GROUP",) and _has_unbounded(arg):
            return True
    return False


def _walk(items: Any, dotall: bool) -> str | None:
    """The first refused shape in the parsed ``items`` (one line), or None."""
    for op, arg in items:
        name = str(op)
        if name in _REPEATS:
            low, high, body = arg
            unbounded = high == _MAXREPEAT
            if max(low, 0 if unbounded else high) > MAX_COUNT:
                return (f"a count over {MAX_COUNT} ({{{low},{'' if unbounded else high}}}); for \"within N lines\" "
                        "write (?:.*\\n){0,N}.*")
            if unbounded and _has_unbounded(body):
                return _NESTED
            if unbounded and _can_cross_lines(body, dotall) and not _only_space(body):
                return ("a repetition without bound (*, + or {n,}) of something that can match a line break "
                        "(like (?:.|\\n)*, [\\s\\S]*, (\\n.*)* or [^)]*) ties line 1 to the end of the log and is quadratic; "
                        "bound it in lines, (?:\\n.*){0,40}, or keep a class on its line, [^)\\n]*")
            found = _walk(body, dotall)
        elif name == "SUBPATTERN":
            _group, add, remove, sub = arg
            found = _walk(sub, (dotall or bool(add & _DOTALL)) and not (remove & _DOTALL))
        elif name == "BRANCH":
            found = next((f for b in arg[1] if (f := _walk(b, dotall))), None)
        elif name == "ATOMIC_GROUP":
            found = _walk(arg, dotall)
        elif name in ("ASSERT", "ASSERT_NOT"):
            return "look-arounds ((?=...), (?!...), (?<=...), (?<!...)) cannot run in linear time (RE2 has none)"
        elif name in ("GROUPREF", "GROUPREF_EXISTS"):
            return "back-references and conditionals (\\1, (?P=name), (?(1)...)) cannot run in linear time (RE2 has none)"
        else:
            found = None
        if found:
            return found
    return None


@functools.lru_cache(maxsize=4096)
def problem(pattern: str) -> str | None:
    """Why ``pattern`` may not be a record's regex (one line), or None when it is fine."""
    import re

    if len(pattern) > MAX_PATTERN_CHARS:
        return f"{len(pattern)} characters, longer than a record's pattern may be ({MAX_PATTERN_CHARS})"
    try:
        parsed = _p.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"does not compile: {exc}"
    reason = _walk(parsed, bool(parsed.state.flags & _DOTALL))
    if reason:
        return reason
    try:
        _compile(pattern)
    except UnsafePattern as exc:
        return str(exc)
    return None


def check(pattern: str) -> None:
    """Raise :class:`UnsafePattern` with :func:`problem`'s line when ``pattern`` is refused."""
    reason = problem(pattern)
    if reason:
        raise UnsafePattern(reason)


# ------------------------------------------------------------------------- the engine


@dataclass(frozen=True)
class Found:
    """A match of a :class:`LinearPattern`, in the positions of the ``str`` searched."""

    string: str
    _start: int
    _end: int

    def start(self, group: int = 0) -> int:
        return self._start

    def end(self, group: int = 0) -> int:
        return self._end

    def span(self, group: int = 0) -> tuple[int, int]:
        return self._start, self._end

    def group(self, group: int = 0) -> str:
        return self.string[self._start:self._end]


class _Encoded(threading.local):
    """The last text encoded in this thread (the matcher runs hundreds of patterns over one text)."""

    text: str | None = None
    data: bytes = b""
    ascii: bool = True


_LAST = _Encoded()


def _encoded(text: str) -> tuple[bytes, bool]:
    last = _LAST
    if last.text is not text:
        data = text.encode("utf-8", "surrogatepass")
        last.text, last.data, last.ascii = text, data, len(data) == len(text)
    return last.data, last.ascii


class LinearPattern:
    """A compiled record pattern (RE2): ``search`` costs time linear in the text, whatever the pattern."""

    def __init__(self, pattern: str, compiled: Any) -> None:
        self.pattern = pattern
        self._re2 = compiled

    def search(self, text: str) -> Found | None:
        data, ascii = _encoded(text)
        m = self._re2.search(data)
        if m is None:
            return None
        start, end = m.span()
        if not ascii:  # byte offsets -> character offsets
            start = len(data[:start].decode("utf-8", "surrogatepass"))
            end = start + len(data[m.start():m.end()].decode("utf-8", "surrogatepass"))
        return Found(text, start, end)

    def __repr__(self) -> str:
        return f"LinearPattern({self.pattern!r})"


@functools.lru_cache(maxsize=1)
def _options() -> Any:
    import re2

    options = re2.Options()
    options.max_mem = MAX_MEM
    options.log_errors = False  # a refused pattern is our one line, not RE2's log on stderr
    return options


@functools.lru_cache(maxsize=8192)
def _compile(pattern: str) -> Any:
    import re2

    try:
        return re2.compile(pattern.encode("utf-8", "surrogatepass"), _options())
    except re2.error as exc:
        text = str(exc.args[0] if exc.args else exc)
        text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        raise UnsafePattern(f"RE2 cannot run it in linear time: {text.strip(chr(39) + 'b')}") from None


def compile(pattern: str) -> LinearPattern:  # noqa: A001 - the module's one verb, like re.compile
    """``pattern`` on RE2, after :func:`check` (raises :class:`UnsafePattern` with one line)."""
    check(pattern)
    return LinearPattern(pattern, _compile(pattern))
