"""Hybrid retrieval: dense (Chroma) + sparse (BM25), fused, with exact identifiers.

Reciprocal rank fusion (RRF) merges the two rankings without calibrating their scores.
Chunks that literally contain an identifier or quoted error string from the query
(``mem_fraction_static``, ``--max-tokens-per-gpu``, ``/get_model_info``) get a boost
worth one extra first place, because users who paste a key name want the section
that names it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from rlmedic.errors import UserError
from rlmedic.knowledge.store import Store
from rlmedic.knowledge.words import identifiers, normalize_identifier, tokenize
from rlmedic.types import Citation

RRF_K = 60
CANDIDATES = 40
Mode = Literal["guided", "hybrid", "dense", "bm25"]
#: How many cards guide a document search, and the weight of each.
GUIDE_CARDS = 1
GUIDE_WEIGHTS = (1.0,)
#: A section the guiding card cites counts as this many first places.
CITED_BOOST = 1.0
#: An issue thread whose error line matches an error line of the query counts as this
#: many first places: the same error string is the strongest evidence of a known problem.
ERROR_MATCH_BOOST = 3.0
#: Metadata of an issue thread carried into its search result.
ISSUE_FIELDS = ("closed_at", "state_reason", "fix", "fixed_in", "fixed_in_basis", "resolution")


@dataclass(frozen=True)
class SearchResult:
    id: str
    source: str
    section: str
    score: float
    text: str
    kind: str
    path: str
    line_start: int
    line_end: int
    url: str = ""
    #: for an issue thread: its stored error line that the query's error line matched
    matched_error: str = ""
    #: for an issue thread: closed_at, state_reason, fix, fixed_in, fixed_in_basis, resolution
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def card_id(self) -> str:
        return self.source.removeprefix("card:") if self.kind == "card" else ""

    @property
    def citation(self) -> Citation:
        if self.kind == "card":
            return Citation.card(self.card_id, self.section)
        if self.kind in ("issue", "known", "commit"):
            return Citation(kind="issue", ref=self.source, section=self.section, url=self.url)
        return Citation.doc(self.source, self.section, (self.line_start, self.line_end))

    @property
    def citation_text(self) -> str:
        """The citation as shown to people: an issue thread (or an upstream commit) carries its URL."""
        if self.kind in ("issue", "known", "commit"):
            return f"{self.source}: {self.section} <{self.url}>"
        return str(self.citation)

    def to_dict(self) -> dict:
        data = {
            "source": self.source,
            "section": self.section,
            "score": round(self.score, 5),
            "text": self.text,
            "citation": self.citation.to_dict(),
            "kind": self.kind,
            "lines": [self.line_start, self.line_end],
        }
        if self.kind == "known":
            data |= {"url": self.url, "record": self.id.removeprefix("known-")}
        if self.kind == "issue":
            data |= {"url": self.url, "matched_error": self.matched_error, **self.info}
        if self.kind == "commit":
            data |= {"url": self.url, **self.info}
        return data


def _normalized_text(text: str) -> str:
    return text.lower().replace("-", "_")


def cited_headings(card) -> list[str]:
    """Normalised headings a card's references name: ``"A / B; C"`` -> a, b, c."""
    from rlmedic.knowledge.chunking import normalize_heading

    out: list[str] = []
    for ref in card.references:
        for part in re.split(r"\s*(?:;|/|>|›)\s*", ref.section or ""):
            heading = normalize_heading(part)
            if heading and heading not in out and not heading.startswith("faq "):
                out.append(heading)
    return out


def _guide_by_cards(store: Store, query: str, vector: list[float] | None, fused: dict[str, float], n: int) -> None:
    """Card-guided expansion for document search.

    Playbook cards are curated: their symptoms and error strings bridge a user's words
    and the docs' wording, and their references name the doc sections they rest on. The
    best-matching cards for the query add two signals to the document ranking: a dense
    ranking by the card's own embedding, and a boost for the sections the card cites.
    """
    from rlmedic.knowledge.cards import card_by_id

    card_rank: dict[str, float] = {}
    if vector is not None:
        for rank, (cid, _sim) in enumerate(store.dense_query(vector, 10, kind="card")):
            card_rank[cid] = card_rank.get(cid, 0.0) + 1.0 / (RRF_K + rank + 1)
    for rank, (cid, _score) in enumerate(
        (cid, s) for cid, s in store.sparse_query(tokenize(query), 200) if cid.startswith("card-")
    ):
        if rank >= 10:
            break
        card_rank[cid] = card_rank.get(cid, 0.0) + 1.0 / (RRF_K + rank + 1)
    top = sorted(card_rank, key=card_rank.__getitem__, reverse=True)[:GUIDE_CARDS]
    card_vectors = store.vectors(top)
    for weight, cid in zip(GUIDE_WEIGHTS, top):
        if cid in card_vectors:
            for rank, (doc_id, _sim) in enumerate(store.dense_query(card_vectors[cid], n, kind="doc")):
                fused[doc_id] = fused.get(doc_id, 0.0) + weight / (RRF_K + rank + 1)
        card = card_by_id(cid.removeprefix("card-"))
        for heading in cited_headings(card) if card else ():
            for doc_id in store.ids_with_heading(heading):
                fused[doc_id] = fused.get(doc_id, 0.0) + CITED_BOOST * weight / (RRF_K + 1)


