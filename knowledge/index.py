"""One entry point to the knowledge base for tools, the agent and the front doors."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rlmedic.errors import UserError
from rlmedic.knowledge.ingest import CARDS_KEY, IndexReport, Progress, ensure_cards, index_paths
from rlmedic.knowledge.retrieve import Mode, SearchResult, search
from rlmedic.knowledge.store import Store
from rlmedic.settings import index_dir


class KnowledgeBase:
    """The index at ``directory`` (default: the user's data dir), cards included."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, with_cards: bool = True, embedder=None) -> None:
        self.store = Store(index_dir(directory))
        self.with_cards = with_cards
        self.embedder = embedder
        self._cards_checked = False

    def index(self, paths: Sequence[str | Path], progress: Progress | None = None) -> IndexReport:
        return index_paths(paths, self.store, embedder=self.embedder, progress=progress)

    def has_documents(self) -> bool:
        """True when user docs (not just the built-in cards) are indexed."""
        return any(key != CARDS_KEY for key in self.store.manifest.files)

    def search(self, query: str, k: int = 5, *, mode: Mode | None = None, kind: str | None = None) -> list[SearchResult]:
        """Default mode: card-guided hybrid when cards are indexed, plain hybrid otherwise."""
        if self.with_cards and not self._cards_checked:
            ensure_cards(self.store, embedder=self.embedder)
            self._cards_checked = True
        if kind == "doc" and not self.has_documents():
            raise UserError(f"no documents indexed in {self.store.directory} yet: add some with `rlmedic index PATH`")
        mode = mode or ("guided" if self.with_cards else "hybrid")
        return search(self.store, query, k, mode=mode, kind=kind, embedder=self.embedder)
