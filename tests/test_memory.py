"""The glibc memory helpers: they run where glibc is, and are harmless no-ops elsewhere."""

from __future__ import annotations

import sys

import pytest

from rlmedic import memory


def test_release_free_memory_runs_on_glibc() -> None:
    assert memory.release_free_memory() is sys.platform.startswith("linux")


def test_the_arena_cap_leaves_a_users_setting_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert memory.few_malloc_arenas() is False


def test_both_are_no_ops_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_libc", lambda: None)
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert memory.release_free_memory() is False
    assert memory.few_malloc_arenas() is False
