"""Known issues at the front doors: ask leads with the record, env prints versions, search finds records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from rlmedic.ui.cli import app
from typer.testing import CliRunner

runner = CliRunner()
PACK = FIXTURES / "known" / "pack"
TEAM = FIXTURES / "known" / "team"
LOG = """\
[2025-05-02 11:02:03] INFO server_args: sglang==0.4.6 tp_size=2
[2025-05-02 11:09:10 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1721, in flush_cache_wrapped
    success = self.flush_cache()
AssertionError: flush_cache failed: there are still running requests (17 running)
"""


@pytest.fixture(autouse=True)
def _fixture_pack_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES_BUILTIN", "0")
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES", "")


def test_ask_offline_leads_with_the_known_issue_in_an_attached_log(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text(LOG)
    result = runner.invoke(app, ["ask", "why did the weight update crash?", "--attach", str(log), "--offline",
                                 "--known-issues", str(PACK), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    text = answer["answer"]
    assert text.startswith("Known issue: Engine assertion when the cache is flushed while requests are still running "
                           "(fixture-org/sglang#1990) [1].")
    assert "Your log: AssertionError: flush_cache failed: there are still running requests (17 running)" in text
    assert "Fix: Upgrade sglang to 0.4.6.post1" in text and "upgrade (you run sglang 0.4.6)" in text
    assert "<https://github.com/fixture-org/sglang/issues/1990>" in text
    assert answer["citations"][0]["ref"] == "fixture-org/sglang#1990" and answer["citations"][0]["kind"] == "issue"
    first_fix = answer["fixes"][0]
    assert "rollout.pause_before_update" in json.dumps(first_fix)
    assert answer["category"] == "weight_sync"
    assert "Known issue fixture-org/sglang#1990" in answer["summary"]


def test_without_the_folder_the_same_log_has_no_known_issue(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text(LOG)
    result = runner.invoke(app, ["ask", "why did the weight update crash?", "--attach", str(log), "--offline"])
    assert result.exit_code == 0, result.output
    assert "fixture-org/sglang#1990" not in result.stdout


def test_a_demoted_record_does_not_lead(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text(LOG.replace("sglang==0.4.6 ", "sglang==0.4.8 "))
    result = runner.invoke(app, ["ask", "why?", "--attach", str(log), "--offline", "--known-issues", str(PACK)])
    assert result.exit_code == 0, result.output
    assert not result.stdout.startswith("Known issue:")
    assert "Known issue fixture-org/sglang#1990 matches your error, but your sglang 0.4.8 already has that fix" in result.stdout


def test_known_issues_option_refuses_a_missing_folder_and_reports_bad_records(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["search", "x", "--known-issues", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and f"--known-issues {tmp_path / 'nope'}: no such folder" in missing.output
    team = tmp_path / "team"
    team.mkdir()
    (team / "broken-record.yaml").write_text("id: broken-record\ntitle: only a title\n")
    (team / "fx-team-reward-server-timeout.yaml").write_text((TEAM / "fx-team-reward-server-timeout.yaml").read_text())
    log = tmp_path / "run.log"
    log.write_text("ERROR reward service returned 502 Bad Gateway for batch 7\n")
    result = runner.invoke(app, ["ask", "rewards are empty", "--attach", str(log), "--offline", "--known-issues", str(team)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: known issues:")]
    assert len(warnings) == 1 and "broken-record.yaml: " in warnings[0] and "Field required" in warnings[0]
    assert result.stdout.startswith("Known issue: Our reward server drops connections")
    assert "reward.max_concurrency" in result.stdout


def test_search_kind_known_and_a_pasted_error_names_the_known_issue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES", str(PACK))
    result = runner.invoke(app, ["search", "vllm sleep mode allocator", "--kind", "known", "--json", "-k", "2"])
    assert result.exit_code == 0, result.output
    top = json.loads(result.stdout)["results"][0]
    assert top["kind"] == "known" and top["record"] == "fx-vllm-sleep-cumem"
    assert top["citation"]["ref"] == "fixture-org/vllm#3288" and top["url"].endswith("/vllm/issues/3288")
    assert "Known issue fixture-org/vllm#3288, fixed in vllm 0.8.3" in top["text"]
    assert "indexing the 6 known-issue records" in result.stderr  # said once, the first time
    again = runner.invoke(app, ["search", "router unhealthy workers", "--kind", "known", "-k", "1"])
    assert again.exit_code == 0 and "known-issue records" not in again.stderr
    assert again.stdout.startswith("[1] fixture-org/sglang#2199: Router marks every worker unhealthy")
    pasted = runner.invoke(app, ["search", "AssertionError: flush_cache failed: there are still running requests", "-k", "3"])
    assert pasted.exit_code == 0, pasted.output
    assert pasted.stdout.startswith("[1] fixture-org/sglang#1990: Engine assertion when the cache is flushed")
    assert "Known issue fixture-org/sglang#1990, fixed in sglang 0.4.6.post1" in pasted.stdout


def test_env_without_a_gpu() -> None:
    text = runner.invoke(app, ["env"])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0].startswith("python: 3.") and lines[1].startswith("torch: ")
    assert any(line.startswith("gpus: none visible") or line.startswith("gpus: ") for line in lines)
    for name in ("sglang", "vllm", "megatron-core", "transformers", "ray", "areal", "slime", "verl", "flash-attn",
                 "flashinfer", "deepspeed", "nccl"):
        assert any(line.startswith(f"{name}: ") for line in lines), name
    data = json.loads(runner.invoke(app, ["env", "--json"]).stdout)
    import importlib.metadata as md

    assert data["packages"]["transformers"] == md.version("transformers")
    assert data["packages"]["sglang"] in ("not installed", md.version("sglang") if _has("sglang") else "")
    assert data["torch_cuda"] in ("cpu",) or data["torch_cuda"].split(".")[0].isdigit()
    assert isinstance(data["gpu_names"], list)


def test_an_attached_env_json_gives_the_versions(tmp_path: Path) -> None:
    # `rlmedic env --json > env.json` attached beside the log: read as versions, not as a GPU snapshot
    env = {"python": "3.11.7", "torch_cuda": "12.4", "gpu_driver": "550.54", "gpu_names": ["NVIDIA H100"],
           "gpu_status": "ok", "packages": {"sglang": "0.4.7", "torch": "2.6.0+cu124", "vllm": "not installed"}}
    (tmp_path / "env.json").write_text(json.dumps(env))
    log = tmp_path / "engine.log"
    log.write_text(LOG.replace("sglang==0.4.6 ", ""))
    result = runner.invoke(app, ["ask", "why?", "--attach", str(log), "--attach", str(tmp_path / "env.json"),
                                 "--offline", "--known-issues", str(PACK)])
    assert result.exit_code == 0, result.output
    assert "gpu_status" not in result.stderr
    assert "your sglang 0.4.7 already has that fix" in result.stdout


def _has(dist: str) -> bool:
    import importlib.metadata as md

    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


def test_env_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom rlmedic.tools.envinfo import collect\ncollect()\n"
            "print(sorted(m for m in ('torch', 'sglang', 'vllm', 'ray', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_watch_alert_names_the_known_issue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlmedic.tools.logs.watch import Watcher, WatchOptions

    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES", str(PACK))
    log = tmp_path / "engine.log"
    log.write_text("[2025-05-02 11:00:00] INFO step 1 loss 0.3\n")
    watcher = Watcher([str(tmp_path)], WatchOptions(stall_minutes=0))
    assert watcher.tick() == []
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(LOG)
    alerts = [a for a in watcher.tick() if a.kind == "failure"]
    assert alerts, "the assertion is a failure"
    alert = alerts[0]
    assert alert.known.startswith("Known issue fixture-org/sglang#1990, fixed in sglang 0.4.6.post1")
    text = alert.text()
    assert text.splitlines()[2] == alert.known  # right under the title and summary
    assert "Fix: set rollout.pause_before_update to True" in text
    assert "fixture-org/sglang#1990 <https://github.com/fixture-org/sglang/issues/1990>" in text


def test_the_search_tool_agents_call_names_the_known_issue(monkeypatch: pytest.MonkeyPatch) -> None:
    # the tool the MCP server and the LLM agent call: its text form is what they read
    from rlmedic.tools.registry import REGISTRY
    from rlmedic.ui.clikit import tool_context

    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES", str(PACK))
    result = REGISTRY.call("search_docs", {"query": "RuntimeError: Could not find nvcc and default cuda_home", "k": 2},
                           tool_context([]))
    assert result.ok, result.error
    assert result.text.startswith("[1] fixture-org/flashinfer#700: FlashInfer JIT compile fails")
    assert "Known issue fixture-org/flashinfer#700, fixed in flashinfer 0.2.3: upgrade" in result.text
