"""Regexes that compile on first use and know the text every match needs.

A log scan runs a few hundred patterns (the signature catalog, secret kinds) over lines that
almost never match. Compiling them all costs a cold command tens of milliseconds, and running
one on a line that lacks its fixed words is wasted work. :class:`LazyPattern` compiles on first
use and pickles as its source; its ``search`` first checks, with ``in``, the text the pattern
requires (:func:`required_text`), alternatives included, and answers None without running (or
compiling) the regex when a line lacks it.
"""

from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+: the parser lives in re._parser
    import re._parser as _sre_parse  # type: ignore[import-not-found]
    import re._constants as _sre_const  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - older interpreters
    import sre_constants as _sre_const  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]


def parse(pattern: str) -> Any:
    """The parsed form of ``pattern`` (``re``'s own parser), what :func:`needs_of` walks."""
    return _sre_parse.parse(pattern)


#: What a match of a pattern needs in its string: every item of the tuple, an item being a substring
#: or a tuple of alternatives (each such a tuple again), one of which is enough.
Needs = tuple[Any, ...]


def required_text(pattern: str) -> tuple[Needs, bool]:
    """(what every match of ``pattern`` holds, whether to compare in lower case).

    Where :func:`rlmedic.tools.logs.signatures.required_literals` gives the scanner *one* set of substrings to search for,
    this gives all the text the pattern requires together, alternatives included:
    ``Endpoint: /\\S*update_weights?`` needs ``Endpoint: /`` *and* ``update_weight``, and
    ``(?:[Tt]ime[d ]?[ -]?out|TimeoutError)`` needs ``ime`` and ``out``, or ``TimeoutError``.
    A candidate line is checked with a few ``in`` tests before the regex runs: a stats row
    naming ``timeperf/update_weights`` holds the scanner's literal but none of a weight-update
    error's other parts. Empty (no check) where the pattern sets flags in a group.
    """
    try:
        parsed = parse(pattern)
    except re.error:
        return (), False
    if _local_flags(list(parsed)):
        return (), False
    caseless = bool(parsed.state.flags & re.IGNORECASE)
    needs = needs_of(list(parsed))
    if caseless:
        if not repr(needs).isascii():  # ``ſ`` in a pattern matches ``s``: lower() would not say so
            return (), False
        needs = _lowered(needs)
    return needs, caseless


def _without_digits(needs: Needs) -> Needs:
    return tuple(item.translate(_NO_DIGITS) if isinstance(item, str) else tuple(_without_digits(alt) for alt in item)
                 for item in needs)


_NO_DIGITS = {ord(d): None for d in "0123456789"}


def _lowered(needs: Needs) -> Needs:
    return tuple(item.lower() if isinstance(item, str) else tuple(_lowered(alt) for alt in item) for item in needs)


def _local_flags(seq: Any) -> bool:
    """Whether a group of ``seq`` (at any depth) sets or clears flags, as ``(?i:...)`` does."""
    for op, av in seq:
        if op is _sre_const.SUBPATTERN:
            if av[1] or av[2] or _local_flags(av[-1]):
                return True
        elif op is _sre_const.BRANCH:
            if any(_local_flags(b) for b in av[1]):
                return True
        elif op in _REPEATS:
            if _local_flags(av[2]):
                return True
        elif op in (_sre_const.ASSERT, _sre_const.ASSERT_NOT):
            if _local_flags(av[1]):
                return True
    return False


_REPEATS = {_sre_const.MAX_REPEAT, _sre_const.MIN_REPEAT} | (
    {_sre_const.POSSESSIVE_REPEAT} if hasattr(_sre_const, "POSSESSIVE_REPEAT") else set()
)


def needs_of(seq: Any) -> Needs:
    """What every match of the sequence ``seq`` holds (see :data:`Needs`); runs of one character are left out."""
    LIT, IN = _sre_const.LITERAL, _sre_const.IN
    out: list[Any] = []
    run: list[str] = []

    def close() -> None:
        if len(run) >= 2:
            out.append("".join(run))
        run.clear()

    for op, av in seq:
        if op is LIT:
            run.append(chr(av))
            continue
        if op is IN and len(av) == 1 and av[0][0] is LIT:
            run.append(chr(av[0][1]))
            continue
        close()
        if op is _sre_const.SUBPATTERN:
            out.extend(needs_of(av[-1]))
        elif op is _sre_const.BRANCH:
            alts = tuple(needs_of(b) for b in av[1])
            if all(alts):  # an alternative that needs nothing makes the whole choice free
                out.append(alts)
        elif op in _REPEATS and av[0] >= 1:
            out.extend(needs_of(av[2]))
    close()
    return tuple(out)


