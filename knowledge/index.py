"""One entry point to the knowledge base for tools, the agent and the front doors.

Upstream issue threads live in a store of their own (``<index>/issues/``): thousands of
threads must not change how documents and cards rank (BM25 statistics, dense
candidates) nor how fast they are found. A search over every kind merges both stores.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from rlmedic.errors import UserError
from rlmedic.knowledge.ingest import CARDS_KEY, IndexReport, Progress, ensure_cards, index_paths, index_threads
from rlmedic.knowledge.retrieve import Mode, SearchResult, search
from rlmedic.knowledge.store import Store
from rlmedic.settings import index_dir


#: The issue threads' Chroma collection (apart from the docs' even on one shared server).
ISSUES_COLLECTION = "rlmedic_issues"
#: The known-issue records' collection (``<index>/known/``; see :mod:`rlmedic.knowledge.known`).
KNOWN_COLLECTION = "rlmedic_known"


class _LastQuery:
    """Embeds a query once: ``ask`` searches cards, docs and threads with the same text."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self._last: tuple[str, list[float]] | None = None

    def embed_query(self, text: str) -> list[float]:
        if self._last is None or self._last[0] != text:
            from rlmedic.knowledge.embeddings import default_embedder

            self._last = (text, (self.embedder or default_embedder()).embed_query(text))
        return self._last[1]


def known_results(query: str, k: int = 2) -> list[SearchResult]:
    """Known-issue records the query's own lines match exactly (error string, regex, exception), as search results.

    In-process (no embedding), so a search over every kind names the known issue without indexing it.
    """
    from rlmedic.knowledge.known import match

    out = []
    for m in match(question=query, k=k):
        if not m.certain:
            continue
        r = m.record
        text = f"{m.advice}\n" + r.to_text()
        out.append(SearchResult(id="known-" + r.id, source=r.source, section=r.title, score=m.score, text=text,
                                kind="known", path=r.path, line_start=1, line_end=text.count("\n") + 1, url=r.source_url))
    return out


_FOLDER_LOCKS: dict[str, threading.Lock] = {}
_FOLDER_LOCKS_GUARD = threading.Lock()


def _folder_lock(directory: Path) -> threading.Lock:
    """One lock per index folder in this process, whichever KnowledgeBase object asks."""
    with _FOLDER_LOCKS_GUARD:
        return _FOLDER_LOCKS.setdefault(os.path.realpath(directory), threading.Lock())


class KnowledgeBase:
    """The index at ``directory`` (default: the user's data dir), cards included."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, with_cards: bool = True, embedder=None) -> None:
        self.store = Store(index_dir(directory))
        self.issues = Store(self.store.directory / "issues", collection=ISSUES_COLLECTION)
        #: known-issue records, embedded on the first ``search(kind="known")`` (14 s per 300 records
        #: on 2 cores: never on the answer path, which matches records in-process; see known_ready)
        self.known = Store(self.store.directory / "known", collection=KNOWN_COLLECTION)
        self.with_cards = with_cards
        self.embedder = embedder
        self._queries = _LastQuery(embedder)
        self._cards_checked = False
        self._cards_lock = threading.Lock()

    @property
    def github_cache_path(self) -> Path:
        """ETags and slimmed answers of the GitHub API, so a re-sync costs 304s."""
        return self.issues.directory / "github-cache.json"

    def index_threads(self, records: Sequence[dict], progress: Progress | None = None) -> IndexReport:
        """Index upstream issue-thread records (see :mod:`rlmedic.knowledge.threads`)."""
        return index_threads(records, self.issues, embedder=self.embedder, progress=progress)

    def has_issues(self) -> bool:
        return bool(self.issues.manifest.files)

    def known_ready(self, pack=None) -> bool:
        """True when the known-issue records in the index are the current ones (no embedding needed)."""
        from rlmedic.knowledge.ingest import known_current
        from rlmedic.knowledge.known import load

        pack = load() if pack is None else pack
        return bool(pack.records) and known_current(self.known, pack)

    def _search_known(self, query: str, k: int, mode: Mode | None) -> list[SearchResult]:
        from rlmedic.knowledge.ingest import ensure_known
        from rlmedic.knowledge.known import load

        pack = load()
        if not pack.records:
            raise UserError("no known-issue records are loaded (RLMEDIC_KNOWN_ISSUES_BUILTIN=0 and no --known-issues folder?)")
        ensure_known(self.known, pack, embedder=self.embedder)
        return search(self.known, query, k, mode=mode or "hybrid", kind="known", embedder=self._queries)

    def index(self, paths: Sequence[str | Path], progress: Progress | None = None) -> IndexReport:
        return index_paths(paths, self.store, embedder=self.embedder, progress=progress)

    def has_documents(self) -> bool:
        """True when user docs (not just the built-in cards) are indexed."""
        return any(key != CARDS_KEY for key in self.store.manifest.files)

    def search(self, query: str, k: int = 5, *, mode: Mode | None = None, kind: str | None = None) -> list[SearchResult]:
        """Default mode: card-guided hybrid when cards are indexed, plain hybrid otherwise.

        ``kind="known"`` searches the known-issue records (their own store, indexed on first use).
        """
        if kind == "issue":
            if not self.has_issues():
                raise UserError(
                    f"no issue threads in {self.issues.directory} yet: fetch some with `rlmedic sync-issues`"
                )
            return search(self.issues, query, k, mode=mode or "hybrid", kind="issue", embedder=self._queries)
        if kind == "known":
            return self._search_known(query, k, mode)
        results = self._search_main(query, k, mode=mode, kind=kind)
        if kind is None and self.has_issues():
            # both stores score by the same reciprocal-rank formula, so scores compare
            threads = search(self.issues, query, k, mode=mode or "hybrid", kind="issue", embedder=self._queries)
            results = sorted(results + threads, key=lambda r: r.score, reverse=True)[:k]
        if kind is None:
            # a known-issue record whose error string or regex is in the query is the answer to name first
            results = (known_results(query) + results)[:k]
        return results

    def _search_main(self, query: str, k: int, *, mode: Mode | None, kind: str | None) -> list[SearchResult]:
        if self.with_cards and not self._cards_checked:
            # concurrent first questions (a web server, Slack: one KnowledgeBase per session) index the
            # cards once: the lock is the folder's, and the manifest is read again inside it (another
            # session may have just written the cards; two writers at once broke dense.sqlite)
            with self._cards_lock, _folder_lock(self.store.directory):
                if not self._cards_checked:
                    self.store.reload_manifest()
                    ensure_cards(self.store, embedder=self.embedder)
                    self._cards_checked = True
        if kind == "doc" and not self.has_documents():
            raise UserError(f"no documents indexed in {self.store.directory} yet: add some with `rlmedic index PATH`")
        mode = mode or ("guided" if self.with_cards else "hybrid")
        return search(self.store, query, k, mode=mode, kind=kind, embedder=self._queries)
