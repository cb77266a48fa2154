"""The on-disk knowledge index: a Chroma collection, a BM25 index and a manifest.

Layout of an index directory::

    chroma/         persistent Chroma store (dense vectors + chunk text + metadata)
    bm25/           bm25s index over the same chunks (rebuilt when chunks change)
    dense.sqlite    read-side copy of the chunks and their vectors (rebuilt with bm25/)
    manifest.json   per-file content hash and chunk ids (incremental re-index)

The manifest is the only thing read when nothing changed, so a no-op re-index never
loads the embedding model or Chroma. A fresh index of the built-in cards is written to the
read-side copies only (:meth:`Store.add_read_side_first`, the manifest's ``pending``): the
first time anything opens Chroma for this store, those chunks are copied into it first. Chroma stays the store of record; a query on the
embedded store reads ``dense.sqlite`` instead (:mod:`rlmedic.knowledge.snapshot`):
importing chromadb alone costs ~0.6 s of CPU, more than the rest of ``search``.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError

#: Opening Chroma clients, one thread at a time (see Store.collection).
_OPEN_LOCK = threading.RLock()
COLLECTION = "rlmedic_chunks"
SNAPSHOT_FILE = "dense.sqlite"
#: Chunks read from Chroma per page when the read-side copies (snapshot, BM25) are rebuilt.
REBUILD_PAGE = 1000
#: Present while a session has written to Chroma and not yet rebuilt the read-side copies.
CHANGING_MARKER = "dense.sqlite.changing"
MANIFEST_VERSION = 1


@dataclass
class FileEntry:
    hash: str
    source: str
    root: str
    chunks: list[str] = field(default_factory=list)
    #: normalised error lines of an issue thread (matched against pasted logs)
    errors: list[str] = field(default_factory=list)
    #: [size, mtime_ns, when hashed (ns)] of a document: a re-index skips reading a file whose size and
    #: modification time are unchanged (see :func:`rlmedic.knowledge.ingest.unchanged_by_stat`)
    stat: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v or k not in ("errors", "stat")}


@dataclass
class Manifest:
    files: dict[str, FileEntry] = field(default_factory=dict)
    cards_hash: str = ""
    embedder: str = ""
    #: chunk ids held by the read-side copies (dense.sqlite, bm25/) and not yet by Chroma
    pending: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Manifest:
        if not path.exists():
            return cls()
        try:
            raw = _read_json(path)
        except UserError as exc:
            raise UserError(f"{exc}: the index manifest is unreadable; delete the index directory and re-index") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("files", {}), dict):
            raise UserError(f"{path}: the index manifest is not an rlmedic manifest; delete the index directory and re-index")
        if raw.get("version") != MANIFEST_VERSION:
            raise UserError(f"{path}: index was written by another rlmedic version; delete it and re-index")
        try:
            files = {k: FileEntry(**v) for k, v in raw.get("files", {}).items()}
        except TypeError as exc:
            raise UserError(f"{path}: the index manifest is damaged ({exc}); delete the index directory and re-index") from exc
        pending = raw.get("pending", [])
        if not isinstance(pending, list) or not all(isinstance(i, str) for i in pending):
            raise UserError(f"{path}: the index manifest is damaged (pending); delete the index directory and re-index")
        return cls(files=files, cards_hash=raw.get("cards_hash", ""), embedder=raw.get("embedder", ""), pending=pending)

    def save(self, path: Path) -> None:
        data = {
            "version": MANIFEST_VERSION,
            "embedder": self.embedder,
            "cards_hash": self.cards_hash,
            "files": {k: v.to_dict() for k, v in sorted(self.files.items())},
        }
        if self.pending:
            data["pending"] = self.pending
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)


class Store:
    """Opens lazily: Chroma and bm25s are imported on first use."""

    def __init__(self, directory: Path, collection: str = COLLECTION) -> None:
        self.directory = Path(directory)
        _check_directory(self.directory)
        #: on a shared Chroma server the collection name is what keeps two stores apart
        self.collection_name = collection
        self.manifest_path = self.directory / "manifest.json"
        self.manifest = Manifest.load(self.manifest_path)
        self._collection = None
        self._bm25 = None
        self._bm25_ids: list[str] | None = None
        self._error_keys: list[tuple[str, str]] | None = None
        self._error_blob = ""
        self._error_starts: list[int] = []
        self._snapshot = None
        self._delta: _Delta | None = None
        self._changing = False

    # -- read-side snapshot -------------------------------------------------------------
    @property
    def snapshot(self):
        """The fresh ``dense.sqlite`` of this store, or None (stale, missing, or a Chroma server holds the vectors)."""
        if self._snapshot is None:
            from rlmedic.knowledge.snapshot import Snapshot
            from rlmedic.settings import chroma_url

            found = None
            if not chroma_url():
                found = Snapshot.open(self.directory / SNAPSHOT_FILE, self.manifest_chunk_stamp())
            self._snapshot = found or False
        return self._snapshot or None

    def snapshot_missing(self) -> bool:
        """True when queries would go to the embedded Chroma for want of a fresh snapshot (an index from before it)."""
        return not chroma_url_set() and self.manifest.files and self.snapshot is None

    def manifest_chunk_stamp(self) -> str:
        """A digest of the chunk ids the manifest lists: a snapshot written for other chunks is stale."""
        from rlmedic.knowledge.snapshot import chunk_stamp

        return chunk_stamp(c for e in self.manifest.files.values() for c in e.chunks)

    # -- dense side -------------------------------------------------------------------
    @property
    def collection(self):
        if self._collection is not None:
            return self._collection
        # chromadb's client registry is not safe to enter from two threads at once (a web server's
        # first concurrent answers saw KeyError / "no attribute 'bindings'" / "tenant" errors)
        with _OPEN_LOCK:
            return self._open_collection()

    def _open_collection(self):
        if self._collection is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
            from rlmedic.memory import collector_paused

            with collector_paused():
                import chromadb
                from chromadb.config import Settings

            from rlmedic.settings import chroma_url

            url = chroma_url()
            if url:  # a shared Chroma server (`chroma run`); see settings.chroma_url
                from urllib.parse import urlsplit

                parts = urlsplit(url)
                if parts.scheme not in ("http", "https") or not parts.hostname:
                    raise UserError(f"--chroma-url {url!r}: not an http(s) URL")
                try:
                    client = chromadb.HttpClient(
                        host=parts.hostname, port=parts.port or (443 if parts.scheme == "https" else 8000),
                        ssl=parts.scheme == "https", settings=Settings(anonymized_telemetry=False),
                    )
                except Exception as exc:  # chromadb raises ValueError/ConnectionError subclasses
                    raise UserError(f"--chroma-url {url}: cannot reach the Chroma server ({exc})") from None
            else:
                client = chromadb.PersistentClient(
                    path=str(self.directory / "chroma"), settings=Settings(anonymized_telemetry=False)
                )
            collection = client.get_or_create_collection(
                self.collection_name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
            )
            self._flush_pending(collection)
            self._collection = collection
        return self._collection

    # -- read side first ---------------------------------------------------------------
    def can_write_read_side_first(self) -> bool:
        """True for a fresh embedded store: nothing indexed yet and no Chroma server."""
        return not chroma_url_set() and not self.manifest.files and not (self.directory / "chroma").exists()

    def add_read_side_first(self, ids: list[str], texts: list[str], metadatas: list[dict[str, Any]],
                            vectors: list[list[float]]) -> None:
        """Store chunks in the read-side copies only (a fresh store; see :meth:`can_write_read_side_first`).

        Importing and opening Chroma cost ~2 s of CPU, most of a fresh install's first answer;
        queries read ``dense.sqlite`` and ``bm25/`` anyway. The ids are listed as ``pending`` in the
        manifest (the caller saves it) and go into Chroma the first time it is opened for this store.
        """
        from rlmedic.knowledge.snapshot import Snapshot
        from rlmedic.knowledge.words import tokenize
        from rlmedic.redact import redact, redact_value

        texts = [redact(t) for t in texts]
        metadatas = [redact_value(m) for m in metadatas]
        self.directory.mkdir(parents=True, exist_ok=True)
        Snapshot.write(self.directory / SNAPSHOT_FILE, ids, texts, metadatas, vectors)
        self._snapshot = None
        self._write_bm25([tokenize(t) or ["_empty_"] for t in texts], ids, _import_bm25s_for_queries())
        self.manifest.pending = list(ids)

    def _flush_pending(self, collection) -> None:
        """Copy the chunks only the read-side copies hold into Chroma (before anything else uses it)."""
        if not self.manifest.pending or chroma_url_set():
            return
        from rlmedic.knowledge.snapshot import Snapshot

        pending = self.manifest.pending
        snapshot = Snapshot.open(self.directory / SNAPSHOT_FILE, stamp=None)
        rows = snapshot.rows(pending) if snapshot is not None else {}
        if snapshot is not None:
            snapshot.close()
        if len(rows) != len(pending):
            # the read-side copy went missing: forget those chunks, so they are indexed again
            for key, entry in list(self.manifest.files.items()):
                if set(entry.chunks) & set(pending):
                    del self.manifest.files[key]
            self.manifest.cards_hash = ""
            rows = {}
        for start in range(0, len(pending), 1000):
            page = [cid for cid in pending[start : start + 1000] if cid in rows]
            if page:
                collection.upsert(ids=page, documents=[rows[c][0] for c in page], metadatas=[rows[c][1] for c in page],
                                  embeddings=[rows[c][2] for c in page])
        self.manifest.pending = []
        self.save_manifest()

    def add(self, ids: list[str], texts: list[str], metadatas: list[dict[str, Any]], vectors: list[list[float]]) -> None:
        """Store chunks, redacted (documents and metadata alike); the BM25 side is built from these documents.

        Callers redact whole documents before chunking (a secret split across two chunks
        would match in neither); this is the last guard before anything reaches the disk.
        """
        from rlmedic.redact import redact, redact_value

        texts = [redact(t) for t in texts]
        metadatas = [redact_value(m) for m in metadatas]
        self._begin_change()
        if self._delta is not None:
            self._delta.upsert(ids, texts, metadatas, vectors)
        for start in range(0, len(ids), 1000):
            end = start + 1000
            self.collection.upsert(
                ids=ids[start:end], documents=texts[start:end], metadatas=metadatas[start:end], embeddings=vectors[start:end]
            )

    def texts_and_vectors(self, ids: list[str]) -> dict[str, tuple[str, list[float]]]:
        """Stored text and vector of each id that exists (to reuse a vector whose chunk did not change)."""
        out: dict[str, tuple[str, list[float]]] = {}
        for start in range(0, len(ids), 1000):
            res = self.collection.get(ids=ids[start : start + 1000], include=["documents", "embeddings"])
            for cid, doc, vec in zip(res["ids"], res["documents"], res["embeddings"]):
                if doc is not None and vec is not None:
                    out[cid] = (doc, [float(x) for x in vec])
        return out

    def delete(self, ids: list[str]) -> None:
        if not ids:
            return
        self._begin_change()
        if self._delta is not None:
            self._delta.delete(ids)
        for start in range(0, len(ids), 1000):
            self.collection.delete(ids=ids[start : start + 1000])

    def count(self) -> int:
        return sum(len(e.chunks) for e in self.manifest.files.values())

    def dense_query(self, vector: list[float], n: int, kind: str | None = None) -> list[tuple[str, float]]:
        if self.snapshot is not None:
            return self.snapshot.dense_query(vector, n, kind)
        total = self.collection.count()
        if total == 0:
            return []
        where = {"kind": kind} if kind else None
        res = self.collection.query(query_embeddings=[vector], n_results=min(n, total), where=where, include=["distances"])
        return list(zip(res["ids"][0], [1.0 - d for d in res["distances"][0]]))

    def get(self, ids: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        if not ids:
            return {}
        if self.snapshot is not None:
            return self.snapshot.get(ids)
        res = self.collection.get(ids=ids, include=["documents", "metadatas"])
        return {i: (doc, meta) for i, doc, meta in zip(res["ids"], res["documents"], res["metadatas"])}

    def vectors(self, ids: list[str]) -> dict[str, list[float]]:
        if not ids:
            return {}
        if self.snapshot is not None:
            return self.snapshot.vectors(ids)
        res = self.collection.get(ids=ids, include=["embeddings"])
        return {i: list(v) for i, v in zip(res["ids"], res["embeddings"])}

    def ids_with_heading(self, heading: str, kind: str = "doc") -> list[str]:
        """Chunks whose deepest heading (normalised) is ``heading``."""
        if not heading:
            return []
        if self.snapshot is not None:
            return self.snapshot.ids_with_heading(heading, kind)
        res = self.collection.get(where={"$and": [{"heading": heading}, {"kind": kind}]}, include=[])
        return list(res["ids"])

    # -- keeping the read-side copies in step ----------------------------------------------
    def _begin_change(self) -> None:
        """Before this store's first write: note whether the read-side copy matches Chroma, so the
        rebuild can apply this session's changes to it instead of reading every chunk back.

        The copy counts only if it lists exactly Chroma's ids in Chroma's order and no earlier
        session stopped between a write and its rebuild (the ``.changing`` marker written here
        and removed by :meth:`rebuild_bm25`; a chunk updated in place keeps its id, so ids
        alone could not tell).
        """
        if self._changing:
            return
        self._changing = True
        if chroma_url_set():
            return
        from rlmedic.knowledge.snapshot import Snapshot

        marker = self.directory / CHANGING_MARKER
        if not marker.exists():
            base = Snapshot.open(self.directory / SNAPSHOT_FILE, stamp=None)
            if base is not None and base.ids == list(self.collection.get(include=[])["ids"]):
                self._delta = _Delta(base)
        self.directory.mkdir(parents=True, exist_ok=True)
        marker.touch()

    # -- sparse side ------------------------------------------------------------------
    def rebuild_bm25(self) -> None:
        """Re-tokenise every chunk and rewrite the read-side snapshot; cheap next to embedding.

        Called whenever chunks changed, so both read-side copies follow Chroma. When the old
        snapshot matched Chroma before this session's writes (:meth:`_begin_change`), the new one
        is that snapshot with the writes applied (``tests/test_store_delta.py`` checks it equals
        one read back from Chroma); otherwise every chunk is read back from Chroma, a page at a time.
        """
        import bm25s

        from rlmedic.knowledge.snapshot import Snapshot
        from rlmedic.knowledge.words import tokenize
        from rlmedic.memory import release_free_memory

        release_free_memory()  # the rebuild's peak starts from what indexing left in use, not its high-water mark
        total = self.collection.count()
        tokens: list[list[str]] = []
        ids: list[str] = []
        delta, self._delta = self._delta, None
        if delta is not None and (delta.overflow or len(delta.order()) != total):
            delta.close()
            delta = None

        def from_chroma():
            # a page at a time: holding every document and vector of a 10,000-thread store as Python
            # objects at once is what took `sync-issues` past 1 GB
            for offset in range(0, total, REBUILD_PAGE):
                res = self.collection.get(include=["documents", "metadatas", "embeddings"], limit=REBUILD_PAGE, offset=offset)
                yield list(res["ids"]), [d or "" for d in res["documents"]], res["metadatas"], res["embeddings"]

        def pages():
            for page_ids, docs, metas, vectors in (delta.pages(REBUILD_PAGE) if delta is not None else from_chroma()):
                tokens.extend(tokenize(d) or ["_empty_"] for d in docs)
                ids.extend(page_ids)
                yield page_ids, docs, metas, vectors

        self._snapshot = None
        try:
            if chroma_url_set():
                for _page in pages():
                    pass
            else:
                # stamped with the ids Chroma holds: used only while the manifest lists the same
                Snapshot.write_pages(self.directory / SNAPSHOT_FILE, pages(), total)
        finally:
            if delta is not None:
                delta.close()
        (self.directory / CHANGING_MARKER).unlink(missing_ok=True)
        self._changing = False
        self._write_bm25(tokens, ids, bm25s)

    def _write_bm25(self, tokens: list[list[str]], ids: list[str], bm25s) -> None:
        bm25_dir = self.directory / "bm25"
        bm25_dir.mkdir(parents=True, exist_ok=True)
        if not ids:
            (bm25_dir / "ids.json").write_text("[]", encoding="utf-8")
            self._bm25, self._bm25_ids = None, []
            return
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        del tokens
        retriever.save(str(bm25_dir), show_progress=False)
        (bm25_dir / "ids.json").write_text(json.dumps(ids), encoding="utf-8")
        self._bm25, self._bm25_ids = retriever, ids

    def sparse_query(self, tokens: list[str], n: int) -> list[tuple[str, float]]:
        if self._bm25_ids is None:
            ids_path = self.directory / "bm25" / "ids.json"
            if not ids_path.exists():
                return []
            self._bm25_ids = _read_json(ids_path)
            if self._bm25_ids:
                self._bm25 = _import_bm25s_for_queries().BM25.load(str(self.directory / "bm25"))
        if not self._bm25_ids or not tokens or self._bm25 is None:
            return []
        vocab = self._bm25.vocab_dict
        known = [t for t in tokens if t in vocab]
        if not known:
            return []
        docs, scores = self._bm25.retrieve([known], k=min(n, len(self._bm25_ids)), show_progress=False, n_threads=1)
        return [(self._bm25_ids[int(d)], float(s)) for d, s in zip(docs[0], scores[0]) if s > 0]

    # -- error lines (issue threads) ---------------------------------------------------
    def error_matches(self, query_keys: list[str]) -> dict[str, str]:
        """Chunk id -> the stored error line that one of ``query_keys`` matches.

        Keys are normalised error lines (:func:`rlmedic.knowledge.threads.normalize_error`)
        and match as :func:`rlmedic.knowledge.threads.keys_match` says; they live in the
        manifest, so this needs neither Chroma nor BM25. Written with C-level string
        searches: tens of thousands of stored lines cost a few milliseconds.
        """
        import bisect

        from rlmedic.knowledge.threads import MIN_MATCH_CHARS

        if not query_keys:
            return {}
        if self._error_keys is None:
            self._error_keys = [(k, e.chunks[0]) for e in self.manifest.files.values() if e.chunks for k in e.errors]
            self._error_blob = "\n".join(k for k, _ in self._error_keys)
            self._error_starts = []
            pos = 0
            for k, _ in self._error_keys:
                self._error_starts.append(pos)
                pos += len(k) + 1
        keys, blob, starts = self._error_keys, self._error_blob, self._error_starts
        found: dict[str, str] = {}
        for q in query_keys:
            # a stored line inside the query line (the query has more prefix or context)
            for key, chunk in keys:
                if chunk not in found and key in q and (key == q or len(key) >= MIN_MATCH_CHARS):
                    found[chunk] = key
            if len(q) < MIN_MATCH_CHARS:
                continue
            # the query line inside a stored line
            at = blob.find(q)
            while at >= 0:
                i = bisect.bisect_right(starts, at) - 1
                key, chunk = keys[i]
                if at + len(q) <= starts[i] + len(key):
                    found.setdefault(chunk, key)
                at = blob.find(q, at + 1)
        return found

    def reload_manifest(self) -> None:
        """Read the manifest again (another session of this process may have written it since)."""
        self.manifest = Manifest.load(self.manifest_path)

    def save_manifest(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._error_keys = None
        self.manifest.save(self.manifest_path)


def chroma_url_set() -> bool:
    from rlmedic.settings import chroma_url

    return bool(chroma_url())


def _import_bm25s_for_queries():
    """bm25s without scipy: loading and querying a saved index needs only numpy.

    bm25s imports scipy.sparse when it can (0.3 s of CPU) but uses it only to build an
    index; a ``None`` entry in ``sys.modules`` makes that optional import fail for this
    one import. Indexing later in the same process still works (bm25s's numpy backend).
    """
    import sys

    if "bm25s" in sys.modules or "scipy.sparse" in sys.modules:
        import bm25s

        return bm25s
    sys.modules["scipy.sparse"] = None  # type: ignore[assignment]
    try:
        import bm25s
    finally:
        del sys.modules["scipy.sparse"]
    return bm25s


def _read_json(path: Path) -> Any:
    """A JSON file of the index, read as user input: a regular file, bounded (it lives wherever --index-dir says)."""
    from rlmedic.bounded import load_json
    from rlmedic.confine import Confinement

    return load_json(Confinement.for_paths([path]).read_bytes(path, whole=True), str(path))


def _check_directory(directory: Path) -> None:
    """The index directory must be a directory, or creatable as one (``/dev/null/index`` and a file are neither)."""
    path = directory.expanduser()
    for candidate in (path, *path.parents):
        try:
            exists = candidate.exists()
        except OSError as exc:
            raise UserError(f"{directory}: cannot use as the index directory ({exc.strerror or exc})") from exc
        if exists:
            if not candidate.is_dir():
                what = "is" if candidate == path else f"lies under {candidate}, which is"
                raise UserError(f"{directory}: {what} not a directory; point --index-dir or RLMEDIC_HOME at a directory")
            return


class _Delta:
    """This session's writes to Chroma, kept to update a read-side snapshot that matched Chroma before them.

    Mirrors Chroma's order of ``get()``: an upserted id that exists keeps its place, a new one
    (or one deleted and added again) goes last, a deleted one leaves. Past :attr:`MAX_ROWS`
    written chunks it gives up (``overflow``) and the rebuild reads Chroma back, a page at a time,
    so memory stays bounded on a large sync.
    """

    MAX_ROWS = 4000

    def __init__(self, base: Any) -> None:
        self.base = base  # the old Snapshot (its rows, metadata and vectors)
        self.base_ids: set[str] = set(base.ids)
        self.deleted: set[str] = set()
        self.appended: dict[str, None] = {}
        self.rows: dict[str, tuple[str, dict | None, Any]] = {}
        self.overflow = False

    def delete(self, ids: list[str]) -> None:
        for cid in ids:
            self.rows.pop(cid, None)
            if cid in self.appended:
                del self.appended[cid]
            elif cid in self.base_ids:
                self.deleted.add(cid)

    def upsert(self, ids: list[str], docs: list[str], metas: list[dict], vectors: list[Any]) -> None:
        if self.overflow:
            return
        import numpy as np

        for cid, doc, meta, vec in zip(ids, docs, metas, vectors):
            if not ((cid in self.base_ids and cid not in self.deleted) or cid in self.appended):
                self.appended[cid] = None
            self.rows[cid] = (doc, meta, np.asarray(vec, dtype=np.float32))
        if len(self.rows) > self.MAX_ROWS:
            self.overflow = True
            self.rows.clear()

    def order(self) -> list[str]:
        return [cid for cid in self.base.ids if cid not in self.deleted] + list(self.appended)

    def pages(self, size: int):
        """``(ids, documents, metadatas, vectors)`` in Chroma's order, ``size`` chunks at a time."""
        import numpy as np

        order = self.order()
        for start in range(0, len(order), size):
            page = order[start : start + size]
            old = self.base.rows([cid for cid in page if cid not in self.rows])
            docs, metas, vectors = [], [], []
            for cid in page:
                doc, meta, vec = self.rows[cid] if cid in self.rows else old[cid]
                docs.append(doc)
                metas.append(meta)
                vectors.append(vec)
            yield page, docs, metas, np.stack(vectors) if vectors else np.zeros((0, 0), np.float32)

    def close(self) -> None:
        self.base.close()
