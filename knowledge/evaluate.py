"""Retrieval quality on a question set: Recall@k and MRR.

A question file is YAML, a list of ``{question, card, seed, section}``: the card that
answers it and the document (file name) and heading (substring of the heading path)
where the answer lives. Used by the tests and ``benchmarks/retrieval.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from rlmedic.knowledge.index import KnowledgeBase
from rlmedic.knowledge.retrieve import Mode, SearchResult


@dataclass(frozen=True)
class Question:
    question: str
    card: str
    seed: str
    section: str


def load_questions(path: str | Path) -> list[Question]:
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return [Question(**{k: str(item[k]) for k in ("question", "card", "seed", "section")}) for item in raw]


def is_doc_hit(result: SearchResult, q: Question, *, strict: bool = False) -> bool:
    """The result is the section that answers ``q``: in the seed document, or (unless
    ``strict``) the same section of another copy of that page (the corpus holds newer
    upstream versions of some seeds, matched by heading)."""
    if result.kind != "doc" or q.section.lower() not in result.section.lower():
        return False
    return not strict or Path(result.source).name == q.seed


def is_card_hit(result: SearchResult, q: Question) -> bool:
    return result.kind == "card" and result.card_id == q.card


def first_hit_rank(results: list[SearchResult], q: Question, *, cards: bool = False, strict: bool = False) -> int | None:
    if cards:
        return next((i for i, r in enumerate(results, 1) if is_card_hit(r, q)), None)
    return next((i for i, r in enumerate(results, 1) if is_doc_hit(r, q, strict=strict)), None)


@dataclass
class Scores:
    n: int
    recall: dict[int, float]
    mrr: float
    misses: list[tuple[str, list[str]]]

    def line(self, label: str) -> str:
        recall = "  ".join(f"R@{k}={v:.3f}" for k, v in sorted(self.recall.items()))
        return f"{label:<8} n={self.n}  {recall}  MRR={self.mrr:.3f}"


def evaluate(
    kb: KnowledgeBase,
    questions: list[Question],
    *,
    mode: Mode = "hybrid",
    cards: bool = False,
    strict: bool = False,
    ks=(1, 3, 5),
) -> Scores:
    depth = max(ks)
    ranks: list[int | None] = []
    misses = []
    for q in questions:
        results = kb.search(q.question, depth, mode=mode, kind="card" if cards else "doc")
        rank = first_hit_rank(results, q, cards=cards, strict=strict)
        ranks.append(rank)
        if rank is None or rank > 3:
            misses.append((q.question, [str(r.citation) for r in results[:3]]))
    n = len(questions)
    recall = {k: sum(1 for r in ranks if r is not None and r <= k) / n for k in ks}
    mrr = sum(1.0 / r for r in ranks if r) / n
    return Scores(n=n, recall=recall, mrr=mrr, misses=misses)
