"""Add documents to the index, incrementally.

A file is re-chunked and re-embedded only when its content hash changed; files that
disappeared from an indexed folder leave the index. Built-in playbook cards are indexed
the same way (as source ``card:<id>``) the first time an index is used.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rlmedic.confine import Confinement, redact
from rlmedic.errors import UserError
from rlmedic.knowledge.chunking import MAX_DOC_BYTES, Chunk, chunk_document, content_hash, decode_document, discover
from rlmedic.knowledge.embeddings import MAX_SEQ_LENGTH, Embedder
from rlmedic.knowledge.store import FileEntry, Store

CARDS_KEY = "<builtin-cards>"
#: Bump when chunking or embedding changes so old indexes are rebuilt, not mixed.
PIPELINE = f"chunks-v2/{Embedder.name}@{MAX_SEQ_LENGTH}"
#: The same for issue threads (their own store: see :class:`rlmedic.knowledge.index.KnowledgeBase`).
THREADS_PIPELINE = f"threads-v1/{Embedder.name}@{MAX_SEQ_LENGTH}"
#: Threads embedded (and the manifest saved) per batch.
THREAD_BATCH = 256

#: progress(done_files, total_files, current_name)
Progress = Callable[[int, int, str], None]


@dataclass
class IndexReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path: reason"
    warnings: list[str] = field(default_factory=list)
    chunks_embedded: int = 0
    total_chunks: int = 0

    def to_dict(self) -> dict:
        return dict(vars(self))


def _display_source(file: Path, root: Path) -> str:
    """Path shown in citations: relative to the indexed folder, prefixed by its name."""
    try:
        return str(Path(root.name) / file.relative_to(root))
    except ValueError:
        return file.name


#: Chunks of several files are embedded together, up to this many at once: one file's handful of
#: chunks made a batch too small for torch (the numpy path took them, one thread), and the forward
#: ran half-empty; indexing the docs went 33 -> ~20 s. The manifest is saved after each batch.
EMBED_BATCH_CHUNKS = 256


def _embed_and_store(store: Store, chunks: list[Chunk], embedder, known: dict[str, list[float]] | None = None) -> int:
    """Embed and store ``chunks``; a chunk whose text is in ``known`` keeps that vector. Returns how many were embedded."""
    if not chunks:
        return 0
    known = known or {}
    todo = [c for c in chunks if c.text not in known]
    fresh = dict(zip((c.text for c in todo), embedder.embed([c.text for c in todo]))) if todo else {}
    vectors = [known.get(c.text) or fresh[c.text] for c in chunks]
    store.add([c.id for c in chunks], [c.text for c in chunks], [c.metadata() for c in chunks], vectors)
    return len(todo)


class _PendingFiles:
    """Files chunked but not stored yet: their old chunks go, the new ones are embedded in one batch."""

    def __init__(self, store: Store, embedder, report: IndexReport, *, reuse: bool = True) -> None:
        self.store, self.embedder, self.report, self.reuse = store, embedder, report, reuse
        self.files: list[tuple[str, FileEntry, bool]] = []
        self.chunks: list[Chunk] = []
        self.old: list[str] = []

    def add(self, key: str, entry: FileEntry, chunks: list[Chunk], old: FileEntry | None) -> None:
        self.files.append((key, entry, old is not None))
        self.chunks += chunks
        if old:
            self.old += old.chunks
        if len(self.chunks) >= EMBED_BATCH_CHUNKS:
            self.flush()

    def flush(self) -> None:
        if not self.files:
            return
        known: dict[str, list[float]] = {}
        if self.old and self.reuse:
            # an edited file's unchanged chunks keep their vectors: only what changed is embedded
            known = {text: vec for text, vec in self.store.texts_and_vectors(self.old).values()}
        if self.old:
            self.store.delete(self.old)
        embedded = _embed_and_store(self.store, self.chunks, self.embedder, known)
        for key, entry, updated in self.files:
            self.store.manifest.files[key] = entry
            (self.report.updated if updated else self.report.added).append(key)
        self.report.chunks_embedded += embedded
        self.store.save_manifest()  # after each batch: an interrupted run keeps what it did
        self.files, self.chunks, self.old = [], [], []


#: A file modified this close to (or after) the moment it was hashed may have changed again within
#: the same timestamp; only older modification times let a re-index trust size and time alone.
STAT_TRUST_NS = 2_000_000_000


def unchanged_by_stat(entry: FileEntry | None, st: os.stat_result) -> bool:
    """Whether ``entry`` (the manifest's record of a file) vouches for the file without reading it.

    Size and modification time equal to those recorded when its content was hashed, and that
    modification time well before the hashing (a write in the same clock tick as the hash
    would leave the time unchanged). Anything else is read and hashed, as before.
    """
    record = entry.stat if entry is not None and entry.hash else None
    if not isinstance(record, list) or len(record) != 3 or not all(type(v) is int for v in record):
        return False  # none recorded (an index from before), or a hand-edited manifest
    size, mtime_ns, hashed_ns = record
    return st.st_size == size and st.st_mtime_ns == mtime_ns and mtime_ns + STAT_TRUST_NS < hashed_ns


def _stat_record(st: os.stat_result, hashed_ns: int) -> list[int]:
    return [st.st_size, st.st_mtime_ns, hashed_ns]


def index_paths(
    paths: Sequence[str | Path],
    store: Store,
    *,
    embedder=None,
    progress: Progress | None = None,
    max_bytes: int = MAX_DOC_BYTES,
) -> IndexReport:
    """Index files and folders. Explicit bad files raise :class:`UserError`; bad files
    found inside a folder are skipped and named in the report."""
    report = IndexReport()
    same_pipeline = store.manifest.embedder == PIPELINE
    if not same_pipeline and store.manifest.files:
        # chunks made by another chunker/embedding setup: every file counts as changed
        for entry in store.manifest.files.values():
            entry.hash = ""
        store.manifest.cards_hash = ""
        report.warnings.append("the index was built with other chunking/embedding settings: re-embedding everything")
    store.manifest.embedder = PIPELINE
    roots: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        try:
            is_dir = p.is_dir()
        except OSError as exc:  # a name too long, a parent without search permission
            raise UserError(f"{raw}: cannot access ({exc.strerror or exc})") from exc
        if not is_dir:  # a FIFO or /dev/zero is refused here, not read as an empty document
            Confinement.for_paths([p]).regular_file(p)
        roots.append(p.resolve())
    files = discover(roots)
    if not files:
        names = ", ".join(str(p) for p in paths)
        raise UserError(f"{names}: nothing to index (no Markdown, reStructuredText or text files)")
    explicit = {r for r in roots if r.is_file()}
    # reads go through the one confinement point: a symlink inside a folder that
    # points outside the folders the user named is refused, not followed
    confinement = Confinement(roots=roots, max_bytes=max_bytes + 1)
    changed: list[tuple[Path, Path, bytes, str]] = []
    for file, root in files:
        key = str(file)
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            err = UserError(f"{key.encode('utf-8', 'backslashreplace').decode()}: the file name is not valid UTF-8; rename it")
            if file in explicit:
                raise err from None
            report.skipped.append(str(err))
            continue
        try:
            st = confinement.check(file).stat()
            entry = store.manifest.files.get(key)
            if unchanged_by_stat(entry, st):
                report.unchanged.append(key)  # size and time as when its content was hashed: not read again
                continue
            size = st.st_size
            if size > max_bytes:
                raise UserError(
                    f"{file}: {size / 2**20:.1f} MB is over the {max_bytes / 2**20:.0f} MB limit for one document; split it"
                )
            hashed_ns = time.time_ns()
            data = confinement.read_bytes(file)
        except PermissionError as exc:
            err = UserError(f"{file}: cannot read ({exc.strerror})")
            if file in explicit:
                raise err from exc
            report.skipped.append(str(err))
            continue
        except UserError as err:
            if file in explicit:
                raise
            report.skipped.append(str(err))
            continue
        digest = content_hash(data)
        if entry and entry.hash == digest:
            entry.stat = _stat_record(st, hashed_ns)  # touched, not changed: trusted by its time from now on
            report.unchanged.append(key)
            continue
        changed.append((file, root, data, digest, _stat_record(st, hashed_ns)))
    # files that were indexed under these roots and are gone now
    for key in list(store.manifest.files):
        if key == CARDS_KEY:
            continue
        path = Path(key)
        if any(path == r or path.is_relative_to(r) for r in roots if r.is_dir()) and not path.exists():
            store.delete(store.manifest.files.pop(key).chunks)
            report.removed.append(key)
    if changed:
        from rlmedic.knowledge.embeddings import default_embedder

        embedder = embedder or default_embedder()
    pending = _PendingFiles(store, embedder, report, reuse=same_pipeline)
    for n, (file, root, data, digest, stat_record) in enumerate(changed, 1):
        key = str(file)
        if progress:
            progress(n - 1, len(changed), file.name)
        try:
            text, warning = decode_document(data, str(file))
        except UserError as err:
            if file in explicit:
                raise
            report.skipped.append(str(err))
            continue
        if warning:
            report.warnings.append(warning)
        if not text.strip():
            msg = f"{file}: empty, nothing to index"
            if file in explicit and len(files) == 1:
                raise UserError(msg)
            report.skipped.append(msg)
            continue
        chunks = chunk_document(redact(text), _display_source(file, root), key)
        entry = FileEntry(hash=digest, source=_display_source(file, root), root=str(root), chunks=[c.id for c in chunks],
                          stat=stat_record)
        pending.add(key, entry, chunks, store.manifest.files.get(key))
    if changed:
        pending.flush()
    if not (report.added or report.updated or report.unchanged or report.removed):
        names = ", ".join(str(p) for p in paths)
        raise UserError(f"{names}: nothing to index (every file was skipped: {'; '.join(report.skipped)[:300]})")
    if progress and changed:
        progress(len(changed), len(changed), "")
    if changed or report.removed or store.snapshot_missing():
        store.rebuild_bm25()
    store.save_manifest()
    report.total_chunks = store.count()
    return report


def _thread_chunk(record: dict) -> tuple[Chunk, dict]:
    from rlmedic.knowledge import threads

    chunk = Chunk(threads.chunk_id(record), threads.to_text(record), threads.source(record), "", record["title"], 0, 0, kind="issue")
    meta = chunk.metadata() | {
        "url": record["url"],
        "closed_at": record.get("closed_at", ""),
        "state_reason": record.get("state_reason", ""),
        "fix": threads.fix_summary(record),
        "fixed_in": record.get("fixed_in", ""),
        "fixed_in_basis": record.get("fixed_in_basis", ""),
        "resolution": threads.resolution_summary(record),
    }
    return chunk, meta


def index_threads(
    records: Sequence[dict], store: Store, *, embedder=None, progress: Progress | None = None
) -> IndexReport:
    """Index issue-thread records (:mod:`rlmedic.knowledge.threads`) as one chunk each.

    A thread is re-embedded only when its record changed (content hash in the manifest);
    the manifest is saved after each batch, so an interrupted sync keeps what it did.
    """
    from rlmedic.knowledge import threads

    report = IndexReport()
    if store.manifest.embedder != THREADS_PIPELINE and store.manifest.files:
        for entry in store.manifest.files.values():
            entry.hash = ""
        report.warnings.append("the threads were indexed with other embedding settings: re-embedding them")
    store.manifest.embedder = THREADS_PIPELINE
    latest = {threads.key(r): r for r in records}  # an export may repeat a thread: the last one wins
    changed: list[tuple[str, str, dict]] = []
    for key, record in latest.items():
        digest = threads.record_hash(record)
        entry = store.manifest.files.get(key)
        if entry and entry.hash == digest:
            report.unchanged.append(key)
        else:
            changed.append((key, digest, record))
    if changed:
        from rlmedic.knowledge.embeddings import default_embedder

        embedder = embedder or default_embedder()
    for start in range(0, len(changed), THREAD_BATCH):
        part = changed[start : start + THREAD_BATCH]
        if progress:
            progress(start, len(changed), part[0][0])
        pairs = [_thread_chunk(record) for _key, _digest, record in part]
        # numpy, not torch: ~40 threads/s on 2 cores at ~130 MB, against ~70/s at ~420 MB with torch
        # (a 10,000-thread sync peaked at 700 MB with torch; benchmarks/sync_issues.py)
        vectors = embedder.embed([threads.embed_text(record) for _key, _digest, record in part], engine="numpy")
        # a thread's chunk id is derived from owner/repo#N, so the upsert replaces the old one
        store.add([c.id for c, _ in pairs], [c.text for c, _ in pairs], [m for _, m in pairs], vectors)
        for (key, digest, record), (chunk, _meta) in zip(part, pairs):
            (report.updated if key in store.manifest.files else report.added).append(key)
            store.manifest.files[key] = FileEntry(
                hash=digest, source=chunk.source, root="", chunks=[chunk.id], errors=threads.error_keys(record["error_lines"])
            )
        report.chunks_embedded += len(part)
        store.save_manifest()
    if progress and changed:
        progress(len(changed), len(changed), "")
    if changed:
        store.rebuild_bm25()
    store.save_manifest()
    report.total_chunks = store.count()
    return report


def cards_hash() -> str:
    from rlmedic import __version__
    from rlmedic.knowledge.cards import CARDS_DIR

    h = hashlib.sha256(f"{__version__}\0{PIPELINE}".encode())
    for path in sorted(CARDS_DIR.glob("*.yaml")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def card_chunks() -> list[Chunk]:
    from rlmedic.knowledge.cards import builtin_cards

    chunks = []
    for card in builtin_cards():
        text = card.to_text()
        chunk_id = "card-" + card.id
        chunks.append(
            Chunk(chunk_id, text, f"card:{card.id}", "", card.title, 1, text.count("\n") + 1, kind="card")
        )
    return chunks


def ensure_cards(store: Store, *, embedder=None) -> bool:
    """Index the built-in cards if they are missing or changed. Returns True if it did."""
    digest = cards_hash()
    if store.manifest.cards_hash == digest:
        return False
    from rlmedic.knowledge.embeddings import default_embedder
    from rlmedic.notices import step

    old = store.manifest.files.pop(CARDS_KEY, None)
    if old:
        store.delete(old.chunks)
    chunks = card_chunks()
    from rlmedic.knowledge.prebuilt import known_vectors

    # the cards' vectors ship with the package (knowledge/prebuilt.py): only a card added or edited
    # since they were computed is embedded here (torch and the model: seconds, announced at once)
    known = known_vectors(chunks)
    todo = sum(1 for c in chunks if c.text not in known)
    if todo:
        label = (f"embedding {todo} of the {len(chunks)} built-in playbook cards in {store.directory} "
                 f"(once per install or card change; their shipped vectors are stale: see knowledge/prebuilt.py)")
    else:
        label = f"indexing the {len(chunks)} built-in playbook cards in {store.directory} (once per install)"
    with step(label, after=0 if todo else 2):
        if not todo and store.can_write_read_side_first():
            # a fresh install: the read-side copies only; Chroma gets the cards when it is first opened
            store.add_read_side_first([c.id for c in chunks], [c.text for c in chunks], [c.metadata() for c in chunks],
                                      [known[c.text] for c in chunks])
        else:
            _embed_and_store(store, chunks, embedder or default_embedder(), known)
        store.manifest.files[CARDS_KEY] = FileEntry(hash=digest, source="cards", root="", chunks=[c.id for c in chunks])
        store.manifest.cards_hash = digest
        store.manifest.embedder = store.manifest.embedder or PIPELINE
        if not store.manifest.pending:
            store.rebuild_bm25()
        store.save_manifest()
    return True


#: The known-issue records' pipeline (their own store; see KnowledgeBase.known).
KNOWN_PIPELINE = f"known-v1/{Embedder.name}@{MAX_SEQ_LENGTH}"
KNOWN_KEY = "<known-issues>"


def known_chunks(pack) -> list[Chunk]:
    """One chunk per known-issue record (``kind="known"``, id ``known-<record id>``, source ``owner/repo#N``)."""
    chunks = []
    for record in pack.records:
        text = record.to_text()
        chunks.append(Chunk("known-" + record.id, text, record.source, "", record.title, 1, text.count("\n") + 1, kind="known"))
    return chunks


def known_current(store: Store, pack) -> bool:
    """True when ``store`` holds exactly the records of ``pack`` (same content, same embedder)."""
    from rlmedic.knowledge.known.load import pack_hash

    return store.manifest.cards_hash == f"{KNOWN_PIPELINE}:{pack_hash(pack)}"


def ensure_known(store: Store, pack, *, embedder=None) -> bool:
    """Index the known-issue records of ``pack`` if they are missing or changed. Returns True if it did.

    Records embed like cards (their whole text); the digest covers every record's content and the
    embedder, so a new team record or a new release of the pack re-embeds, nothing else does.
    """
    from rlmedic.knowledge.known.load import pack_hash

    digest = f"{KNOWN_PIPELINE}:{pack_hash(pack)}"
    if store.manifest.cards_hash == digest:
        return False
    from rlmedic.knowledge.embeddings import default_embedder

    old = store.manifest.files.pop(KNOWN_KEY, None)
    if old:
        store.delete(old.chunks)
    chunks = known_chunks(pack)
    metas = [c.metadata() | {"url": r.source_url, "record": r.id} for c, r in zip(chunks, pack.records)]
    if chunks:
        from rlmedic.notices import step

        # the first `search --kind known` after an install, a new release or a new team record waits for this
        with step(f"indexing the {len(chunks)} known-issue records in {store.directory} (once per change)", after=0):
            vectors = (embedder or default_embedder()).embed([c.text for c in chunks])
            store.add([c.id for c in chunks], [c.text for c in chunks], metas, vectors)
    store.manifest.files[KNOWN_KEY] = FileEntry(hash=digest, source="known", root="", chunks=[c.id for c in chunks])
    store.manifest.cards_hash = digest
    store.manifest.embedder = KNOWN_PIPELINE
    store.rebuild_bm25()
    store.save_manifest()
    return True

