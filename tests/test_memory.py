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


@pytest.fixture
def collector():
    """The collector as a test found it, restored afterwards (and nothing left frozen)."""
    import gc

    was = gc.isenabled()
    yield gc
    gc.unfreeze()
    (gc.enable if was else gc.disable)()
    memory._gc_paused = False


def test_the_startup_pause_ends_when_resumed_and_freezes_what_startup_built(collector) -> None:
    collector.enable()
    memory.pause_gc_for_startup()
    assert not collector.isenabled()
    built = [object() for _ in range(10)]
    memory.resume_gc()
    assert collector.isenabled()
    assert collector.get_freeze_count() >= len(built)


def test_resume_leaves_a_collector_someone_else_turned_off_alone(collector) -> None:
    collector.disable()  # an embedding application's choice, not rlmedic's pause
    memory.resume_gc()
    assert not collector.isenabled()


def test_collector_paused_restores_the_collector_and_respects_it_being_off(collector) -> None:
    collector.enable()
    with memory.collector_paused():
        assert not collector.isenabled()
    assert collector.isenabled()
    collector.disable()
    with memory.collector_paused():
        pass
    assert not collector.isenabled()
    collector.enable()
    with pytest.raises(ImportError), memory.collector_paused():
        import rlmedic_no_such_module  # noqa: F401
    assert collector.isenabled()


def test_every_command_resumes_the_collector_when_it_starts(collector, tmp_path) -> None:
    """The console script pauses the collector before importing anything; a command that never
    resumed it would run (a web server for days) without one."""
    import typer.main
    from typer.testing import CliRunner

    from rlmedic.ui import cli

    commands = typer.main.get_command(cli.app).commands
    assert commands and all(isinstance(c, cli._Command) for c in commands.values()), {
        n: type(c).__name__ for n, c in commands.items() if not isinstance(c, cli._Command)}
    collector.enable()
    memory.pause_gc_for_startup()
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 0.5\n", encoding="utf-8")
    result = CliRunner().invoke(cli.app, ["diagnose", str(log)])
    assert result.exit_code in (0, 1), result.output
    assert collector.isenabled()
