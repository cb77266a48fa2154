"""A folder thousands of levels deep is walked without recursion (issue 31: RecursionError before)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile_cases import deep_folder, remove_deep_folder

from rlmedic.confine import Confinement, walk_tree
from rlmedic.tools.logs.diagnose import diagnose


@pytest.fixture
def deep(tmp_path: Path):
    made: list[Path] = []

    def make(depth: int) -> Path:
        made.append(deep_folder(tmp_path / f"deep{depth}", depth))
        return made[-1]

    yield make
    for base in made:
        remove_deep_folder(base)


def test_walk_tree_matches_os_walk_and_prunes_in_place(tmp_path: Path) -> None:
    for rel in ("a/b/c.log", "a/x.log", "b/.hidden/h.log", "top.log"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    os.symlink(tmp_path / "a", tmp_path / "link")
    ours = [(r, sorted(d), sorted(f)) for r, d, f in walk_tree(tmp_path)]
    theirs = [(r, sorted(d), sorted(f)) for r, d, f in os.walk(tmp_path)]
    assert sorted(ours) == sorted(theirs)  # the symlinked folder is listed, never entered
    seen = []
    for root, dirs, _files in walk_tree(tmp_path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        seen.append(os.path.relpath(root, tmp_path))
    assert "b/.hidden" not in seen and "a/b" in seen
    errors: list[OSError] = []
    assert list(walk_tree(tmp_path / "missing", onerror=errors.append)) == [] and errors


def test_a_3000_level_tree_is_diagnosed_and_the_unnameable_depth_is_reported(deep) -> None:
    deep = deep(3000)
    errors: list[OSError] = []
    levels = sum(1 for _ in walk_tree(deep, onerror=errors.append))
    assert levels > 1500 and len(errors) == 1  # below PATH_MAX every level is listed; past it one error
    result = diagnose([deep], confinement=Confinement.for_paths([deep]))
    assert result.findings[0].category == "oom_training"
    assert any("cannot list" in s["reason"] for s in result.stats["skipped"])


def test_a_shallower_deep_tree_is_read_to_the_bottom(deep) -> None:
    deep = deep(1500)  # past the recursion limit, under PATH_MAX
    result = diagnose([deep], confinement=Confinement.for_paths([deep]))
    assert result.stats["files"] == 2 and not result.stats["skipped"]
    from rlmedic.toolcache import ToolCache

    files = ToolCache._files([str(deep)], Confinement.for_paths([deep]))  # the session's cache key walks too
    assert files is not None and sorted(p.name for p in files) == ["bottom.log", "top.log"]


def test_documents_of_a_deep_folder_are_found_for_the_index(deep, tmp_path: Path) -> None:
    from rlmedic.knowledge.chunking import discover

    tree = deep(1500)
    bottom = tree.joinpath(*["d"] * 1500, "notes.md")
    bottom.write_text("# Notes\n")
    (tree / ".hidden").mkdir()
    (tree / ".hidden" / "secret.md").write_text("x")
    (tree / "top.md").write_text("# Top\n")
    assert [f.name for f, _root in discover([tree])] == ["notes.md", "top.md"]
