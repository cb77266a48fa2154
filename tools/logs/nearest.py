"""The category and card of an error no signature and no traceback rule knows: its nearest neighbours.

Two neighbours vote, both cheap and offline (``diagnose`` must stay fast and never load an
embedding model, torch or chromadb):

* the known-issue records (:func:`rlmedic.knowledge.known.vote_category`) when that package
  is installed: real errors people hit, each with its category;
* the playbook cards: the words of the error (exception type, message, the packages and
  functions of its frames) against each card's title, symptoms, error strings and tags,
  weighted by how rare each word is among the cards (an IDF-weighted overlap).

A neighbour counts only when it is close enough (``MIN_SCORE``, ``MIN_SHARE``): an error
far from everything stays "other" rather than getting a confident wrong card.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

#: Card similarity (IDF-weighted share of the error's words that the card also has) below which
#: a card is not a neighbour. Tuned on the dev cases only.
MIN_SCORE = 0.4
#: At least this many distinct shared words, so one rare word alone does not decide.
MIN_SHARED = 4
#: The known records' vote counts when this share of the k nearest agree...
MIN_SHARE = 0.6
#: ...and, when the best of them matched only a generic error string, this many agree by more than words.
MIN_AGREEING = 2
#: A vote of records that only share words with the error needs one this close (match score).
MIN_SIMILAR = 0.25

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]+")
#: Words every traceback has; they say nothing about which failure it is.
_NOISE = frozenset(
    """error errors exception traceback most recent call last file line in self return none true false
    the a an of to and or is was be not for with at by on from this that it its as are were has have
    py lib python site packages dist usr local root home src call raise raised args kwargs wrapper
    func main run module init get set value values object type str int list dict got all argument arguments
    multiple more than when after before cannot failed fails failure use using used call called expected
    found given invalid""".split()
)


@dataclass
class Neighbour:
    """The nearest knowledge: a category, its card (may be empty), how close, and why."""

    category: str
    card: str
    score: float
    how: str  # "known" | "cards"
    shared: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    citations: list[Any] = field(default_factory=list)  # rlmedic.types.Citation of the known issues
    hows: list[str] = field(default_factory=list)


def words(text: str) -> list[str]:
    """Lower-case words of at least two letters, identifiers split at ``_``/``.``, noise dropped."""
    out = []
    for w in _WORD.findall(text.replace("_", " ").replace(".", " ")):
        for part in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", w) or [w]:
            lw = part.lower()
            if len(lw) > 2 and lw not in _NOISE:
                out.append(lw)
    return out


@functools.cache
def _builtin_index() -> tuple[list[tuple[str, str, frozenset[str]]], dict[str, float]]:
    from rlmedic.knowledge.cards import builtin_cards

    return _card_index(builtin_cards())


def _card_index(cards: Any) -> tuple[list[tuple[str, str, frozenset[str]]], dict[str, float]]:
    docs = []
    for card in cards:
        if card.category == "other":  # generic help cards are not a diagnosis
            continue
        text = " ".join([card.title, *card.symptoms, *card.errors, *card.tags, *card.causes])
        docs.append((card.id, card.category, frozenset(words(text))))
    df: dict[str, int] = {}
    for _id, _cat, ws in docs:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    n = len(docs)
    idf = {w: math.log(1 + n / c) for w, c in df.items()}
    return docs, idf


def by_cards(text: str, cards: Any = None, *, category: str = "", min_score: float | None = None,
             min_shared: int | None = None) -> Neighbour | None:
    """The card whose words cover the most of the error's (rare words weigh more), if close enough.

    ``cards`` replaces the shipped playbook (tests use a folder of their own); ``category``
    limits the choice to that category's cards (the playbook for a category decided elsewhere).
    """
    docs, idf = _builtin_index() if cards is None else _card_index(cards)
    if category:
        docs = [d for d in docs if d[1] == category]
    query = set(words(text))
    unseen = math.log(1 + 2 * max(len(docs), 1))  # a word no card has weighs like the rarest: it dilutes
    total = sum(idf.get(w, unseen) for w in query)
    if not query or total <= 0:
        return None
    best: tuple[float, str, str, list[str]] | None = None
    for card_id, category, ws in docs:
        shared = query & ws
        score = sum(idf[w] for w in shared) / total
        if best is None or score > best[0]:
            best = (score, card_id, category, sorted(shared, key=lambda w: (-idf[w], w)))
    if best is None or best[0] < (MIN_SCORE if min_score is None else min_score) or len(best[3]) < (
        MIN_SHARED if min_shared is None else min_shared
    ):
        return None
    return Neighbour(best[2], best[1], round(best[0], 3), "cards", best[3])


def _specific(error: str) -> bool:
    """An error string that says something of its own (four words or more, an identifier, a number, a
    quoted value, a path), not only an exception type and a few plain words ("ZeroDivisionError:
    division by zero" could be anyone's)."""
    rest = re.sub(r"^\s*[\w.]+(?:Error|Exception)(?::\s*|\s*$)", "", error)
    return len(rest.split()) >= 4 or bool(re.search(r"[_./'\"`\d]|[a-z][A-Z]", rest))


def by_known(texts: list[str]) -> Neighbour | None:
    """The known records' vote, when the known-issues package is there and agrees enough."""
    try:
        from rlmedic.knowledge.known import vote_category  # type: ignore[attr-defined]
    except ImportError:
        return None
    try:
        category, share, matches = vote_category(texts, k=5)
    except Exception:  # noqa: BLE001 - a broken record set must not break a diagnosis
        return None
    if not category or category == "other" or share < MIN_SHARE:
        return None
    agreeing = [m for m in matches or [] if getattr(getattr(m, "record", None), "category", None) == category]
    if not agreeing:
        return None
    if all(getattr(m, "how", "") == "similar" for m in agreeing) and max(m.score for m in agreeing) < MIN_SIMILAR:
        return None  # only a few shared words
    certain = [m for m in agreeing if getattr(m, "how", "") == "regex"
               or (getattr(m, "how", "") == "exact" and any(_specific(e) for e in m.record.symptoms.errors))]
    top = agreeing[0]
    if not certain and getattr(top, "how", "") == "exact":
        # led by a generic string ("ZeroDivisionError: division by zero" could be anyone's): only
        # other records that agree by more than shared words can carry the vote
        if len([m for m in agreeing[1:] if getattr(m, "how", "") != "similar"]) < MIN_AGREEING - 1:
            return None
    refs = [str(m.record.id) for m in agreeing]
    citations = [m.citation for m in agreeing if getattr(m, "citation", None) is not None]
    hows = [str(getattr(m, "how", "")) for m in agreeing]
    return Neighbour(category, "", round(float(share), 3), "known", refs=refs[:5], citations=citations[:3], hows=hows[:5])


def nearest(text: str, *, use_known: bool = True) -> Neighbour | None:
    """Known records first (real errors), then the cards; None when nothing is close."""
    if use_known:
        found = by_known([text])
        if found is not None:  # the playbook card of that category closest to the error, if any shares words
            cards = by_cards(text, category=found.category, min_score=0.05, min_shared=2)
            if cards is not None:
                found.card, found.shared = cards.card, cards.shared
            return found
    return by_cards(text)