#: The characters a case-blind regex matches to an ASCII letter but ``str.lower`` does not turn into
#: it (``ſ`` matches ``s``; ``İ`` lowers to two characters): a line holding one skips the lower-case
#: check (``tests/test_logs_signatures.py`` derives the set from all of Unicode).
ODD_FOLDS = "İıſ"


def _folds_oddly(text: str) -> bool:
    return "ı" in text or "ſ" in text or "İ" in text


def holds(needs: Needs, text: str) -> bool:
    """Whether ``text`` has everything ``needs`` asks for."""
    for item in needs:
        if item.__class__ is str:
            if item not in text:
                return False
        else:
            for alt in item:
                if holds(alt, text):
                    break
            else:
                return False
    return True


class LazyPattern:
    """A validated regex that compiles on first use and pickles as its source.

    The shipped catalog is cached on disk (:func:`builtin_catalog`); unpickling a
    ``re.Pattern`` recompiles it, so a cold ``diagnose`` would still compile every
    pattern of the catalog. A lazy one compiles only the patterns a log makes it use
    (those whose literals occur). It answers like the ``re.Pattern`` it wraps.

    ``search`` on a whole string first checks the text the pattern requires (:func:`required_text`)
    with ``in``: a line that lacks it cannot match, and is answered without running (or compiling)
    the regex. A pattern that ignores case is checked on lines of ASCII only (there ``str.lower``
    folds as the regex does; ``ſ`` matching ``s`` is not ASCII).
    """

    __slots__ = ("pattern", "_flags", "_compiled", "_needs", "_caseless", "_without_digits")

    def __init__(self, pattern: str, flags: int = 0, compiled: re.Pattern[str] | None = None) -> None:
        self.pattern = pattern
        self._flags = flags
        self._compiled = compiled
        self._needs: Needs | None = None
        self._caseless = False
        self._without_digits: Needs | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self._flags)
        return self._compiled

    def _prefilter(self) -> Needs:
        needs = self._needs
        if needs is None:
            needs, self._caseless = required_text(self.pattern) if not self._flags else ((), False)
            self._needs = needs
            # the same with digits deleted (for a line given so), None where a part is not ASCII
            self._without_digits = _without_digits(needs) if repr(needs).isascii() else None
        return needs

    def may_search(self, string: str) -> bool:
        """Whether :meth:`search` could find a match: False only when ``string`` lacks required text."""
        needs = self._prefilter()
        return not needs or self._held(needs, string)

    def may_search_without_digits(self, skeleton: str) -> bool:
        """:meth:`may_search` for a line given with its digits deleted: False still only when the line
        cannot match. The required parts lose their digits too: a line holding ``status=4`` holds
        ``status=`` once its digits are gone, as deleting digits keeps every other run whole."""
        if not self._prefilter():
            return True
        needs = self._without_digits
        return needs is None or self._held(needs, skeleton)

    def _held(self, needs: Needs, text: str) -> bool:
        """:func:`holds`, in lower case for a case-blind pattern; True (no verdict) on a line with a character
        that folds oddly (:data:`ODD_FOLDS`)."""
        if not self._caseless:
            return holds(needs, text)
        return holds(needs, text.lower()) if text.isascii() or not _folds_oddly(text) else True

    def search(self, string: str, *args: Any) -> re.Match[str] | None:
        if not args and not self.may_search(string):
            return None
        return self.compiled().search(string, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled(), name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LazyPattern, (self.pattern, self._flags))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyPattern):
            return (self.pattern, self._flags) == (other.pattern, other._flags)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.pattern, self._flags))

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"


def checked(pattern: str, flags: int = 0) -> LazyPattern:
    """``pattern`` compiled now (``re.error`` for a bad one: a data file's validator says so at once),
    as a :class:`LazyPattern`, so the validated table it sits in pickles as text and a cached table's
    regexes compile only when used."""
    return LazyPattern(pattern, flags, re.compile(pattern, flags))
