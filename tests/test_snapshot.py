"""The read-side snapshot (dense.sqlite): same answers as Chroma, used only while fresh, no chromadb on queries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlmedic.knowledge.index import KnowledgeBase
from rlmedic.knowledge.store import SNAPSHOT_FILE

DOCS = {
    "memory.md": "# Memory\n\n## Rollout OOM\n\nLower `mem_fraction_static` when SGLang runs out of memory during rollouts.\n\n"
    "## Trainer OOM\n\nReduce actor.mb_spec.max_tokens_per_mb when the FSDP trainer hits CUDA out of memory.\n",
    "network.md": "# Networking\n\n## NCCL\n\nA NCCL watchdog timeout usually means one rank never entered the collective.\n\n"
    "## Interfaces\n\nSet NCCL_SOCKET_IFNAME on multi-node jobs so ranks find each other.\n",
    "resume.md": "# Checkpoints\n\n## Resume\n\nPoint the recover config at the last saved step to resume a run.\n",
}
QUERIES = ["CUDA out of memory in the trainer", "NCCL watchdog timeout", "resume from a checkpoint", "mem_fraction_static"]


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    root = tmp_path_factory.mktemp("snapdocs")
    for name, text in DOCS.items():
        (root / name).write_text(text)
    kb = KnowledgeBase(tmp_path_factory.mktemp("snapidx") / "index")
    kb.index([root])
    kb.search("warm", 1)  # indexes the cards too
    return kb


def _results(kb: KnowledgeBase, use_snapshot: bool) -> list:
    fresh = KnowledgeBase(kb.store.directory)
    if not use_snapshot:
        fresh.store._snapshot = False  # what a store without a fresh snapshot does: ask Chroma
    out = []
    for q in QUERIES:
        for mode in ("guided", "hybrid", "dense"):
            out.append([(r.id, round(r.score, 6), r.text, r.section, r.line_start) for r in fresh.search(q, 5, mode=mode)])
        out.append([(r.id, r.text) for r in fresh.search(q, 3, kind="doc")])
    return out


def test_snapshot_answers_exactly_as_chroma(kb: KnowledgeBase) -> None:
    assert (kb.store.directory / SNAPSHOT_FILE).is_file()
    assert KnowledgeBase(kb.store.directory).store.snapshot is not None
    assert _results(kb, True) == _results(kb, False)


def test_a_snapshot_for_other_chunks_is_not_used(kb: KnowledgeBase) -> None:
    fresh = KnowledgeBase(kb.store.directory)
    fresh.store.manifest.files["/elsewhere.md"] = type(next(iter(fresh.store.manifest.files.values())))(
        hash="x", source="elsewhere.md", root="/", chunks=["not-in-the-snapshot"]
    )
    assert fresh.store.snapshot is None


def test_a_damaged_snapshot_falls_back_to_chroma(kb: KnowledgeBase, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "index"
    shutil.copytree(kb.store.directory, copy)
    (copy / SNAPSHOT_FILE).write_bytes(b"not a database")
    fresh = KnowledgeBase(copy)
    assert fresh.store.snapshot is None
    assert fresh.search("NCCL watchdog timeout", 1, kind="doc")[0].source.endswith("network.md")


def test_a_cold_search_imports_neither_chromadb_nor_torch(kb: KnowledgeBase) -> None:
    code = (
        "import sys\n"
        "from rlmedic.knowledge.index import KnowledgeBase\n"
        f"r = KnowledgeBase({str(kb.store.directory)!r}).search('NCCL watchdog timeout', 3, kind='doc')\n"
        "print(r[0].source.rsplit('/', 1)[-1], 'chromadb' in sys.modules, 'torch' in sys.modules, 'scipy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["network.md", "False", "False", "False"]


def test_concurrent_first_searches_of_a_fresh_index(tmp_path: Path) -> None:
    """A web server's first questions arrive together: the cards are indexed once, Chroma opened once."""
    import threading

    kb = KnowledgeBase(tmp_path / "index")
    errors: list[BaseException] = []
    found: list[int] = []

    def ask() -> None:
        try:
            found.append(len(kb.search("NCCL watchdog timeout", 3, kind="card")))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert found == [3, 3, 3, 3]


def test_a_rebuild_read_in_small_pages_writes_the_same_read_side_copies(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rebuild reads Chroma a page at a time (memory); pages of 3 chunks give the same snapshot and BM25 answers."""
    from rlmedic.knowledge import store as store_module

    before = _results(kb, use_snapshot=True)
    monkeypatch.setattr(store_module, "REBUILD_PAGE", 3)
    kb.store.rebuild_bm25()
    assert _results(kb, use_snapshot=True) == before == _results(kb, use_snapshot=False)
    fresh = KnowledgeBase(kb.store.directory).store
    assert fresh.snapshot is not None and len(fresh.snapshot.ids) == kb.store.collection.count() > 3
