"""The offline engine: answers without any LLM.

It retrieves the best-matching playbook cards and documentation sections and composes
a short answer: the likely cause, the fixes with exact keys (most effective first) and
numbered citations. When the question holds pasted log text and the log tool is
available, the log's root-cause finding picks the card.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rlmedic.knowledge.cards import Card, card_by_id
from rlmedic.knowledge.index import KnowledgeBase
from rlmedic.knowledge.retrieve import SearchResult
from rlmedic.types import Citation, cite_dicts

#: A second card is mentioned when its score is at least this share of the best one.
RELATED_SHARE = 0.8


@dataclass
class Answer:
    answer: str
    citations: list[Citation]  # numbered [1], [2]... in ``answer``
    engine: str = "offline"
    cards: list[str] = field(default_factory=list)
    sources: list[SearchResult] = field(default_factory=list)
    findings: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "citations": cite_dicts(self.citations),
            "engine": self.engine,
            "cards": self.cards,
            "sources": [s.to_dict() for s in self.sources],
            "findings": [f.to_dict() for f in self.findings],
        }


def detect_framework(text: str) -> str:
    """``slime`` for Megatron-style flags, ``areal`` for dotted YAML keys, else ``""``."""
    low = text.lower()
    if "slime" in low or re.search(r"(?<![\w-])--[a-z]+(?:-[a-z]+)+", low) or "megatron" in low:
        return "slime"
    if "areal" in low or re.search(r"\b(actor|rollout|gconfig|saver|recover|cluster)\.[a-z_]+", low):
        return "areal"
    return ""


def _looks_like_log(text: str) -> bool:
    return text.count("\n") >= 2 and bool(
        re.search(r"Traceback|Error|error:|\(pid=|Exception|CUDA|NCCL|Killed", text)
    )


def _log_findings(text: str) -> list[Any]:
    from rlmedic.tools.logs.diagnose import diagnose_text  # lazy: only for pasted logs

    diagnosis = diagnose_text(text, name="<question>")
    findings = list(diagnosis.findings)
    if diagnosis.root is not None:
        findings.insert(0, findings.pop(diagnosis.root))
    return findings


def compose(question: str, cards: list[tuple[Card, float]], docs: list[SearchResult], findings: list[Any]) -> Answer:
    citations: list[Citation] = []

    def cite(citation: Citation) -> int:
        if citation not in citations:
            citations.append(citation)
        return citations.index(citation) + 1

    framework = detect_framework(question)
    lines: list[str] = []
    if findings:
        root = findings[0]
        where = f" [{cite(Citation.log(root.file, root.line))}]" if root.file and root.line else ""
        lines.append(f"From the log: {root.summary}{where}.")
    if not cards:
        lines.append("No playbook card matches this question closely.")
    else:
        best, best_score = cards[0]
        n = cite(best.citation)
        lines.append(f"Likely cause: {best.title} [{n}].")
        lines.append("Why it happens: " + " ".join(c.rstrip(".") + "." for c in best.causes[:2]))
        fixes = [f for f in best.fixes if not framework or not f.framework or f.framework == framework] or list(best.fixes)
        lines.append("What to change (most effective first):")
        for i, fix in enumerate(fixes[:5], 1):
            tag = f" [{fix.framework}]" if fix.framework and not framework else ""
            lines.append(f"  {i}. {fix}{tag}")
        related = [c for c, s in cards[1:] if s >= RELATED_SHARE * best_score]
        for card in related[:2]:
            lines.append(f"Also check: {card.title} [{cite(card.citation)}].")
    if docs:
        refs = ", ".join(f"[{cite(d.citation)}]" for d in docs)
        lines.append(f"Documentation: {refs}.")
    if citations:
        lines.append("")
        lines.append("Sources:")
        lines += [f"  [{i}] {c}" for i, c in enumerate(citations, 1)]
    return Answer(
        answer="\n".join(lines),
        citations=citations,
        cards=[c.id for c, _ in cards],
        sources=docs,
        findings=findings,
    )


def answer_offline(question: str, kb: KnowledgeBase, *, k_cards: int = 3, k_docs: int = 3) -> Answer:
    """Answer ``question`` from the knowledge base alone (plus the log tool on pasted logs)."""
    findings = _log_findings(question) if _looks_like_log(question) else []
    card_hits = kb.search(question, k_cards, kind="card")
    cards: list[tuple[Card, float]] = []
    for hit in card_hits:
        card = card_by_id(hit.card_id)
        if card:
            cards.append((card, hit.score))
    root_card = card_by_id(findings[0].card) if findings and getattr(findings[0], "card", "") else None
    if root_card:
        top = cards[0][1] if cards else 1.0
        cards = [(root_card, top * 2)] + [(c, s) for c, s in cards if c.id != root_card.id]
    docs = kb.search(question, k_docs, kind="doc") if kb.has_documents() else []
    return compose(question, cards, docs, findings)
