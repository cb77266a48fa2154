"""Tool results cached by file content: repeats are served, any change misses, confinement still rules."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES
from rlmedic.tools.registry import REGISTRY, ToolContext
from rlmedic.toolcache import TOOL_CACHE, ToolCache

LOG = FIXTURES / "logs" / "multirank" / "rank2.log"


@pytest.fixture(autouse=True)
def _empty_cache():
    TOOL_CACHE.clear()
    yield
    TOOL_CACHE.clear()


@pytest.fixture
def upload(tmp_path: Path) -> Path:
    folder = tmp_path / "session"
    folder.mkdir()
    shutil.copy(LOG, folder / "train.log")
    return folder / "train.log"


def _diagnose(path: Path, root: Path | None = None):
    return REGISTRY.call("diagnose", {"paths": [str(path)]}, ToolContext.for_roots([root or path.parent]))


def test_a_repeat_is_served_from_the_cache_with_the_same_result(upload: Path) -> None:
    first = _diagnose(upload)
    again = _diagnose(upload)
    assert first.ok and not first.cached
    assert again.cached and again.data == first.data and again.text == first.text
    assert again.value.root_finding.id == first.value.root_finding.id
    again.value.findings.clear()  # a caller changing its copy does not change the cache
    assert _diagnose(upload).value.findings


def test_a_changed_file_misses_and_the_same_bytes_rewritten_hit(upload: Path) -> None:
    first = _diagnose(upload)
    with open(upload, "a") as fh:
        fh.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB\n")
    grown = _diagnose(upload)
    assert not grown.cached and grown.data["stats"]["lines"] == first.data["stats"]["lines"] + 1
    data = upload.read_bytes()
    upload.unlink()
    upload.write_bytes(data)  # a new file (inode, mtime) with the same bytes: the same upload again
    os.utime(upload, (1, 1))
    assert _diagnose(upload).cached


def test_a_context_that_may_not_read_the_file_gets_no_cached_result(upload: Path, tmp_path: Path) -> None:
    assert _diagnose(upload).ok
    other = tmp_path / "elsewhere"
    other.mkdir()
    refused = _diagnose(upload, root=other)
    assert not refused.ok and "outside the allowed roots" in refused.error


def test_folders_are_fingerprinted_file_by_file(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    shutil.copytree(FIXTURES / "logs" / "multirank", ranks)
    assert not _diagnose(ranks, ranks).cached
    assert _diagnose(ranks, ranks).cached
    (ranks / "rank9.log").write_text("INFO all good\n")
    assert not _diagnose(ranks, ranks).cached


def test_the_cache_is_bounded_and_can_be_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ToolCache(max_entries=2)
    for i in range(3):
        cache.put(f"k{i}", {"i": i}, {"i": i}, str(i))
    assert cache.get("k0") is None and cache.get("k2")[2] == "2"
    log = tmp_path / "a.log"
    shutil.copy(LOG, log)
    monkeypatch.setenv("RLMEDIC_TOOL_CACHE", "0")
    _diagnose(log)
    assert not _diagnose(log).cached


def test_a_cap_in_the_environment_is_part_of_the_key(upload: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _diagnose(upload)
    monkeypatch.setenv("RLMEDIC_MAX_SCAN_BYTES", "1K")
    capped = _diagnose(upload)
    assert not capped.cached and capped.data["stats"]["truncated"] is True
