"""Known-issue records describe failures: none may match a healthy run's lines.

A record whose error string or regex matches an ordinary progress or metric line (a
learning-rate value, a config dump, a reward of 0.42) would lead the answer of every
healthy run with an invented bug. Each shipped record is checked against healthy logs
of both frameworks, and the answer to "did this run finish ok?" names no known issue.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from rlmedic.knowledge.known import match
from rlmedic.knowledge.known.load import load

HEALTHY = sorted((FIXTURES / "logs" / "scenarios").glob("healthy_*.log"))


def test_there_are_healthy_logs_of_both_frameworks() -> None:
    assert {p.stem for p in HEALTHY} >= {"healthy_areal", "healthy_slime"}


@pytest.mark.parametrize("log", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_no_record_matches_a_healthy_log_by_its_symptoms(log: Path) -> None:
    pack = load()
    found = [m for m in match([log.read_text(encoding="utf-8")], pack=pack, k=20) if m.how in ("exact", "regex")]
    assert not found, [(m.record.id, m.how, m.matched[:120]) for m in found]


@pytest.mark.parametrize("log", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_a_healthy_run_is_answered_without_a_known_issue(log: Path, tmp_path: Path) -> None:
    from rlmedic.agent.offline import answer_offline
    from rlmedic.tools.registry import ToolContext

    answer = answer_offline("did this run finish ok?", attachments=[log], ctx=ToolContext.for_roots([str(log)]))
    assert "finished cleanly" in answer.answer and "Known issue" not in answer.answer
    assert not any(c.kind == "issue" for c in answer.citations)


def test_a_plain_cuda_oom_is_no_known_bug() -> None:
    """PyTorch's own OOM message (sizes, 'reserved but unallocated', expandable_segments advice) is
    printed by every OOM: no record may lead on it, whether by a string or by a regex spanning it."""
    from rlmedic.knowledge.known import leading

    log = (FIXTURES / "logs" / "signatures" / "cuda-oom.log").read_text(encoding="utf-8")
    assert not leading(match([log], k=10)), [m.record.id for m in leading(match([log], k=10))]


def test_a_bug_of_another_rl_framework_never_leads() -> None:
    from types import SimpleNamespace

    from rlmedic.agent.compose import _same_stack

    def m(*frameworks: str) -> SimpleNamespace:
        return SimpleNamespace(record=SimpleNamespace(frameworks=list(frameworks)))

    assert not _same_stack(m("verl"), "areal") and not _same_stack(m("slime", "megatron"), "verl")
    assert _same_stack(m("areal", "sglang"), "areal") and _same_stack(m("sglang"), "slime")
    assert _same_stack(m("verl"), "")  # the framework is not known: nothing is ruled out


def test_a_big_logs_end_is_matched_not_only_its_start(tmp_path: Path) -> None:
    """The failure of a big log is at its end: the text known issues are matched against holds it."""
    from rlmedic.agent.investigate import attachment_texts
    from rlmedic.tools.registry import ToolContext

    log = tmp_path / "train.log"
    with log.open("w", encoding="utf-8") as fh:
        fh.write("sglang==0.4.6.post1 banner line\n")
        for step in range(120_000):
            fh.write(f"[2025-11-22 10:00:00] step {step}: loss 0.{step % 97:02d} reward 0.42\n")
        fh.write("RuntimeError: the failure at the very end\n")
    assert log.stat().st_size > 4_000_000
    (text,) = attachment_texts([log], ToolContext.for_roots([str(log)]), max_bytes=1_000_000)
    assert "the failure at the very end" in text and "sglang==0.4.6.post1" in text
    assert len(text) <= 1_000_010
