"""Playbook cards: our own write-ups of known failures, loaded from YAML files.

One file per card in ``knowledge/cards/``. A newcomer adds a problem by adding a file;
:func:`load_cards` validates every file so a typo fails loudly in tests, not silently
at answer time. See ``knowledge/cards/README.md`` for the schema.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.datafiles import builtin, read_yaml
from rlmedic.errors import UserError
from rlmedic.types import CATEGORIES, FRAMEWORKS, Citation, Fix

CARDS_DIR = Path(__file__).parent / "cards"

_REQUIRED = ("id", "title", "frameworks", "category", "symptoms", "causes", "fixes", "references")
_OPTIONAL = ("errors", "phase", "notes", "tags")
_FIX_KEYS = {"action", "key", "value", "flag", "framework", "why"}
_REF_KEYS = {"project", "page", "section", "url"}


def render_fix(action: str, key: str = "", flag: str = "", value: Any = None) -> str:
    """One line with the exact key/flag and value, e.g. ``Lower it (actor.mb=4096 / --mb)``."""
    parts = [action.rstrip(".")]
    setting = []
    if key:
        setting.append(f"{key}={value}" if value is not None else key)
    if flag:
        setting.append(f"{flag} {value}" if value is not None and not key else flag)
    if setting:
        parts.append(f"({' / '.join(setting)})")
    return " ".join(parts)


@dataclass(frozen=True)
class Reference:
    project: str
    page: str
    section: str = ""
    url: str = ""

    def __str__(self) -> str:
        text = f"{self.project}: {self.page}"
        return f"{text} § {self.section}" if self.section else text


@dataclass(frozen=True)
class Card:
    id: str
    title: str
    frameworks: tuple[str, ...]
    category: str
    symptoms: tuple[str, ...]
    causes: tuple[str, ...]
    fixes: tuple[Fix, ...]  # rendered, cited with the card
    references: tuple[Reference, ...]
    errors: tuple[str, ...] = ()
    phase: str = ""
    notes: str = ""
    tags: tuple[str, ...] = ()
    path: str = field(default="", compare=False)

    @property
    def citation(self) -> Citation:
        return Citation.card(self.id, str(self.references[0]))

    def to_text(self) -> str:
        """The card as a searchable document (what the index embeds)."""
        lines = [f"# {self.title}", "", f"Category: {self.category}. Frameworks: {', '.join(self.frameworks)}."]
        if self.phase:
            lines.append(f"Phase: {self.phase}.")
        lines += ["", "## Symptoms", *[f"- {s}" for s in self.symptoms]]
        if self.errors:
            lines += ["", "## Error messages", *[f"- `{e}`" for e in self.errors]]
        lines += ["", "## Causes", *[f"- {c}" for c in self.causes]]
        lines += ["", "## Fixes (most effective first)"]
        lines += [f"{i}. {f}" + (f": {f.why}" if f.why else "") for i, f in enumerate(self.fixes, 1)]
        if self.notes:
            lines += ["", "## Notes", self.notes.strip()]
        lines += ["", "## References", *[f"- {r}" for r in self.references]]
        return "\n".join(lines) + "\n"


def _tuple_of_str(value: Any, where: str, name: str, required: bool = True) -> tuple[str, ...]:
    if value is None and not required:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise UserError(f"{where}: '{name}' must be a list of non-empty strings")
    if required and not value:
        raise UserError(f"{where}: '{name}' must not be empty")
    return tuple(v.strip() for v in value)


def parse_card(data: Any, where: str) -> Card:
    """Validate one card mapping; raise :class:`UserError` naming the file and field."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: a card must be a YAML mapping")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise UserError(f"{where}: missing field(s) {', '.join(missing)}")
    unknown = sorted(set(data) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if data["category"] not in CATEGORIES:
        raise UserError(f"{where}: category {data['category']!r} is not in the vocabulary")
    frameworks = _tuple_of_str(data["frameworks"], where, "frameworks")
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad:
        raise UserError(f"{where}: unknown framework(s) {', '.join(bad)}")
    fixes = []
    for i, raw in enumerate(data["fixes"] or []):
        if isinstance(raw, str):
            raw = {"action": raw}
        if not isinstance(raw, dict) or not raw.get("action"):
            raise UserError(f"{where}: fix #{i + 1} needs an 'action'")
        extra = set(raw) - _FIX_KEYS
        if extra:
            raise UserError(f"{where}: fix #{i + 1} has unknown field(s) {', '.join(sorted(extra))}")
        fixes.append({k: ("" if v is None and k != "value" else v) for k, v in raw.items()})
    if not fixes:
        raise UserError(f"{where}: 'fixes' must not be empty")
    refs = []
    for i, raw in enumerate(data["references"] or []):
        if not isinstance(raw, dict) or not raw.get("project") or not raw.get("page"):
            raise UserError(f"{where}: reference #{i + 1} needs 'project' and 'page'")
        extra = set(raw) - _REF_KEYS
        if extra:
            raise UserError(f"{where}: reference #{i + 1} has unknown field(s) {', '.join(sorted(extra))}")
        refs.append(Reference(**{k: str(v) for k, v in raw.items()}))
    if not refs:
        raise UserError(f"{where}: every card needs at least one reference (its citation)")
    card_id = str(data["id"])
    if not card_id.replace("-", "").replace("_", "").isalnum():
        raise UserError(f"{where}: id {card_id!r} may hold only letters, digits, '-' and '_'")
    cite = Citation.card(card_id, str(refs[0]))
    return Card(
        id=card_id,
        title=str(data["title"]).strip(),
        frameworks=frameworks,
        category=data["category"],
        symptoms=_tuple_of_str(data["symptoms"], where, "symptoms"),
        causes=_tuple_of_str(data["causes"], where, "causes"),
        fixes=tuple(
            Fix(action=render_fix(f["action"], f.get("key", ""), f.get("flag", ""), f.get("value")),
                key=f.get("key") or f.get("flag", ""), new=f.get("value"), why=f.get("why", ""),
                framework=f.get("framework", ""), citations=(cite,))
            for f in fixes
        ),
        references=tuple(refs),
        errors=_tuple_of_str(data.get("errors"), where, "errors", required=False),
        phase=str(data.get("phase") or ""),
        notes=str(data.get("notes") or ""),
        tags=_tuple_of_str(data.get("tags"), where, "tags", required=False),
        path=where,
    )


def load_cards(directory: Path | None = None) -> list[Card]:
    """Load and validate every ``*.yaml`` card; ids must be unique."""
    directory = directory or CARDS_DIR
    cards: list[Card] = []
    seen: dict[str, str] = {}
    for path in sorted(directory.glob("*.yaml")):
        card = parse_card(read_yaml(path), str(path))
        if card.id in seen:
            raise UserError(f"{path}: duplicate card id {card.id!r} (also in {seen[card.id]})")
        seen[card.id] = str(path)
        cards.append(card)
    return cards


@functools.cache
def builtin_cards() -> tuple[Card, ...]:
    """The shipped cards, validated once per edit: the parsed set is cached on disk (:mod:`rlmedic.diskcache`)
    under the hash of the card files and of the code that parses them (a cold ``diagnose`` parsed 76
    YAML files to use three cards: ~50 ms)."""
    from rlmedic import types

    return builtin("cards", sorted(CARDS_DIR.glob("*.yaml")), [__file__, str(types.__file__)],
                   lambda: tuple(load_cards(CARDS_DIR)))


def card_by_id(card_id: str) -> Card | None:
    return next((c for c in builtin_cards() if c.id == card_id), None)
