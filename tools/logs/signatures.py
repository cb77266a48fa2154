"""The log-signature catalog: load ``signatures.yaml``, validate it, compile it.

The catalog is data so that adding a failure means adding a YAML entry, not code.
This module turns it into compiled regexes plus the *literal prefilter*: for every
pattern a small set of substrings, at least one of which occurs in any line the pattern
matches. The scanner looks only for those literals (fast, one pass) and runs the
regexes only on the few lines that contain one.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlmedic.errors import UserError
from rlmedic.types import CATEGORIES, SEVERITIES, Citation, Fix

try:  # Python 3.11+: the parser lives in re._parser
    import re._parser as _sre_parse  # type: ignore[import-not-found]
    import re._constants as _sre_const  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - older interpreters
    import sre_constants as _sre_const  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

CATALOG_PATH = Path(__file__).parent / "signatures.yaml"

#: Lower rank = more fundamental. The root cause is the earliest finding of lowest rank.
ROLE_RANK: dict[str, int] = {"cause": 0, "crash": 1, "cascade": 2, "symptom": 3, "wrapper": 4, "marker": 9}
PHASES: tuple[str, ...] = ("initialization", "generation", "training", "weight_update", "data_transfer", "resume")

_SIG_KEYS = {
    "id", "title", "category", "severity", "role", "card", "patterns", "literals", "context", "exclude", "phase",
    "by_phase", "extract", "detail", "explain", "fixes", "transient", "examples", "group_by",
}
_FIX_KEYS = {"action", "key", "flag", "value", "framework", "why", "when"}
_MIN_LITERAL = 3


@dataclass(frozen=True)
class Literal:
    """A prefilter substring; ``caseless`` when its pattern ignores case."""

    text: str
    caseless: bool = False

    def variants(self) -> tuple[str, ...]:
        """Spellings a case-sensitive search must try (for the pure-Python engine)."""
        if not self.caseless:
            return (self.text,)
        t = self.text
        return tuple(dict.fromkeys((t, t.lower(), t.upper(), t.capitalize(), t.title(), t[:1].lower() + t[1:])))


@dataclass
class Signature:
    id: str
    title: str
    category: str
    severity: str
    role: str
    card: str
    patterns: list[re.Pattern[str]]
    literals: list[Literal]
    context: list[re.Pattern[str]] = field(default_factory=list)
    exclude: re.Pattern[str] | None = None
    phase: str = ""  # "", a fixed phase, or "context"
    by_phase: dict[str, dict[str, Any]] = field(default_factory=dict)
    extract: dict[str, list[re.Pattern[str]]] = field(default_factory=dict)
    detail: str = ""
    explain: str = ""
    fixes: list[tuple[str, Fix]] = field(default_factory=list)  # (when, fix): the fix applies when ``when`` holds
    transient: bool = False
    examples: list[str] = field(default_factory=list)
    group_by: str = ""
    order: int = 0

    @property
    def rank(self) -> int:
        return ROLE_RANK[self.role]

    def match(self, line: str) -> bool:
        if self.exclude is not None and self.exclude.search(line):
            return False
        return any(p.search(line) for p in self.patterns)

    def may_match_without_digits(self, skeleton: str) -> bool:
        """False only when no line whose digits deleted give ``skeleton`` can match (see
        :meth:`LazyPattern.may_search_without_digits`): the scanner asks once per distinct skeleton."""
        for p in self.patterns:
            check = getattr(p, "may_search_without_digits", None)
            if check is None or check(skeleton):
                return True
        return False

    def card_for(self, phase: str = "", framework: str = "") -> tuple[str, str]:
        """The (card id, category) for a phase and framework, after ``by_phase``."""
        card: Any = self.card
        category = self.category
        override = self.by_phase.get(phase) if phase else None
        if override:
            card = override.get("card", card)
            category = override.get("category", category)
        if isinstance(card, dict):
            card = card.get(framework) or card.get("default") or self.card
        return str(card), category


@dataclass
class Catalog:
    signatures: list[Signature]
    phases: dict[str, list[re.Pattern[str]]]
    frameworks: dict[str, list[re.Pattern[str]]]
    common_extract: dict[str, list[re.Pattern[str]]]
    metrics: dict[str, Any]
    metric_literals: list[Literal]
    by_id: dict[str, Signature] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id = {s.id: s for s in self.signatures}

    def all_literals(self) -> list[tuple[Literal, frozenset[str]]]:
        """Each distinct literal with the ids it stands for (``"#metric"`` for stats lines)."""
        owners: dict[Literal, set[str]] = {}
        for sig in self.signatures:
            for lit in sig.literals:
                owners.setdefault(lit, set()).add(sig.id)
        for lit in self.metric_literals:
            owners.setdefault(lit, set()).add("#metric")
        return [(lit, frozenset(ids)) for lit, ids in owners.items()]


# ------------------------------------------------------------------ literals ------


def _any_of(needs: Needs) -> list[str] | None:
    """The best set of substrings one of which every match holds, from what it needs (:func:`_needs`):
    the set whose shortest member is longest, then the smallest; the first such in pattern order."""
    best: list[str] | None = None

    def score(cands: list[str]) -> tuple[int, int]:
        return (min(len(c) for c in cands), -len(cands))

    for item in needs:
        if isinstance(item, str):
            cands: list[str] | None = [item]
        else:
            sets = [_any_of(alt) for alt in item]
            cands = sorted({x for one in sets for x in one}) if all(sets) else None  # type: ignore[union-attr]
        if cands and (best is None or score(cands) > score(best)):
            best = cands
    return best


def required_literals(pattern: str) -> list[Literal] | None:
    """Substrings one of which every match of ``pattern`` contains; ``None`` if none found."""
    parsed = _sre_parse.parse(pattern)
    caseless = bool(parsed.state.flags & re.IGNORECASE)
    lits = _any_of(_needs(list(parsed)))
    if not lits or min(len(x) for x in lits) < _MIN_LITERAL:
        return None
    return [Literal(x, caseless) for x in lits]


def _minimal(literals: list[Literal]) -> list[Literal]:
    """Drop literals that contain another literal of the set (the shorter one suffices)."""
    out = []
    for lit in literals:
        if not any(
            o is not lit and o.caseless == lit.caseless and o.text != lit.text and o.text in lit.text for o in literals
        ):
            out.append(lit)
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------ loading -------


#: What a match of a pattern needs in its string: every item of the tuple, an item being a substring
#: or a tuple of alternatives (each such a tuple again), one of which is enough.
Needs = tuple[Any, ...]


def required_text(pattern: str) -> tuple[Needs, bool]:
    """(what every match of ``pattern`` holds, whether to compare in lower case).

    Where :func:`required_literals` gives the scanner *one* set of substrings to search for,
    this gives all the text the pattern requires together, alternatives included:
    ``Endpoint: /\\S*update_weights?`` needs ``Endpoint: /`` *and* ``update_weight``, and
    ``(?:[Tt]ime[d ]?[ -]?out|TimeoutError)`` needs ``ime`` and ``out``, or ``TimeoutError``.
    A candidate line is checked with a few ``in`` tests before the regex runs: a stats row
    naming ``timeperf/update_weights`` holds the scanner's literal but none of a weight-update
    error's other parts. Empty (no check) where the pattern sets flags in a group.
    """
    try:
        parsed = _sre_parse.parse(pattern)
    except re.error:
        return (), False
    if _local_flags(list(parsed)):
        return (), False
    caseless = bool(parsed.state.flags & re.IGNORECASE)
    needs = _needs(list(parsed))
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


def _needs(seq: Any) -> Needs:
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
            out.extend(_needs(av[-1]))
        elif op is _sre_const.BRANCH:
            alts = tuple(_needs(b) for b in av[1])
            if all(alts):  # an alternative that needs nothing makes the whole choice free
                out.append(alts)
        elif op in _REPEATS and av[0] >= 1:
            out.extend(_needs(av[2]))
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
        if not needs:
            return True
        if not self._caseless:
            return holds(needs, string)
        if string.isascii() or not _folds_oddly(string):
            return holds(needs, string.lower())
        return True

    def may_search_without_digits(self, skeleton: str) -> bool:
        """:meth:`may_search` for a line given with its digits deleted: False still only when the line
        cannot match. The required parts lose their digits too: a line holding ``status=4`` holds
        ``status=`` once its digits are gone, as deleting digits keeps every other run whole."""
        if not self._prefilter():
            return True
        needs = self._without_digits
        if needs is None:
            return True
        if not self._caseless:
            return holds(needs, skeleton)
        if skeleton.isascii() or not _folds_oddly(skeleton):
            return holds(needs, skeleton.lower())
        return True

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


def _compile(where: str, pattern: Any) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise UserError(f"{where}: a pattern must be a non-empty string")
    try:
        compiled = re.compile(pattern)  # validated now, whatever happens later
    except re.error as exc:
        raise UserError(f"{where}: invalid regex {pattern!r} ({exc})") from exc
    return LazyPattern(pattern, 0, compiled)  # type: ignore[return-value]


def _compile_list(where: str, value: Any) -> list[re.Pattern[str]]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise UserError(f"{where}: expected a regex or a list of regexes")
    return [_compile(where, v) for v in value]


def _fix(sid: str, fx: dict[str, Any]) -> Fix:
    """A signature's fix, rendered once: the action with its key (or flag) and value, cited to the catalogue entry."""
    key, flag, value = fx.get("key") or "", fx.get("flag") or "", fx.get("value")
    setting = ""
    if key:
        setting = f"{key}={value}" if value is not None else key
    elif flag:
        setting = f"{flag} {value}" if value is not None else flag
    text = str(fx["action"]).rstrip(".")
    action = f"{text} ({setting})" if setting and setting not in text else text
    return Fix(action=action, key=key or flag, new=value, why=fx.get("why") or "", framework=fx.get("framework") or "",
               citations=(Citation.doc("rlmedic/tools/logs/signatures.yaml", sid),))


