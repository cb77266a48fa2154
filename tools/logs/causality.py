"""Which failure caused which, across ranks, files and processes: the rules in ``causality.yaml``.

Root selection by role alone (a "cause" before a "crash" before a "cascade") breaks when a
rank reports the loss of a peer as an error of its own: the rank that timed out first and
took its process down is the root, the "remote process exited" on every other rank is what
followed. This module reads the table that says which failures are such consequences
(*effects*), which earlier failures explain them (*rules*, with a time window and "on
another rank"), and which phase a collective runs in. The diagnosis applies it; nothing
here knows a signature by name.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rlmedic.datafiles import builtin, read_yaml
from rlmedic.errors import UserError
from rlmedic.lazyregex import checked
from rlmedic.tools.logs.signatures import PHASES

TABLE_PATH = Path(__file__).parent / "causality.yaml"
_TOP_KEYS = {"version", "effects", "rules", "collectives", "waiting"}
_EFFECT_KEYS = {"id", "signatures", "text"}
_RULE_KEYS = {"id", "effect", "cause", "elsewhere", "within_s", "explain"}
_CAUSE_KEYS = {"signatures", "roles"}
_COLLECTIVE_KEYS = {"ops", "phase", "replaces", "unless"}


@dataclass(frozen=True)
class Effect:
    id: str
    signatures: frozenset[str]
    text: tuple[re.Pattern[str], ...]

    def matches(self, sig: str, texts: list[str]) -> bool:
        return sig in self.signatures or any(rx.search(t) for rx in self.text for t in texts)


@dataclass(frozen=True)
class Rule:
    id: str
    effect: str
    signatures: frozenset[str]
    roles: frozenset[str]
    elsewhere: bool
    within_s: float
    explain: str

    def can_cause(self, sig: str, role: str) -> bool:
        return sig in self.signatures or role in self.roles


@dataclass(frozen=True)
class Collective:
    ops: frozenset[str]
    phase: str
    replaces: frozenset[str]
    unless: re.Pattern[str] | None


@dataclass(frozen=True)
class Table:
    effects: dict[str, Effect]
    rules: tuple[Rule, ...]
    collectives: tuple[Collective, ...]
    waiting: frozenset[str] = frozenset()
    waiting_explain: str = ""

    def silent_ranks(self, sig: str, reported: set[int], run_ranks: set[int]) -> str:
        """The sentence naming the ranks that did not report a timeout the others did, or ''."""
        if sig not in self.waiting or not reported or not self.waiting_explain:
            return ""
        silent = sorted(run_ranks - reported)
        if not silent or len(silent) >= len(run_ranks | reported):
            return ""
        one = len(silent) == 1
        names = f"rank {silent[0]}" if one else "ranks " + ", ".join(map(str, silent[:8])) + (", ..." if len(silent) > 8 else "")
        return (self.waiting_explain.replace("{silent}", names[0].upper() + names[1:])
                .replace("{them}", "it" if one else "them").replace("{its}", "its" if one else "their"))

    def collective_phase(self, op: str, phase: str, context: str) -> str:
        """The phase a collective named ``op`` ran in, given the phase the lines around it suggested."""
        for c in self.collectives:
            if op.upper() in c.ops and phase in c.replaces and not (c.unless and c.unless.search(context)):
                return c.phase
        return phase


@dataclass
class Event:
    """What the rules need to know of one finding: what it is, where and when it was first seen."""

    key: Any  # the caller's handle
    sig: str
    role: str
    texts: list[str]
    ts: datetime | None
    files: set[str] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)
    processes: set[str] = field(default_factory=set)
    file: str = ""
    line: int = 0
    #: the time was printed on the line itself; otherwise it is the nearest earlier dated line's,
    #: a lower bound (a Python traceback has no time of its own)
    ts_explicit: bool = True


@dataclass
class Link:
    """``effect`` followed ``cause`` (by ``after_s`` seconds) as ``rule`` describes."""

    cause: Event
    effect: Event
    rule: Rule
    after_s: float | None


def _strings(value: Any, where: str, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
        raise UserError(f"{where}: {key} must be a string or a list of strings")
    return [str(v) for v in value]


def _regexes(value: Any, where: str, key: str) -> tuple[re.Pattern[str], ...]:
    try:
        return tuple(checked(v) for v in _strings(value, where, key))
    except re.error as exc:
        raise UserError(f"{where}: invalid regex in {key} ({exc})") from exc


def _check_keys(raw: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a mapping")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
    return raw


def parse_table(data: Any, where: str = "causality.yaml", known_signatures: set[str] | None = None) -> Table:
    """Validate the table; ``known_signatures`` (ids that exist) catches a misspelt signature id."""
    data = _check_keys(data, _TOP_KEYS, where)
    effects: dict[str, Effect] = {}
    for i, raw in enumerate(data.get("effects") or []):
        here = f"{where} effect #{i + 1}"
        raw = _check_keys(raw, _EFFECT_KEYS, here)
        eid = raw.get("id")
        if not isinstance(eid, str) or not eid:
            raise UserError(f"{here}: missing 'id'")
        if eid in effects:
            raise UserError(f"{here}: duplicate effect id {eid!r}")
        sigs = frozenset(_strings(raw.get("signatures"), here, "signatures"))
        text = _regexes(raw.get("text"), here, "text")
        if not sigs and not text:
            raise UserError(f"{here} ({eid}): an effect needs signatures or text")
        _known(sigs, known_signatures, here)
        effects[eid] = Effect(eid, sigs, text)
    rules: list[Rule] = []
    for i, raw in enumerate(data.get("rules") or []):
        here = f"{where} rule #{i + 1}"
        raw = _check_keys(raw, _RULE_KEYS, here)
        rid = raw.get("id")
        if not isinstance(rid, str) or not rid:
            raise UserError(f"{here}: missing 'id'")
        if rid in {r.id for r in rules}:
            raise UserError(f"{here}: duplicate rule id {rid!r}")
        if raw.get("effect") not in effects:
            raise UserError(f"{here} ({rid}): effect {raw.get('effect')!r} is not one of the effects")
        cause = _check_keys(raw.get("cause") or {}, _CAUSE_KEYS, f"{here} cause")
        sigs = frozenset(_strings(cause.get("signatures"), here, "cause.signatures"))
        roles = frozenset(_strings(cause.get("roles"), here, "cause.roles"))
        if not sigs and not roles:
            raise UserError(f"{here} ({rid}): cause needs signatures or roles")
        bad_roles = sorted(r for r in roles if r not in ("cause", "crash", "cascade"))
        if bad_roles:
            raise UserError(f"{here} ({rid}): a cause role must be cause, crash or cascade, not {', '.join(bad_roles)}")
        _known({s for s in sigs if not s.startswith("traceback:")}, known_signatures, here)
        within = raw.get("within_s", 600)
        if not isinstance(within, (int, float)) or within <= 0:
            raise UserError(f"{here} ({rid}): within_s must be a positive number of seconds")
        rules.append(Rule(rid, raw["effect"], sigs, roles, bool(raw.get("elsewhere", True)), float(within),
                          " ".join(str(raw.get("explain") or "").split())))
    collectives: list[Collective] = []
    for i, raw in enumerate(data.get("collectives") or []):
        here = f"{where} collective #{i + 1}"
        raw = _check_keys(raw, _COLLECTIVE_KEYS, here)
        ops = frozenset(o.upper() for o in _strings(raw.get("ops"), here, "ops"))
        if not ops:
            raise UserError(f"{here}: ops is empty")
        if raw.get("phase") not in PHASES:
            raise UserError(f"{here}: phase {raw.get('phase')!r} is not one of {', '.join(PHASES)}")
        replaces = frozenset(_strings(raw.get("replaces", [""]), here, "replaces"))
        bad = sorted(p for p in replaces if p and p not in PHASES)
        if bad:
            raise UserError(f"{here}: replaces names unknown phase(s) {', '.join(bad)}")
        unless = _regexes(raw.get("unless"), here, "unless")
        collectives.append(Collective(ops, raw["phase"], replaces, unless[0] if unless else None))
    waiting = _check_keys(data.get("waiting") or {}, {"signatures", "explain"}, f"{where} waiting")
    wait_sigs = frozenset(_strings(waiting.get("signatures"), f"{where} waiting", "signatures"))
    _known(wait_sigs, known_signatures, f"{where} waiting")
    return Table(effects, tuple(rules), tuple(collectives), wait_sigs, " ".join(str(waiting.get("explain") or "").split()))


def _known(sigs: set[str] | frozenset[str], known: set[str] | None, where: str) -> None:
    if known is None:
        return
    missing = sorted(s for s in sigs if s not in known)
    if missing:
        raise UserError(f"{where}: unknown signature id(s) {', '.join(missing)}")


@functools.cache
def builtin_table() -> Table:
    """The shipped table, checked against the shipped signatures once per edit of either."""
    from rlmedic.tools.logs import signatures
    from rlmedic.tools.logs.signatures import builtin_catalog

    return builtin("causality", [TABLE_PATH, signatures.CATALOG_PATH], [__file__],
                   lambda: parse_table(read_yaml(TABLE_PATH), str(TABLE_PATH), set(builtin_catalog().by_id)))


def _elsewhere(cause: Event, effect: Event) -> bool:
    """The effect was seen somewhere the cause was not: another file, rank or process."""
    if effect.files - cause.files:
        return True
    if effect.ranks and cause.ranks and effect.ranks - cause.ranks:
        return True
    return bool(effect.processes and cause.processes and effect.processes - cause.processes)


def _after(cause: Event, effect: Event) -> float | None | bool:
    """Seconds from the cause to the effect; None when the effect may have followed but how long after is
    not known; False when the effect provably came first (or cannot be placed at all).

    A time a line only inherited from an earlier dated line is a lower bound: a traceback printed
    after "11:13:58 INFO ..." happened at 11:13:58 or later, so it does not prove it came before
    a failure printed with 11:16:00 on another rank.
    """
    if cause.file == effect.file and cause.line > effect.line and not (cause.ts_explicit and effect.ts_explicit):
        return False  # in one file, line order is time order
    if cause.ts is not None and effect.ts is not None:
        seconds = (effect.ts - cause.ts).total_seconds()
        if cause.ts_explicit and effect.ts_explicit:
            return seconds
        if seconds >= 0:
            return seconds if cause.ts_explicit else None  # the cause may be later than its lower bound
        return None if not effect.ts_explicit else False  # only an explicit effect time proves it came first
    if cause.ts is None and effect.ts is None:
        return None if cause.file != effect.file or cause.line < effect.line else False
    return None if not (effect.ts_explicit and effect.ts is not None) else False


def link(events: list[Event], table: Table | None = None) -> dict[int, Link]:
    """The link of each event (by its index in ``events``) that an earlier event explains.

    An effect is explained by the earliest event that a rule lets cause it; effects never
    explain each other, so a chain of lost peers always leads back to what failed first.
    """
    table = table or builtin_table()
    effect_of = {i: [e for e in table.effects.values() if e.matches(ev.sig, ev.texts)] for i, ev in enumerate(events)}
    ordered = sorted(range(len(events)), key=lambda i: (events[i].ts is None, events[i].ts or datetime.min, events[i].line))
    links: dict[int, Link] = {}
    for i, ev in enumerate(events):
        kinds = {e.id for e in effect_of[i]}
        if not kinds:
            continue
        for j in ordered:
            if j == i or effect_of[j]:
                continue
            cause = events[j]
            rule = next(
                (r for r in table.rules if r.effect in kinds and r.can_cause(cause.sig, cause.role)
                 and (not r.elsewhere or _elsewhere(cause, ev))),
                None,
            )
            if rule is None:
                continue
            after = _after(cause, ev)
            if after is False or (isinstance(after, float) and not 0 <= after <= rule.within_s):
                continue
            if after is None and not _only_candidate(cause, ev, events, effect_of, j):
                continue  # an unknown order links only when nothing else elsewhere could explain it
            links[i] = Link(cause, ev, rule, after if isinstance(after, float) else None)
            break
    return links


def _only_candidate(cause: Event, effect: Event, events: list[Event], effect_of: dict[int, list[Effect]], j: int) -> bool:
    """No failure other than ``cause`` (and no other effect) was seen outside the effect's places."""
    for k, other in enumerate(events):
        if k == j or other is effect or effect_of[k]:
            continue
        if _elsewhere(other, effect):
            return False
    return True


def describe_after(seconds: float | None) -> str:
    if seconds is None:
        return "afterwards"
    if seconds < 1:
        return "under a second later"
    if seconds < 120:
        return f"{seconds:.0f} s later"
    return f"{seconds / 60:.0f} min later"

