"""``rlmedic ask --attach`` and ``rlmedic eval``: the agent's front door, offline and against a scripted server."""

from __future__ import annotations

import pytest
import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from conftest import FIXTURES
from fake_openai import FakeOpenAI, Reply, tool
from rlmedic.agent.evaluate import load_cases
from rlmedic.ui.cli import app

EVALS = Path(__file__).resolve().parent / "evals"
LOG = FIXTURES / "logs" / "signatures" / "cuda-oom.log"
CONFIG = FIXTURES / "configs" / "areal" / "base.yaml"
runner = CliRunner()


def test_ask_offline_with_a_log_and_a_config_gives_the_structured_answer(tmp_path: Path) -> None:
    shutil.copy(LOG, tmp_path / "train.log")
    shutil.copy(CONFIG, tmp_path / "config.yaml")
    before = (tmp_path / "config.yaml").read_bytes()
    result = runner.invoke(app, ["ask", "why did my run die?", "--attach", str(tmp_path / "train.log"),
                                 "--attach", str(tmp_path / "config.yaml"), "--offline", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["engine"] == "offline" and data["category"] == "oom_training"
    assert [c["name"] for c in data["tool_calls"]] == ["diagnose", "fix_config"]
    # README: each tool call is {"name", "args", "ok"}
    assert all(set(c) == {"name", "args", "ok"} and c["ok"] for c in data["tool_calls"])
    assert data["tool_calls"][0]["args"]["paths"] == [str(tmp_path / "train.log")]
    assert data["tool_calls"][1]["args"]["config"] == str(tmp_path / "config.yaml")
    assert data["root_cause"]["evidence"][0].startswith(str(tmp_path / "train.log") + ":")
    assert data["fixes"][0]["key"] == "actor.mb_spec.max_tokens_per_mb" and data["fixes"][0]["new"] == 2048
    assert "+    max_tokens_per_mb: 2048" in data["config_diff"]
    assert any(c["text"].startswith("card:oom-actor-train") for c in data["citations"])
    assert all({"kind", "ref", "text"} <= set(c) for c in data["citations"])
    assert data["fixes"][0]["citation"]["kind"] == "card"
    assert "From the log:" in data["answer"] and "Corrected config (diff):" in data["answer"]
    assert (tmp_path / "config.yaml").read_bytes() == before  # never modified


def test_ask_reads_a_log_from_stdin_into_a_private_temp_file() -> None:
    result = runner.invoke(app, ["ask", "why did it die", "--attach", "-", "--offline", "--json"], input=LOG.read_text())
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    evidence = data["root_cause"]["evidence"][0]
    assert "rlmedic-stdin-" in evidence and evidence.split(":")[0].endswith("stdin.log")
    assert data["category"] == "oom_training"
    assert not Path(evidence.rsplit(":", 1)[0]).exists()  # cleaned up


def test_ask_rejects_a_missing_attachment_in_one_line() -> None:
    result = runner.invoke(app, ["ask", "why", "--attach", "/nonexistent/train.log", "--offline"])
    assert result.exit_code == 2 and "no such file" in result.output


def test_ask_streams_tool_steps_and_text_from_the_model(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    shutil.copy(LOG, log)
    replies = [Reply(calls=[tool("diagnose", paths=[str(log)])]), Reply(content="Root cause: OOM in actor_train.")]
    with FakeOpenAI(replies) as server:
        result = runner.invoke(app, ["ask", "why?", "--attach", str(log), "--base-url", server.base_url])
    assert result.exit_code == 0, result.output
    # the model's text, then what the tools established (root cause, evidence, sources)
    assert result.stdout.strip().startswith("Root cause: OOM in actor_train.")
    assert "What rlmedic established without the model:" in result.stdout
    assert "CUDA out of memory" in result.stdout and f"{log}:" in result.stdout
    # each step says what the tool found, as chat, the web app and Slack show it
    assert "-> diagnose" in result.stderr and "<- diagnose: root cause cuda-oom (oom_training) train.log:" in result.stderr


def test_ask_with_the_server_down_answers_offline_with_a_note(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    shutil.copy(LOG, log)
    result = runner.invoke(app, ["ask", "why?", "--attach", str(log), "--base-url", "http://127.0.0.1:9/v1"])
    assert result.exit_code == 0, result.output
    assert "note: offline: model server at http://127.0.0.1:9/v1 unreachable" in result.stderr
    assert result.stdout.startswith(("From the log:", "Known issue:")) and "From the log:" in result.stdout


@pytest.mark.slow
def test_eval_folders_offline_scores_every_case() -> None:
    result = runner.invoke(app, ["eval", str(EVALS), "--offline", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    totals = report["totals"]
    assert totals["cases"] == len(load_cases(EVALS)) >= 4
    assert totals["category_right"] == totals["cases"] and totals["must_mention_share"] == 1.0
    by_id = {c["id"]: c for c in report["cases"]}
    assert by_id["areal-train-oom"]["tool_calls"] == 2 and by_id["question-no-files"]["tool_calls"] == 0
    assert all(c["cited"] and c["seconds"] >= 0 for c in report["cases"])


def test_eval_jsonl_reports_misses_honestly(tmp_path: Path) -> None:
    # two cases in the JSONL format of ../shared/cases, written for these tests
    rows = [json.loads(line) for line in (Path(__file__).parent / "data" / "eval_cases.jsonl").read_text().splitlines()]
    rows[1]["category"] = "nan_loss"  # a wrong expectation must count as a miss
    rows[1]["must_mention"] = ["no-such-term-xyz"]
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = runner.invoke(app, ["eval", str(cases), "--offline"])
    assert result.exit_code == 0, result.output
    assert f"-- {rows[1]['id']}: " in result.stdout and "mentions 0%" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("answer: category 1/2")


def test_eval_record_makes_a_replayable_transcript(tmp_path: Path) -> None:
    case = EVALS / "areal-train-oom"
    log = str((case / "attachments" / "train.log").resolve())
    replies = [Reply(calls=[tool("diagnose", paths=[log])]), Reply(content="Root cause: OOM in actor training. Lower max_tokens_per_mb.")]
    with FakeOpenAI(replies) as server:
        result = runner.invoke(app, ["eval", str(case), "--base-url", server.base_url, "--record", str(tmp_path / "rec")])
    assert result.exit_code == 0, result.output
    transcript = json.loads((tmp_path / "rec" / "areal-train-oom.json").read_text())
    kinds = [e["type"] for e in transcript["events"]]
    assert kinds[0] == "tool_started" and kinds[-1] == "final"
    # the model read the log only; the safety net ran fix_config on the attached config and asked again
    assert [m["type"] for m in transcript["messages"]] == ["human", "ai", "tool", "ai", "human", "ai"]
    # replay: the recorded model turns drive a fresh scripted server to the same answer
    ai = [m["data"] for m in transcript["messages"] if m["type"] == "ai"]
    replayed = [Reply(content=m["content"], calls=[tool(c["name"], **c["args"]) for c in m["tool_calls"]]) for m in ai]
    with FakeOpenAI(replayed) as server:
        again = runner.invoke(app, ["eval", str(case), "--base-url", server.base_url, "--json"])
    score = json.loads(again.stdout)["cases"][0]
    assert score["engine"] == "llm" and score["category_right"] and score["tool_calls"] == 2  # the model's diagnose + the safety net's fix_config


def test_eval_scores_the_model_answer_not_the_tools(tmp_path: Path) -> None:
    """A model that answers nothing useful scores nothing, although the tools' grounded part is right."""
    case = EVALS / "areal-train-oom"
    log = str((case / "attachments" / "train.log").resolve())
    config = str((case / "attachments" / "config.yaml").resolve())
    replies = [Reply(calls=[tool("diagnose", paths=[log]), tool("fix_config", config=config)]),
               Reply(content="I am not sure what happened. Please check your setup.")]
    with FakeOpenAI(replies) as server:
        result = runner.invoke(app, ["eval", str(case), "--base-url", server.base_url, "--json"])
    assert result.exit_code == 0, result.output
    score = json.loads(result.stdout)["cases"][0]
    assert score["engine"] == "llm"
    assert not score["category_right"] and not score["cited"] and score["mention_share"] == 0
    assert score["grounded_category_right"] and score["grounded_mentioned"]  # the tools did find it


def test_eval_reports_dev_and_heldout_side_by_side(tmp_path: Path) -> None:
    folder = tmp_path / "cases"
    folder.mkdir()
    rows = [{"id": "a", "user_input": "torch.OutOfMemoryError: CUDA out of memory during actor training", "category": "oom_training",
             "must_mention": ["max_tokens_per_mb"], "split": "dev"},
            {"id": "b", "user_input": "NCCL watchdog timeout in all_reduce", "category": "nccl_timeout",
             "must_mention": ["no-such-term"], "split": "heldout"}]
    (folder / "one.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (folder / "two.jsonl").write_text(json.dumps(rows[1]) + "\n")
    result = runner.invoke(app, ["eval", str(folder), "--offline"])
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-2:]
    assert last[0].startswith("dev ") and last[1].startswith("heldout ") and "must-mention 0%" in last[1]
    only = runner.invoke(app, ["eval", str(folder), "--offline", "--split", "heldout", "--json"])
    assert [c["id"] for c in json.loads(only.stdout)["cases"]] == ["b"]
    bad = runner.invoke(app, ["eval", str(folder), "--offline", "--split", "test"])
    assert bad.exit_code == 2 and "no case with split 'test'" in bad.output