def _parse_signature(raw: Any, where: str, order: int) -> Signature:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a signature must be a mapping")
    sid = raw.get("id")
    if not isinstance(sid, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", sid):
        raise UserError(f"{where}: 'id' must be a lowercase slug, got {sid!r}")
    where = f"{where} ({sid})"
    unknown = sorted(set(raw) - _SIG_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
    for key in ("title", "category", "severity", "role", "card", "patterns"):
        if not raw.get(key):
            raise UserError(f"{where}: missing '{key}'")
    if raw["category"] not in CATEGORIES:
        raise UserError(f"{where}: category {raw['category']!r} is not in the vocabulary")
    if raw["severity"] not in SEVERITIES:
        raise UserError(f"{where}: severity {raw['severity']!r} is not one of {', '.join(SEVERITIES)}")
    if raw["role"] not in ROLE_RANK:
        raise UserError(f"{where}: role {raw['role']!r} is not one of {', '.join(ROLE_RANK)}")
    phase = raw.get("phase") or ""
    if phase and phase != "context" and phase not in PHASES:
        raise UserError(f"{where}: phase {phase!r} is not 'context' or one of {', '.join(PHASES)}")
    by_phase = raw.get("by_phase") or {}
    if not isinstance(by_phase, dict) or any(p not in PHASES or not isinstance(v, dict) for p, v in by_phase.items()):
        raise UserError(f"{where}: 'by_phase' must map phases to {{card, category}}")
    for override in by_phase.values():
        if override.get("category") and override["category"] not in CATEGORIES:
            raise UserError(f"{where}: by_phase category {override['category']!r} is not in the vocabulary")

    patterns = _compile_list(f"{where} patterns", raw["patterns"])
    if raw.get("literals"):
        texts = raw["literals"]
        if not isinstance(texts, list) or not all(isinstance(t, str) and len(t) >= _MIN_LITERAL for t in texts):
            raise UserError(f"{where}: 'literals' must be strings of at least {_MIN_LITERAL} characters")
        caseless = all(p.flags & re.IGNORECASE for p in patterns)
        literals = [Literal(t, caseless) for t in texts]
    else:
        literals = []
        for p in patterns:
            found = required_literals(p.pattern)
            if found is None:
                raise UserError(
                    f"{where}: cannot derive a prefilter literal from {p.pattern!r}; add 'literals:' to the entry"
                )
            literals += found
    extract: dict[str, list[re.Pattern[str]]] = {}
    for name, rx in (raw.get("extract") or {}).items():
        extract[str(name)] = _compile_list(f"{where} extract.{name}", rx)
    fixes = []
    for i, fx in enumerate(raw.get("fixes") or []):
        if isinstance(fx, str):
            fx = {"action": fx}
        if not isinstance(fx, dict) or not fx.get("action") or set(fx) - _FIX_KEYS:
            raise UserError(f"{where}: fix #{i + 1} needs an 'action' and only {', '.join(sorted(_FIX_KEYS))}")
        fixes.append((str(fx.get("when") or ""), _fix(sid, fx)))
    if raw.get("group_by") and raw["group_by"] not in extract:
        raise UserError(f"{where}: group_by {raw['group_by']!r} must name an 'extract' entry")
    examples = raw.get("examples") or []
    if not isinstance(examples, list) or not examples or not all(isinstance(e, str) for e in examples):
        raise UserError(f"{where}: 'examples' must list at least one log line")
    return Signature(
        id=sid,
        title=str(raw["title"]).strip(),
        category=raw["category"],
        severity=raw["severity"],
        role=raw["role"],
        card=raw["card"],
        patterns=patterns,
        literals=_minimal(literals),
        context=_compile_list(f"{where} context", raw.get("context")),
        exclude=_compile(f"{where} exclude", raw["exclude"]) if raw.get("exclude") else None,
        phase=phase,
        by_phase=by_phase,
        extract=extract,
        detail=str(raw.get("detail") or ""),
        explain=" ".join(str(raw.get("explain") or "").split()),
        fixes=fixes,
        transient=bool(raw.get("transient")),
        examples=examples,
        group_by=str(raw.get("group_by") or ""),
        order=order,
    )


def parse_catalog(data: Any, where: str = "signatures.yaml") -> Catalog:
    """Validate a catalog mapping; raise :class:`UserError` naming the entry and field."""
    if not isinstance(data, dict) or not isinstance(data.get("signatures"), list):
        raise UserError(f"{where}: expected a mapping with a 'signatures' list")
    sigs = [_parse_signature(raw, f"{where} signature #{i + 1}", i) for i, raw in enumerate(data["signatures"])]
    seen: set[str] = set()
    for s in sigs:
        if s.id in seen:
            raise UserError(f"{where}: duplicate signature id {s.id!r}")
        seen.add(s.id)
    phases = {p: _compile_list(f"{where} phases.{p}", v) for p, v in (data.get("phases") or {}).items()}
    bad = [p for p in phases if p not in PHASES]
    if bad:
        raise UserError(f"{where}: unknown phase(s) {', '.join(bad)}")
    frameworks = {f: _compile_list(f"{where} frameworks.{f}", v) for f, v in (data.get("frameworks") or {}).items()}
    common = {n: _compile_list(f"{where} common_extract.{n}", v) for n, v in (data.get("common_extract") or {}).items()}
    metrics = data.get("metrics") or {}
    mlits = [Literal(t) for t in metrics.get("literals") or []]
    for s in sigs:
        for lit in s.literals:
            hot = next((m.text for m in mlits if lit.text.lower() in m.text.lower()), None)
            if hot:
                raise UserError(
                    f"{where}: signature {s.id!r}: literal {lit.text!r} also occurs in the metric keyword {hot!r}, so every "
                    "stats line would run this signature's regex; list rarer 'literals:' that the pattern requires"
                )
    return Catalog(
        signatures=sigs,
        phases=phases,
        frameworks=frameworks,
        common_extract=common,
        metrics=metrics,
        metric_literals=_minimal(mlits),
    )


def load_catalog(path: Path | None = None) -> Catalog:
    path = path or CATALOG_PATH
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: invalid YAML ({exc})") from exc
    return parse_catalog(data, str(path))


@functools.cache
def builtin_catalog() -> Catalog:
    """The shipped catalog, loaded once per process and validated once per edit.

    The parsed catalog is cached on disk (:mod:`rlmedic.diskcache`) under the hash of the
    YAML and of the code that parses it; its patterns compile on first use.
    """
    import pickle

    from rlmedic import diskcache, types

    key = diskcache.digest([CATALOG_PATH.read_bytes(), Path(__file__).read_bytes(), Path(types.__file__).read_bytes()])
    return diskcache.cached("catalog", key, lambda: load_catalog(CATALOG_PATH), pickle.dumps, pickle.loads)
