"""The metric vocabulary: which key of which framework is which concept (``vocabulary.yaml``).

verl logs ``actor/entropy``, slime ``train/entropy_loss``, AReaL ``ppo_actor/update/entropy/avg``:
one concept, three names. Detectors ask for a concept; :meth:`Vocabulary.pick` answers with the
run's key for it, trying the run's own framework first, then the others, then generic names.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlmedic.datafiles import builtin, read_yaml
from rlmedic.errors import UserError
from rlmedic.lazyregex import LazyPattern

FRAMEWORKS = ("verl", "slime", "areal")
DIRECTIONS = ("up", "down", "none")


@dataclass(frozen=True)
class Concept:
    name: str
    label: str
    direction: str
    #: framework (or "generic") -> compiled patterns, most specific first
    patterns: dict[str, tuple[re.Pattern[str], ...]]
    sources: dict[str, str]


class Vocabulary:
    def __init__(self, data: dict[str, Any]) -> None:
        validate(data)
        self.step_keys: tuple[str, ...] = tuple(data["step_keys"])
        self.concepts: dict[str, Concept] = {}
        for name, spec in data["concepts"].items():
            pats = {fw: tuple(LazyPattern(p) for p in entry["patterns"]) for fw, entry in spec["keys"].items()
                    if "absent" not in entry}
            self.concepts[name] = Concept(name, spec["label"], spec["direction"], pats,
                                          {fw: entry.get("source", "") for fw, entry in spec["keys"].items()})
        self.framework_rules = {fw: tuple(LazyPattern(p) for p in pats) for fw, pats in data["frameworks"].items()}
        #: text logs' series name -> the concept whose keys feed it
        self.log_series: dict[str, str] = dict(data.get("log_series") or {})

    def log_kinds(self) -> list[tuple[str, list[re.Pattern[str]]]]:
        """Text logs' series: ``(name, patterns)`` in the order a key is tried, anchored at both ends for
        ``search``: every series' framework patterns (verl's, slime's, AReaL's, in :meth:`pick`'s order) before
        any generic one, so ``rollout_corr/kl`` is verl's log-prob gap before it is a generic KL, as a run's
        :meth:`assign` would have it. A name may come twice (its framework patterns, its generic ones)."""
        out = []
        for generic in (False, True):
            for kind, concept in self.log_series.items():
                c = self.concepts[concept]
                fws = ("generic",) if generic else FRAMEWORKS
                pats = [rx for fw in fws for rx in c.patterns.get(fw, ())]
                if pats:
                    out.append((kind, [LazyPattern(rf"^(?:{rx.pattern})\Z") for rx in pats]))
        return out

    def log_frameworks(self) -> list[tuple[str, list[re.Pattern[str]]]]:
        """The key names only one framework writes, anchored for ``search`` (text logs' framework_of)."""
        return [(fw, [LazyPattern(rf"^(?:{rx.pattern})\Z") for rx in rxs]) for fw, rxs in self.framework_rules.items()]

    @functools.cached_property
    def _known(self) -> tuple[re.Pattern[str], ...]:
        """Key patterns as one regex each, most telling first: the frameworks' concept keys, the keys only one
        framework writes, the generic concept keys (:meth:`export_key`)."""
        specific = [rx.pattern for c in self.concepts.values() for fw, rxs in c.patterns.items() if fw != "generic"
                    for rx in rxs]
        owned = [rx.pattern for rxs in self.framework_rules.values() for rx in rxs]
        generic = [rx.pattern for c in self.concepts.values() for rx in c.patterns.get("generic", ())]
        return tuple(re.compile("|".join(f"(?:{p})" for p in pats)) for pats in (specific, owned, generic))

    @functools.cached_property
    def _concept_keys(self) -> re.Pattern[str]:
        return re.compile("|".join(f"(?:{rx.pattern})" for c in self.concepts.values() for rxs in c.patterns.values()
                                   for rx in rxs))

    def known(self, key: str) -> bool:
        """Whether any concept may read ``key`` (a reader parses only such columns: what the checks can use)."""
        return self._concept_keys.fullmatch(key) is not None

    def export_key(self, name: str) -> str:
        """A key whose ``/`` a file name turned into ``_`` (TensorBoard's CSV download: ``actor_entropy``),
        restored where a ``/`` makes a key the vocabulary knows (``actor/entropy``); else ``name``."""
        parts = name.split("_")
        if "/" in name or len(parts) < 2 or len(parts) > 8:
            return name
        best: tuple[int, str] | None = None
        for mask in range(1 << (len(parts) - 1)):
            cand = parts[0] + "".join(("/" if mask >> i & 1 else "_") + p for i, p in enumerate(parts[1:]))
            rank = next((r for r, rx in enumerate(self._known) if rx.fullmatch(cand)), None)
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, cand)
                if rank == 0:
                    break
        return best[1] if best else name

    def framework_of(self, keys: list[str]) -> str:
        """The framework whose own key names the run carries most of ("" when none)."""
        counts = {fw: sum(1 for k in keys if any(rx.fullmatch(k) for rx in rxs)) for fw, rxs in self.framework_rules.items()}
        best = max(counts, key=lambda fw: counts[fw])
        return best if counts[best] else ""

    def pick(self, concept: str, keys: list[str], framework: str = "") -> str | None:
        """The run's key for ``concept``: its framework's names first, then the others', then generic ones."""
        c = self.concepts[concept]
        order = [framework] if framework in c.patterns else []
        order += [fw for fw in FRAMEWORKS if fw in c.patterns and fw != framework] + ["generic"]
        for fw in order:
            for rx in c.patterns.get(fw, ()):
                for k in keys:
                    if rx.fullmatch(k):
                        return k
        return None

    def assign(self, keys: list[str], framework: str = "") -> dict[str, str]:
        """concept -> key for every concept the run has (a key serves one concept only)."""
        out: dict[str, str] = {}
        used: set[str] = set()
        for name in self.concepts:
            free = [k for k in keys if k not in used]
            k = self.pick(name, free, framework)
            if k is not None:
                out[name] = k
                used.add(k)
        return out


