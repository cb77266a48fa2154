"""A read-side copy of an index's chunks and vectors, so a query never imports chromadb.

Importing chromadb costs ~0.6 s of CPU and opening its store ~0.15 s: more than the
rest of a cold ``search`` or ``ask --offline``. Chroma stays the store of record (the
writer, and the only store when a Chroma server holds the vectors); after each change
the store writes this file from Chroma's own contents: one SQLite database with a row
per chunk (id, kind, heading, document, metadata) and every vector in one float32
blob, replaced atomically. A query scores all vectors exactly (one matrix-vector
product: a few thousand chunks cost well under a millisecond), where Chroma's HNSW
graph approximates.

The file is stamped with a digest of its chunk ids; :class:`rlmedic.knowledge.store.Store`
uses it only while the manifest lists the same chunks, and asks Chroma otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FORMAT = 1


def chunk_stamp(ids: Iterable[str]) -> str:
    """Digest of a set of chunk ids (order does not matter)."""
    h = hashlib.sha256()
    for i in sorted(ids):
        h.update(i.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


class Snapshot:
    def __init__(self, db: sqlite3.Connection, ids: list[str], kinds: list[str], matrix) -> None:
        self._db = db
        self.ids = ids
        self.kinds = kinds
        self.matrix = matrix  # (chunks, dim) float32, rows in ``ids`` order
        self._row = {i: n for n, i in enumerate(ids)}
        self._lock = threading.Lock()  # one connection, shared by a server's threads

    # -- writing -------------------------------------------------------------------
    @staticmethod
    def write(path: Path, ids: list[str], documents: list[str], metadatas: list[dict | None], embeddings) -> None:
        """Write a snapshot of these chunks at once (see :meth:`write_pages` for a large store)."""
        Snapshot.write_pages(path, [(ids, documents, metadatas, embeddings)], len(ids))

    @staticmethod
    def write_pages(path: Path, pages: Iterable[tuple[list[str], list[str], list[dict | None], Any]], total: int) -> list[str]:
        """Write a snapshot from pages of ``(ids, documents, metadatas, embeddings)``; returns the ids written.

        Rows go to SQLite as each page arrives and vectors into one preallocated float32 matrix,
        so a 10,000-thread store never holds every document and vector as Python objects at once.
        ``total`` is the number of chunks the pages hold (the matrix's height).
        """
        import numpy as np

        # a name of this writer's own: two writers of one name unlinked each other's file mid-write
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.unlink(missing_ok=True)
        db = sqlite3.connect(tmp)
        written: list[str] = []
        matrix = None
        try:
            db.execute("CREATE TABLE chunks (row INTEGER PRIMARY KEY, id TEXT UNIQUE, kind TEXT, heading TEXT, document TEXT, metadata TEXT)")
            db.execute("CREATE TABLE info (key TEXT PRIMARY KEY, value BLOB)")
            for ids, documents, metadatas, embeddings in pages:
                if not len(ids):
                    continue
                vectors = np.asarray(embeddings, dtype=np.float32)
                if matrix is None:
                    matrix = np.zeros((total, vectors.shape[1]), dtype=np.float32)
                start = len(written)
                if start + len(ids) > total:
                    raise ValueError(f"snapshot pages hold more than the {total} chunks announced")
                matrix[start : start + len(ids)] = vectors
                db.executemany(
                    "INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        (start + n, i, (m or {}).get("kind", ""), (m or {}).get("heading", ""), d, json.dumps(m or {}))
                        for n, (i, d, m) in enumerate(zip(ids, documents, metadatas))
                    ),
                )
                written += ids
            if matrix is None:
                matrix = np.zeros((0, 0), dtype=np.float32)
            matrix = matrix[: len(written)]
            info = {"format": FORMAT, "stamp": chunk_stamp(written), "dim": int(matrix.shape[1]) if matrix.ndim == 2 else 0}
            db.executemany("INSERT INTO info VALUES (?, ?)", [(k, json.dumps(v)) for k, v in info.items()])
            db.execute("INSERT INTO info VALUES ('vectors', ?)", (matrix.tobytes(),))
            db.commit()
        finally:
            db.close()
        os.replace(tmp, path)
        return written

    # -- reading -------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, stamp: str | None) -> Snapshot | None:
        """The snapshot at ``path`` if it was written for exactly the chunks ``stamp`` names (None: whichever)."""
        if not path.is_file():
            return None
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            info = {k: v for k, v in db.execute("SELECT key, value FROM info WHERE key != 'vectors'")}
            if json.loads(info.get("format", "0")) != FORMAT or (stamp is not None and json.loads(info.get("stamp", '""')) != stamp):
                db.close()
                return None
            import numpy as np

            rows = db.execute("SELECT id, kind FROM chunks ORDER BY row").fetchall()
            (blob,) = db.execute("SELECT value FROM info WHERE key = 'vectors'").fetchone()
            dim = json.loads(info["dim"])
            matrix = np.frombuffer(blob, dtype=np.float32).reshape(len(rows), dim) if rows else np.zeros((0, 0), np.float32)
        except (sqlite3.Error, ValueError, KeyError, TypeError):
            return None  # damaged or foreign: Chroma answers instead
        return cls(db, [r[0] for r in rows], [r[1] for r in rows], matrix)

    def dense_query(self, vector: list[float], n: int, kind: str | None = None) -> list[tuple[str, float]]:
        """The ``n`` chunks (of ``kind``) most cosine-similar to ``vector`` (vectors are normalised)."""
        import numpy as np

        if not self.ids or n <= 0:
            return []
        rows = np.arange(len(self.ids))
        if kind:
            rows = rows[np.fromiter((k == kind for k in self.kinds), dtype=bool, count=len(self.kinds))]
        if rows.size == 0:
            return []
        scores = self.matrix[rows] @ np.asarray(vector, dtype=np.float32)
        top = np.argsort(-scores, kind="stable")[:n]
        return [(self.ids[rows[t]], float(scores[t])) for t in top]

    def get(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            with self._lock:
                rows = self._db.execute(f"SELECT id, document, metadata FROM chunks WHERE id IN ({marks})", part).fetchall()
            for cid, doc, meta in rows:
                out[cid] = (doc, json.loads(meta))
        return out

    def rows(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any], Any]]:
        """``id -> (document, metadata, float32 vector)`` for the ids held (to carry rows into a new snapshot)."""
        found = self.get(ids)
        return {cid: (doc, meta, self.matrix[self._row[cid]]) for cid, (doc, meta) in found.items()}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def vectors(self, ids: list[str]) -> dict[str, list[float]]:
        return {i: self.matrix[self._row[i]].tolist() for i in ids if i in self._row}

    def ids_with_heading(self, heading: str, kind: str = "doc") -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT id FROM chunks WHERE heading = ? AND kind = ? ORDER BY row", (heading, kind)).fetchall()
        return [r[0] for r in rows]
