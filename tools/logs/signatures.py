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

from rlmedic.datafiles import builtin, read_yaml
from rlmedic.errors import UserError
from rlmedic.lazyregex import LazyPattern, Needs, needs_of, parse
from rlmedic.types import CATEGORIES, SEVERITIES, Citation, Fix


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
        # a literal and its caseless twin are one search: the caseless one finds every place the other
        # does (a literal only picks lines; each signature's regex decides), and a line holding it is
        # then reported once, not twice (``update_weight`` is in every AReaL step's stats table)
        caseless = {lit.text.lower(): lit for lit in owners if lit.caseless}
        for lit in [lit for lit in owners if not lit.caseless and lit.text.lower() in caseless]:
            owners[caseless[lit.text.lower()]] |= owners.pop(lit)
        return [(lit, frozenset(ids)) for lit, ids in owners.items()]


# ------------------------------------------------------------------ literals ------


def _any_of(needs: Needs) -> list[str] | None:
    """The best set of substrings one of which every match holds, from what it needs (:func:`rlmedic.lazyregex.needs_of`):
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
    parsed = parse(pattern)
    caseless = bool(parsed.state.flags & re.IGNORECASE)
    lits = _any_of(needs_of(list(parsed)))
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
    return parse_catalog(read_yaml(path), str(path))


@functools.cache
def builtin_catalog() -> Catalog:
    """The shipped catalog, loaded once per process and validated once per edit.

    The parsed catalog is cached on disk (:func:`rlmedic.datafiles.builtin`) under the hash of the
    YAML and of the code that parses it; its patterns compile on first use.
    """
    from rlmedic import types

    return builtin("catalog", [CATALOG_PATH], [__file__, str(types.__file__)],
                   lambda: load_catalog(CATALOG_PATH))
