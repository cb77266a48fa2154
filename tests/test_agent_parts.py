"""The agent's small parts: evidence round trips, stdin as a session attachment, the offline tool plan."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURES
from rlmedic.agent.events import Answer, Final, ToolFinished, final_answer
from rlmedic.agent.investigate import plan_calls
from rlmedic.agent.offline import run_offline
from rlmedic.agent.session import Session
from rlmedic.errors import UserError
from rlmedic.tools.registry import ToolContext
from rlmedic.types import Citation, Evidence, Finding, Fix


@pytest.mark.parametrize("citation", [
    Citation(kind="card", ref="oom-actor-train", section="AReaL: Troubleshooting § Memory Issues"),
    Citation(kind="card", ref="nccl-watchdog-timeout"),
    Citation(kind="log", ref="/runs/a/train.log", lines=(52, 52)),
    Citation(kind="doc", ref="docs/en/best_practices/handling_oom.md", section="1. Optimize Micro-batch Size", lines=(10, 42)),
    Citation(kind="doc", ref="rlmedic/tools/logs/signatures.yaml", section="cuda-oom"),
])
def test_citations_round_trip_through_saved_evidence(citation: Citation) -> None:
    """A session saves evidence as JSON and reads it back: every kind of citation survives."""
    fix = Fix(key="actor.x", op="set", new=1, citations=(citation,))
    ev = Evidence(subject="logs", findings=[Finding(id="f", severity="error", summary="s", citations=[citation],
                                                    fixes=[fix])], root=0, fixes=[fix], citations=[citation])
    back = Evidence.from_dict(json.loads(json.dumps(ev.to_dict())))
    assert back == ev and back.root_finding.citations == [citation] and back.fixes[0].citation == citation


def test_answer_cites_each_source_once_and_serialises() -> None:
    answer = Answer(answer="x")
    card = Citation(kind="card", ref="a")
    assert answer.cite(card) == 1 and answer.cite(Citation(kind="log", ref="f", lines=(3, 3))) == 2 and answer.cite(card) == 1
    data = json.loads(json.dumps(answer.to_dict()))
    assert [c["text"] for c in data["citations"]] == ["card:a", "f:3"] and data["citations"][1]["lines"] == [3, 3]


def test_stdin_attachment_keeps_the_end_of_an_oversized_stream() -> None:
    data = b"".join(f"line {i}\n".encode() for i in range(100_000))
    session = Session(persist=False)
    path = session.attach_stdin(io.BytesIO(data), cap=10_000)
    kept = path.read_bytes()
    assert len(kept) == 10_000 and data.endswith(kept)
    assert (path.parent.stat().st_mode & 0o777) == 0o700 and (path.stat().st_mode & 0o777) == 0o600
    assert "only its end was kept" in session.notices[0]
    ctx = session.context()
    assert ctx.confinement.allows(path) and not ctx.confinement.allows(path.parent.parent)
    session.close()
    assert not path.exists()
    with pytest.raises(UserError, match="empty"):
        Session(persist=False).attach_stdin(io.BytesIO(b""))


def test_the_offline_plan_picks_a_tool_per_kind_of_attachment(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "logs" / "signatures" / "cuda-oom.log", tmp_path / "train.log")
    shutil.copy(FIXTURES / "configs" / "areal" / "base.yaml", tmp_path / "config.yaml")
    shutil.copy(FIXTURES / "gpu" / "h100x8_running.json", tmp_path / "gpus.json")
    (tmp_path / "ckpts" / "global_step_10").mkdir(parents=True)
    paths = [tmp_path / n for n in ("train.log", "config.yaml", "gpus.json", "ckpts")]
    calls = plan_calls(paths, lambda p: p.read_bytes()[:4096])
    assert calls == [
        ("diagnose", {"paths": [str(tmp_path / "train.log")]}),
        ("gpu_status", {"snapshot": str(tmp_path / "gpus.json")}),
        ("fix_config", {"config": str(tmp_path / "config.yaml"), "logs": [str(tmp_path / "train.log")],
                        "snapshot": str(tmp_path / "gpus.json")}),
        # the one config is the one the run resumes with: the recovery plan lists what differs
        ("list_checkpoints", {"root": str(tmp_path / "ckpts"), "config": str(tmp_path / "config.yaml")}),
    ]
    from rlmedic.agent.inquiry import Inquiry

    inquiry = Inquiry.of("why did it die?", attachments=paths, context=ToolContext.for_roots([str(p) for p in paths]))
    events = list(run_offline(inquiry))
    done = [e for e in events if isinstance(e, ToolFinished)]
    assert [e.name for e in done] == [c[0] for c in calls] and all(e.ok for e in done), [e.error for e in done]
    answer = final_answer(iter(events))
    assert isinstance(events[-1], Final) and answer.category == "oom_training" and answer.config_diff


def test_a_folder_of_rank_logs_is_a_log_even_with_a_stray_weight_file(tmp_path) -> None:
    from rlmedic.agent.investigate import classify

    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("rank0.log", "rank1.log", "model.safetensors"):
        (logs / name).write_text("x")
    assert classify(logs, b"") == "log"
    save = tmp_path / "save"
    (save / "iter_0000010").mkdir(parents=True)
    (save / "latest_checkpointed_iteration.txt").write_text("10")
    (save / "train.log").write_text("x")
    assert classify(save, b"") == "checkpoints"
