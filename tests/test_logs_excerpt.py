"""The LLM excerpt: bounded, centred on the root error, repeats collapsed, line numbers kept."""

from __future__ import annotations

from pathlib import Path

from conftest import ANYWHERE, FIXTURES
from rlmedic.tools.logs.excerpt import build_excerpt, excerpt_text


def test_excerpt_centres_on_root_and_keeps_line_numbers() -> None:
    text = build_excerpt(FIXTURES / "logs" / "multirank", max_lines=40, confinement=ANYWHERE)
    assert text.startswith("# rlmedic: root cause cuda-oom")
    assert "==> " in text and "rank2.log <==" in text
    assert "> 13 | torch.OutOfMemoryError" in text
    assert len(text.splitlines()) <= 40 + 12  # budget + headers and gap markers


def test_repeated_lines_are_collapsed(tmp_path: Path) -> None:
    lines = [f"[2025-11-22 10:00:{i % 60:02d}] retrying request {i} to 10.0.0.2:30000" for i in range(200)]
    lines.append("RuntimeError: CUDA error: an illegal memory access was encountered")
    log = tmp_path / "r.log"
    log.write_text("\n".join(lines) + "\n")
    text = build_excerpt(log, max_lines=60, confinement=ANYWHERE)
    assert "similar line(s) collapsed" in text
    assert "> 201 | RuntimeError: CUDA error: an illegal memory access was encountered" in text
    assert len(text) < 4000


def test_token_budget(tmp_path: Path) -> None:
    text = excerpt_text((FIXTURES / "logs" / "signatures" / "cuda-oom.log").read_text(), max_tokens=100)
    assert len(text) <= 400


def test_no_error_shows_head_or_tail(tmp_path: Path) -> None:
    text = excerpt_text("all good\nstep 1 done\n")
    assert text.startswith("# rlmedic: no error-level finding") and "all good" in text


def test_a_diagnosis_keeps_only_the_first_lines_of_each_head(tmp_path: Path) -> None:
    """The scan reads 64 KiB of each file's head; the result keeps the lines the excerpt may show, no more
    (every result passes the registry's redaction, and a folder of rank logs carried 1 MiB of heads)."""
    from rlmedic.confine import Confinement
    from rlmedic.tools.logs.diagnose import HEAD_LINES_KEPT, diagnose

    log = tmp_path / "train.log"
    log.write_text("".join(f"step {i}: loss 0.{i % 10}\n" for i in range(5000)))
    result = diagnose([log], confinement=Confinement.for_paths([log]))
    head = result.files[0].head.splitlines()
    assert head == [f"step {i}: loss 0.{i % 10}" for i in range(HEAD_LINES_KEPT)]
    # what is kept still serves the excerpt's fallback for a file with neither findings nor a tail: its first lines
    from rlmedic.tools.logs.excerpt import excerpt_from_diagnosis

    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett", "kilo", "lima"]
    varied = tmp_path / "varied.log"
    varied.write_text("".join(f"{w} {'x' * i} started\n" for i, w in enumerate(words * 3)))  # no two lines alike
    result = diagnose([varied], confinement=Confinement.for_paths([varied]))
    result.files[0].tail = []
    shown = excerpt_from_diagnosis(result)
    assert all(f"{i + 1:>4} | {w} {'x' * i} started" in shown for i, w in enumerate(words[:10])), shown
