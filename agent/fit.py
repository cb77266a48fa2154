"""Which fixes can apply to this case, as exact edits, in order of fit.

A fix proposed by a card, a log signature, a known-issue record or a config rule carries
preconditions that the evidence can contradict: it is written for one framework, it names a
key that framework's config must have, and it moves a value in one direction. This module
drops the fixes the evidence rules out (another framework; a key that framework's config does
not have; a value already at or past the proposal), turns the rest into exact edits from the
value in effect (``set sglang.mem_fraction_static to 0.5 (was 0.85)``), and ranks them: the
edits the config tool made and put in the diff first, then the fixes that act on the root's
own settings, then the rest in the order their sources gave them.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from rlmedic.tools.config.fix import as_number as _number
from rlmedic.types import Fix

#: The verb of a fix's action says which way it moves its value.
_LOWER = re.compile(r"(?i)^\s*(?:lower|reduce|decrease|shrink|cut|limit|cap)\b")
_RAISE = re.compile(r"(?i)^\s*(?:raise|increase|grow|enlarge|extend|lengthen)\b")
_ENABLE = re.compile(r"(?i)^\s*(?:turn on|enable|switch on|use)\b")
_DISABLE = re.compile(r"(?i)^\s*(?:turn off|disable|switch off)\b")

#: verl's Hydra config roots; AReaL's dotted keys; slime's flags (see rlmedic.agent.compose).
_VERL_ROOTS = ("actor_rollout_ref.", "critic.", "trainer.", "reward_model.", "custom_reward_function.",
               "algorithm.", "data.", "ray_init.", "ray_kwargs.", "reward.")  # reward.: verl 0.8+


@dataclass(frozen=True)
class Candidate:
    """A fix and where it came from: ``source`` ranks it (0 = an edit the config tool applied)."""

    fix: Fix
    source: int
    on_root: bool = False
    #: judge its key against the framework's config reference (not a known issue's: those name the keys of
    #: the release they are about)
    schema: bool = True


#: Sources, best first: edits the config tool applied (in the diff), the fix of the known issue that is this
#: exact bug, the root's own fixes, other tools' specific fixes (a leftover pid to kill), related known
#: issues', the playbook card's.
APPLIED, LEADING, ROOT, OTHER, KNOWN, CARD = range(6)


def key_framework(key: str) -> str:
    """The framework a key's shape belongs to: ``slime`` for ``--flags``, ``verl`` under its roots, else ``areal``
    for a dotted key; ``""`` for a bare word."""
    key = key.strip()
    if key.startswith("--"):
        return "slime"
    if "." not in key:
        return ""
    return "verl" if key.lower().startswith(_VERL_ROOTS) else "areal"


def direction(fix: Fix) -> str:
    """``lower``, ``raise``, ``on``, ``off`` or ``""``: which way the fix moves its key."""
    text = fix.action or fix.why
    if _LOWER.search(text):
        return "lower"
    if _RAISE.search(text):
        return "raise"
    if fix.new is True or _ENABLE.search(text):
        return "on"
    if fix.new is False or _DISABLE.search(text):
        return "off"
    if fix.op == "set" and _number(fix.old) is not None and _number(fix.new) is not None:
        return "lower" if _number(fix.new) < _number(fix.old) else "raise"  # type: ignore[operator]
    return ""


def _truthy(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0", "on", "off"):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return None


def contradiction(fix: Fix, framework: str, settings: dict[str, Any], *, schema: bool = True) -> str:
    """Why the evidence rules ``fix`` out ("" when it may apply); ``schema``: judge its key against the
    framework's config reference too."""
    from rlmedic.tools.config.keys import known_key

    if framework and fix.framework and fix.framework not in (framework, "generic"):
        return f"written for {fix.framework}, the run is {framework}"
    key = fix.key.strip()
    if not key:
        return ""
    shape = key_framework(key) if not fix.framework or fix.framework == "generic" else ""
    if framework and shape and shape != framework:
        return f"{key} is a {shape} setting, the run is {framework}"
    if key in settings or not schema:
        pass  # the config in hand has it (a legacy config keeps its legacy names)
    elif framework in ("areal", "slime") and known_key(framework, key) is False:
        return f"{key} is not a setting of {framework}'s config"
    elif not framework and (fix.framework or shape) in ("areal", "slime") and \
            known_key(fix.framework or shape, key) is False:
        return f"{key} is not a setting of {fix.framework or shape}'s config"
    if key not in settings:
        return ""
    now = settings[key]
    way = direction(fix)
    new = fix.new
    if new is not None and (str(now).lower() == str(new).lower()
                            or (_number(now) is not None and _number(now) == _number(new))):
        return f"{key} is already {now}"
    if way in ("on", "off") and (new is None or isinstance(new, bool)):
        state = _truthy(now)
        if state is not None and state == (way == "on"):
            return f"{key} is already {now}"
        return ""
    if new is None:
        return ""
    a, b = _number(now), _number(new)
    if a is not None and b is not None:
        if way == "lower" and a <= b:
            return f"{key} is already {now}, at or below {new}"
        if way == "raise" and a >= b:
            return f"{key} is already {now}, at or above {new}"
    return ""


