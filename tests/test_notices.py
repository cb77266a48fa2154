"""Slow steps announce themselves on stderr; fast ones stay silent (rlmedic.notices)."""

from __future__ import annotations

import time

import pytest

from rlmedic import notices


@pytest.fixture
def lines():
    got: list[str] = []
    previous = notices.set_sink(got.append)
    yield got
    notices.set_sink(previous)


def test_a_step_announced_at_once_reports_its_time(lines) -> None:
    with notices.step("indexing the cards", after=0):
        assert lines == ["rlmedic: indexing the cards..."]
    assert len(lines) == 2 and lines[1].startswith("rlmedic: indexing the cards: done in ")


def test_a_fast_step_says_nothing(lines) -> None:
    with notices.step("loading", after=5):
        pass
    time.sleep(0.05)
    assert lines == []


def test_a_step_that_runs_past_its_delay_is_announced_while_it_runs(lines) -> None:
    with notices.step("loading the model", after=0.05):
        deadline = time.monotonic() + 5
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lines == ["rlmedic: loading the model..."]
    assert lines[-1].startswith("rlmedic: loading the model: done in ")


def test_an_error_inside_a_step_still_ends_it(lines) -> None:
    with pytest.raises(ValueError), notices.step("parsing", after=0):
        raise ValueError("bad")
    assert lines[-1].startswith("rlmedic: parsing: done in ")


def test_the_default_sink_is_stderr(capsys) -> None:
    notices.notice("hello")
    captured = capsys.readouterr()
    assert captured.err == "rlmedic: hello\n" and captured.out == ""


def test_a_long_job_off_a_terminal_still_says_what_it_does(lines) -> None:
    """`rlmedic index` piped or in CI: no bar, but a line when it starts and its time when it ends."""
    from rlmedic.ui.progress import progress_bar

    with progress_bar("Indexing", enabled=False, after=0) as progress:
        assert progress is None
    assert lines[0] == "rlmedic: indexing..." and lines[1].startswith("rlmedic: indexing: done in ")


class _Terminal:
    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def test_terminal_only_steps_speak_at_a_terminal_and_not_in_a_pipe(lines, monkeypatch) -> None:
    import sys

    with notices.step("running diagnose", after=0, terminal_only=True):  # pytest's stderr: not a terminal
        pass
    assert lines == []
    monkeypatch.setattr(sys, "stderr", _Terminal())
    with notices.step("running diagnose", after=0, terminal_only=True):
        pass
    assert lines[0] == "rlmedic: running diagnose..." and "done in" in lines[1]
