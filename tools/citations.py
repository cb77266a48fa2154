"""Citations every tool group stamps on its findings: a playbook card, or a doc section.

Kept apart from any one tool so that logs, GPU, checkpoints and configs cite the same way.
"""

from __future__ import annotations

from typing import Any

from rlmedic.errors import UserError
from rlmedic.types import Citation


def card_citation(card_id: str) -> Citation:
    """A citation of a playbook card; the section names the card's first reference when loaded."""
    section = ""
    try:
        from rlmedic.knowledge.cards import card_by_id

        card = card_by_id(card_id)
        if card is not None:
            section = str(card.references[0])
    except UserError:  # a broken card elsewhere must not break config checks
        pass
    return Citation.card(card_id, section)


def doc_citation(page: str, section: str = "", lines: tuple[int | None, int | None] | None = None) -> Citation:
    span = None
    if lines and lines[0]:
        span = (int(lines[0]), int(lines[1] or lines[0]))
    return Citation.doc(page, section, span)


def citation_from(entry: dict[str, Any]) -> Citation:
    if "card" in entry:
        return card_citation(str(entry["card"]))
    return doc_citation(str(entry["doc"]), str(entry.get("section", "")))
