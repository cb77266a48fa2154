"""The built-in cards' vectors ship with the package (knowledge/prebuilt.py).

A fresh install indexes the cards from them without loading torch or the model; a card
added or edited since they were computed is embedded at run time, never given a wrong vector.
"""

from __future__ import annotations

import json

import numpy as np

from rlmedic.knowledge import prebuilt
from rlmedic.knowledge.embeddings import default_embedder
from rlmedic.knowledge.index import KnowledgeBase
from rlmedic.knowledge.ingest import CARDS_KEY, card_chunks, ensure_cards
from rlmedic.knowledge.store import Store


class CountingEmbedder:
    """The real embedder, remembering which texts it was asked to embed."""

    def __init__(self) -> None:
        self.real = default_embedder()
        self.texts: list[str] = []

    def embed(self, texts, **kwargs):
        self.texts += list(texts)
        return self.real.embed(texts, **kwargs)

    def embed_query(self, text):
        return self.real.embed_query(text)


def test_shipped_card_vectors_match_the_cards() -> None:
    problems = prebuilt.stale()
    assert not problems, (
        "the shipped card vectors (knowledge/cards_vectors.*) no longer match knowledge/cards/: "
        f"run `{prebuilt.REGENERATE}` and commit both files\n" + "\n".join(problems[:20])
    )


def test_shipped_vectors_are_the_models_vectors_of_the_card_text() -> None:
    chunks = card_chunks()[:3]
    shipped = prebuilt.known_vectors(chunks)
    fresh = default_embedder().embed([c.text for c in chunks], engine="numpy")
    for chunk, vec in zip(chunks, fresh):
        assert float(np.dot(shipped[chunk.text], vec)) > 0.9999, chunk.id


def test_fresh_index_takes_every_card_from_the_shipped_vectors(tmp_path, capsys) -> None:
    """A fresh store gets the cards in its read-side copies only; Chroma gets them when first opened."""
    embedder = CountingEmbedder()
    store = Store(tmp_path / "index")
    assert ensure_cards(store, embedder=embedder)
    assert embedder.texts == []
    assert "embedding" not in capsys.readouterr().err
    chunks = card_chunks()
    ids = [c.id for c in chunks]
    assert store.manifest.files[CARDS_KEY].chunks == ids
    assert store.manifest.pending == ids and not (tmp_path / "index" / "chroma").exists()
    shipped = prebuilt.known_vectors(chunks)
    stored = store.vectors([chunks[0].id])[chunks[0].id]
    assert np.allclose(stored, shipped[chunks[0].text], atol=1e-6)
    # the answer path finds a card by meaning and by words, without Chroma
    kb = KnowledgeBase(tmp_path / "index")
    results = kb.search("SGLang runs out of GPU memory while generating rollouts", k=3)
    assert any(r.kind == "card" and "oom" in r.id for r in results)
    assert kb.store._collection is None
    # indexing a document opens Chroma: the cards go in first, and every copy agrees afterwards
    doc = tmp_path / "docs" / "memory.md"
    doc.parent.mkdir()
    doc.write_text("# Memory\n\n## Rollout OOM\n\nLower sglang.mem_fraction_static when the rollout servers run out of memory.\n")
    kb.index([doc.parent])
    again = Store(tmp_path / "index")
    assert again.manifest.pending == []
    held = again.collection.get(include=["embeddings"])
    assert len(held["ids"]) == again.count() == len(chunks) + 1
    chroma_vec = held["embeddings"][held["ids"].index(chunks[0].id)]
    assert np.allclose(chroma_vec, shipped[chunks[0].text], atol=1e-6)
    assert again.snapshot is not None and sorted(again.snapshot.ids) == sorted(held["ids"])
    found = KnowledgeBase(tmp_path / "index").search("rollout servers run out of memory mem_fraction_static", k=5)
    assert {r.kind for r in found} == {"card", "doc"}


def test_a_missing_read_side_copy_makes_the_cards_index_again(tmp_path) -> None:
    store = Store(tmp_path / "index")
    ensure_cards(store)
    (tmp_path / "index" / "dense.sqlite").unlink()
    again = Store(tmp_path / "index")
    again.collection  # opening Chroma finds nothing to copy: the cards are forgotten, not half-indexed
    assert CARDS_KEY not in again.manifest.files and again.manifest.pending == [] and again.manifest.cards_hash == ""
    assert ensure_cards(again)
    assert again.collection.count() == len(card_chunks()) and again.snapshot is not None


def test_a_card_changed_since_the_vectors_were_shipped_is_embedded_with_progress(tmp_path, monkeypatch, capsys) -> None:
    """Stale shipped vectors (an edited card, a new card) cost an embedding of those cards, announced on stderr."""
    chunks = card_chunks()
    edited, added = chunks[1], chunks[2]
    meta = json.loads(prebuilt.META_FILE.read_text(encoding="utf-8"))
    vectors = np.load(prebuilt.VECTORS_FILE)
    for entry in meta["chunks"]:
        if entry["id"] == edited.id:
            entry["sha256"] = prebuilt.text_hash(edited.text + " (older wording)")  # its vector is of that text
    keep = [i for i, e in enumerate(meta["chunks"]) if e["id"] != added.id]
    meta["chunks"] = [meta["chunks"][i] for i in keep]
    stale_dir = tmp_path / "shipped"
    stale_dir.mkdir()
    (stale_dir / "cards_vectors.json").write_text(json.dumps(meta), encoding="utf-8")
    np.save(stale_dir / "cards_vectors.npy", vectors[keep])
    monkeypatch.setattr(prebuilt, "META_FILE", stale_dir / "cards_vectors.json")
    monkeypatch.setattr(prebuilt, "VECTORS_FILE", stale_dir / "cards_vectors.npy")
    assert sorted(prebuilt.stale()) == sorted([f"{edited.id}: card edited since it was embedded",
                                               f"{added.id}: new card, not embedded"])

    embedder = CountingEmbedder()
    store = Store(tmp_path / "index")
    assert ensure_cards(store, embedder=embedder)
    assert sorted(embedder.texts) == sorted([edited.text, added.text])
    err = capsys.readouterr().err
    assert f"embedding 2 of the {len(chunks)} built-in playbook cards" in err and "done in" in err
    stored = store.vectors([edited.id, added.id])
    fresh = default_embedder().embed([edited.text, added.text], engine="numpy")
    assert float(np.dot(stored[edited.id], fresh[0])) > 0.9999
    assert float(np.dot(stored[added.id], fresh[1])) > 0.9999


def test_vectors_for_another_pipeline_are_not_used(tmp_path, monkeypatch) -> None:
    meta = json.loads(prebuilt.META_FILE.read_text(encoding="utf-8"))
    meta["pipeline"] = "chunks-v0/other-model@512"
    other = tmp_path / "cards_vectors.json"
    other.write_text(json.dumps(meta), encoding="utf-8")
    assert prebuilt.known_vectors(card_chunks(), meta_file=other) == {}
    assert "another pipeline" in prebuilt.stale(meta_file=other)[0]
    assert prebuilt.main(["--check"]) == 0
    monkeypatch.setattr(prebuilt, "META_FILE", other)
    assert prebuilt.main(["--check"]) == 1