def validate(data: Any) -> None:
    """One clear error for a malformed vocabulary (unknown framework, bad regex, missing source)."""
    if not isinstance(data, dict) or not isinstance(data.get("concepts"), dict):
        raise UserError("vocabulary: a mapping with 'concepts' is required")
    if not isinstance(data.get("step_keys"), list):
        raise UserError("vocabulary: 'step_keys' must be a list")
    for name, spec in data["concepts"].items():
        where = f"vocabulary: concept {name!r}"
        if not isinstance(spec, dict) or not spec.get("label") or spec.get("direction") not in DIRECTIONS:
            raise UserError(f"{where}: needs a label and a direction ({', '.join(DIRECTIONS)})")
        keys = spec.get("keys")
        if not isinstance(keys, dict) or not keys:
            raise UserError(f"{where}: needs keys per framework")
        for fw, entry in keys.items():
            if fw not in (*FRAMEWORKS, "generic"):
                raise UserError(f"{where}: unknown framework {fw!r}")
            if isinstance(entry, dict) and fw != "generic" and set(entry) == {"absent"} and entry["absent"]:
                continue  # the framework logs no such key, and the entry says why
            if not isinstance(entry, dict) or not entry.get("patterns"):
                raise UserError(f"{where}/{fw}: needs patterns (or 'absent' with the reason)")
            if fw != "generic" and not entry.get("source"):
                raise UserError(f"{where}/{fw}: needs the upstream source of its key names")
            for p in entry["patterns"]:
                try:
                    re.compile(p)
                except re.error as exc:
                    raise UserError(f"{where}/{fw}: bad pattern {p!r}: {exc}") from None
    for fw, pats in (data.get("frameworks") or {}).items():
        if fw not in FRAMEWORKS:
            raise UserError(f"vocabulary: frameworks: unknown framework {fw!r}")
        for p in pats:
            try:
                re.compile(p)
            except re.error as exc:
                raise UserError(f"vocabulary: frameworks/{fw}: bad pattern {p!r}: {exc}") from None
    for kind, concept in (data.get("log_series") or {}).items():
        if not re.fullmatch(r"[a-z_]+", str(kind)) or concept not in data["concepts"]:
            raise UserError(f"vocabulary: log_series: {kind!r} must name a known concept (got {concept!r})")


@functools.lru_cache(maxsize=1)
def builtin_vocabulary() -> Vocabulary:
    """The shipped vocabulary, validated once per edit (:func:`rlmedic.datafiles.builtin`); its key
    patterns compile when a key is first tried against them."""
    path = Path(__file__).with_name("vocabulary.yaml")
    return builtin("vocabulary", [path], [__file__], lambda: Vocabulary(read_yaml(path)))