def search(
    store: Store,
    query: str,
    k: int = 5,
    *,
    mode: Mode = "hybrid",
    kind: str | None = None,
    embedder=None,
) -> list[SearchResult]:
    """Top ``k`` chunks for ``query``. ``kind`` restricts to ``doc``, ``card`` or ``issue``.

    ``mode`` ``guided`` is ``hybrid`` plus card-guided expansion for document results
    (see :func:`_guide_by_cards`); it needs the built-in cards in the index.
    """
    if not query.strip():
        raise UserError("the query is empty")
    if store.count() == 0:
        raise UserError(f"the index at {store.directory} is empty: add documents with `rlmedic index PATH`")
    fused: dict[str, float] = {}
    n = max(CANDIDATES, k * 4)
    vector = None
    if mode in ("hybrid", "dense", "guided"):
        from rlmedic.knowledge.embeddings import default_embedder

        vector = (embedder or default_embedder()).embed_query(query)
        for rank, (cid, _sim) in enumerate(store.dense_query(vector, n, kind=kind)):
            fused[cid] = fused.get(cid, 0.0) + 1.0 / (RRF_K + rank + 1)
    sparse_hits: list[tuple[str, float]] = []
    if mode in ("hybrid", "bm25", "guided"):
        sparse_hits = store.sparse_query(tokenize(query), n * (3 if kind else 1))
        for rank, (cid, _score) in enumerate(sparse_hits):
            fused[cid] = fused.get(cid, 0.0) + 1.0 / (RRF_K + rank + 1)
    if mode == "guided" and kind == "doc":
        _guide_by_cards(store, query, vector, fused, n)
    matched: dict[str, str] = {}
    if mode != "dense" and kind in (None, "issue"):
        from rlmedic.knowledge.threads import error_keys

        matched = store.error_matches(error_keys(query))
        for cid in matched:
            fused[cid] = fused.get(cid, 0.0) + ERROR_MATCH_BOOST / (RRF_K + 1)
    if not fused:
        return []
    records = store.get(list(fused))
    if kind:
        fused = {cid: s for cid, s in fused.items() if cid in records and records[cid][1].get("kind") == kind}
    if mode in ("hybrid", "guided"):
        wanted = identifiers(query)
        if wanted:
            for cid in fused:
                text = _normalized_text(records.get(cid, ("", {}))[0])
                hits = sum(1 for ident in wanted if normalize_identifier(ident) in text or ident in text)
                fused[cid] += (hits / len(wanted)) * (1.0 / (RRF_K + 1))
    ranked = sorted(fused.items(), key=lambda item: item[1], reverse=True)[:k]
    results = []
    for cid, score in ranked:
        text, meta = records[cid]
        results.append(
            SearchResult(
                id=cid,
                source=str(meta.get("source", "")),
                section=str(meta.get("section", "")),
                score=score,
                text=text,
                kind=str(meta.get("kind", "doc")),
                path=str(meta.get("path", "")),
                line_start=int(meta.get("line_start", 0)),
                line_end=int(meta.get("line_end", 0)),
                url=str(meta.get("url", "")),
                matched_error=matched.get(cid, ""),
                info={f: meta[f] for f in ISSUE_FIELDS if f in meta},
            )
        )
    return results


def leading_documents(ranked: list[SearchResult], limit: int = 1) -> list[SearchResult]:
    """The user's own documents ranked above every card in one mixed ranking.

    Cards and indexed documents are fused on one scale (the same dense and BM25 rankings, the
    same reciprocal-rank fusion), so a document that matches the question better than any
    card comes first: an answer should lead with it rather than footnote it.
    """
    out: list[SearchResult] = []
    for result in ranked[:limit]:
        if result.kind != "doc":
            break
        out.append(result)
    return out


def key_sentences(result: SearchResult, query: str, n: int = 3, max_chars: int = 400) -> str:
    """The ``n`` sentences of a result that share the most words with the query, in text order."""
    words = set(tokenize(query))
    heading = result.section.strip()
    body = "\n".join(line for line in result.text.splitlines()
                     if not line.lstrip().startswith("#") and line.strip() != heading)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n{2,}", body) if s.strip()]
    if not sentences:
        return ""
    scored = sorted(range(len(sentences)), key=lambda i: (-len(words & set(tokenize(sentences[i]))), i))[:n]
    text = " ".join(" ".join(sentences[i].split()) for i in sorted(scored))
    return text if len(text) <= max_chars else text[: max_chars - 3].rstrip() + "..."
