"""The read-side snapshot after a re-index: this session's writes applied to the old snapshot equal a
snapshot read back from Chroma (same ids in the same order, documents, metadata, BM25 ids, and vectors
to a float32 step)."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from rlmedic.knowledge import store as store_mod
from rlmedic.knowledge.store import CHANGING_MARKER, SNAPSHOT_FILE, Store

DIM = 8


def _chunks(prefix: str, n: int, rng: random.Random) -> tuple[list[str], list[str], list[dict], list[list[float]]]:
    ids = [f"{prefix}{i}" for i in range(n)]
    docs = [f"chunk {prefix}{i} about {rng.choice(['NCCL timeout', 'CUDA OOM', 'reward zero', 'resume'])} {rng.random():.6f}"
            for i in range(n)]
    metas = [{"kind": rng.choice(["doc", "card"]), "heading": f"H{i % 3}", "source": f"s{i % 5}", "line_start": i}
             for i in range(n)]
    vecs = []
    for _ in range(n):
        v = np.array([rng.gauss(0, 1) for _ in range(DIM)], dtype=np.float32)
        vecs.append((v / np.linalg.norm(v)).tolist())
    return ids, docs, metas, vecs


def _read(directory: Path) -> dict:
    db = sqlite3.connect(directory / SNAPSHOT_FILE)
    rows = db.execute("SELECT id, kind, heading, document, metadata FROM chunks ORDER BY row").fetchall()
    (blob,) = db.execute("SELECT value FROM info WHERE key = 'vectors'").fetchone()
    db.close()
    return {"rows": [(i, k, h, d, json.loads(m)) for i, k, h, d, m in rows],
            "vectors": np.frombuffer(blob, dtype=np.float32).reshape(len(rows), -1) if rows else np.zeros((0, 0)),
            "bm25_ids": json.loads((directory / "bm25" / "ids.json").read_text())}


def _indexed(directory: Path, rng: random.Random, n: int = 10) -> None:
    """A store of ``n`` chunks with its read-side copies written (the session before the one tested)."""
    store = Store(directory)
    store.add(*_chunks("a", n, rng))
    store.rebuild_bm25()


def _full_rebuild(directory: Path) -> dict:
    """What a rebuild reading every chunk back from Chroma writes (forced by the crash marker)."""
    (directory / CHANGING_MARKER).touch()
    fresh = Store(directory)
    fresh.delete(["no-such-id"])  # a write: the session begins, sees the marker, keeps no delta
    assert fresh._delta is None
    fresh.rebuild_bm25()
    return _read(directory)


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each rebuild applied a delta (True) or read Chroma back (False)."""
    calls: list[bool] = []
    real = Store.rebuild_bm25

    def spy(self: Store) -> None:
        calls.append(self._delta is not None and not self._delta.overflow)
        real(self)

    monkeypatch.setattr(Store, "rebuild_bm25", spy)
    return calls


def test_writes_applied_to_the_snapshot_equal_chroma_read_back(tmp_path: Path, used: list[bool]) -> None:
    rng = random.Random(3)
    directory = tmp_path / "idx"
    _indexed(directory, rng, n=30)

    session = Store(directory)
    session.delete(["a3", "a5", "a7"])  # gone
    ids, docs, metas, vecs = _chunks("a", 12, rng)
    session.add(ids[:3] + ids[10:12], docs[:3] + docs[10:12], metas[:3] + metas[10:12], vecs[:3] + vecs[10:12])  # in place
    session.add(["a5"], docs[5:6], metas[5:6], vecs[5:6])  # deleted, then added again: last
    session.add(*_chunks("b", 7, rng))  # new
    session.delete(["b2"])  # added this session, then deleted
    session.rebuild_bm25()
    incremental = _read(directory)
    assert not (directory / CHANGING_MARKER).exists()

    full = _full_rebuild(directory)
    assert used == [False, True, False]
    assert incremental["rows"] == full["rows"]
    # Chroma may hand a vector back one float32 step (~1e-8) off the one written; ours is the one written
    assert np.allclose(incremental["vectors"], full["vectors"], rtol=0, atol=1e-6)
    assert incremental["bm25_ids"] == full["bm25_ids"]
    order = [r[0] for r in incremental["rows"]]
    assert order[-7:] == ["a5", "b0", "b1", "b3", "b4", "b5", "b6"] and "a3" not in order and "b2" not in order


def test_a_session_that_stopped_before_its_rebuild_makes_the_next_one_read_chroma(tmp_path: Path, used: list[bool]) -> None:
    rng = random.Random(4)
    directory = tmp_path / "idx"
    _indexed(directory, rng)
    crashed = Store(directory)
    ids, docs, metas, vecs = _chunks("a", 2, rng)
    crashed.add(ids, docs, metas, vecs)  # an in-place update (same ids), then no rebuild: the process died
    assert (directory / CHANGING_MARKER).exists()

    later = Store(directory)
    later.add(*_chunks("c", 2, rng))
    assert later._delta is None  # the old snapshot no longer vouches for Chroma's documents
    later.rebuild_bm25()
    assert used == [False, False]
    rows = {r[0]: r[3] for r in _read(directory)["rows"]}
    assert rows["a0"] == docs[0] and rows["a1"] == docs[1]


def test_a_large_session_reads_chroma_back_and_still_equals_it(tmp_path: Path, used: list[bool],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_mod._Delta, "MAX_ROWS", 5)
    rng = random.Random(5)
    directory = tmp_path / "idx"
    _indexed(directory, rng)
    session = Store(directory)
    session.add(*_chunks("n", 9, rng))
    session.rebuild_bm25()
    assert used == [False, False]
    assert _read(directory)["rows"] == _full_rebuild(directory)["rows"]


def test_a_reindex_of_edited_documents_writes_the_snapshot_a_full_rebuild_would(tmp_path: Path, used: list[bool]) -> None:
    from rlmedic.knowledge.index import KnowledgeBase

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\n## Cause\n\nThe rollout worker {i} ran out of memory.\n\n"
                                       f"## Fix\n\nLower mem_fraction_static to 0.{i + 5}.\n", encoding="utf-8")
    KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    (docs / "n1.md").write_text((docs / "n1.md").read_text().replace("ran out", "hung and ran out"), encoding="utf-8")
    (docs / "n3.md").unlink()
    (docs / "n9.md").write_text("# New\n\nNCCL watchdog timeout after the weight update.\n", encoding="utf-8")
    KnowledgeBase(tmp_path / "idx", with_cards=False).index([docs])
    incremental = _read(tmp_path / "idx")
    full = _full_rebuild(tmp_path / "idx")
    assert used[:2] == [False, True]
    assert incremental["rows"] == full["rows"] and incremental["bm25_ids"] == full["bm25_ids"]
    assert np.allclose(incremental["vectors"], full["vectors"], rtol=0, atol=1e-6)