def exact(fix: Fix, settings: dict[str, Any]) -> Fix:
    """``fix`` as an edit from the value in effect, when the config sets its key and it proposes a value."""
    key = fix.key.strip()
    if fix.op != "action" or not key or key not in settings:
        return fix
    now = settings[key]
    if fix.new is None:  # no value proposed: say the one in effect
        text = str(fix)
        where = f"({key})"
        return dataclasses.replace(fix, action=text.replace(where, f"({key}, now {now})") if where in text
                                   else f"{text} ({key} is now {now})")
    why = fix.why or re.sub(r"\s*\([^)]*\)\s*$", "", fix.action).strip()
    return dataclasses.replace(fix, op="add_flag" if key.startswith("--") and False else "set", old=now,
                               action="", why=why)


def _tier(c: Candidate, has_root: bool) -> float:
    """An applied edit on the root's setting leads; with a root, other applied edits (a timeout, a path rule)
    come after the root's own fixes and the leading known issue's."""
    if c.source == APPLIED:
        return 0 if (c.on_root or not has_root) else ROOT + 0.5
    return c.source


def rank(candidates: Iterable[Candidate], framework: str, settings: dict[str, Any], *,
         limit: int | None = None, has_root: bool = False) -> tuple[list[Fix], list[tuple[Fix, str]]]:
    """The fixes that may apply, best first (one per key and per text), and the ones dropped with why."""
    kept: list[tuple[tuple[float, int, int], Fix]] = []
    dropped: list[tuple[Fix, str]] = []
    keys: set[str] = set()
    texts: set[str] = set()
    for n, c in enumerate(candidates):
        why = contradiction(c.fix, framework, settings, schema=c.schema)
        if why:
            dropped.append((c.fix, why))
            continue
        fix = exact(c.fix, settings)
        key = fix.key.strip()
        text = str(fix)
        if (key and key in keys) or text in texts or not text.strip():
            continue
        if key:
            keys.add(key)
        texts.add(text)
        in_config = 0 if key and key in settings else 1
        kept.append(((_tier(c, has_root), in_config if c.source > APPLIED else 0, n), fix))
    kept.sort(key=lambda item: item[0])
    fixes = [f for _, f in kept]
    return (fixes[:limit] if limit else fixes), dropped


def candidates(groups: Sequence[tuple[int, Iterable[Fix]]], root_keys: set[str] = frozenset()) -> list[Candidate]:
    """Candidates from (source, fixes) groups; a fix on one of ``root_keys`` acts on the root's own setting."""
    out: list[Candidate] = []
    for source, fixes in groups:
        for fix in fixes:
            out.append(Candidate(fix=fix, source=source, on_root=bool(fix.key and fix.key in root_keys),
                                 schema=source not in (LEADING, KNOWN)))
    return out
