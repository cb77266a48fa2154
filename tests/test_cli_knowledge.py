"""The knowledge front door: `ask --offline`, `search --json`, and a fast, lazy CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from typer.testing import CliRunner

from rlmedic.ui.cli import app

runner = CliRunner()


def test_ask_offline_json_contract_and_content() -> None:
    result = runner.invoke(app, ["ask", "sglang keeps running out of memory during rollout", "--offline", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["engine"] == "offline"
    assert isinstance(data["answer"], str) and isinstance(data["citations"], list)
    assert data["cards"][0] == "oom-sglang-generation"
    first = data["citations"][0]
    assert first["text"].startswith("card:oom-sglang-generation (") and first["kind"] == "card"
    assert first["ref"] == "oom-sglang-generation"
    # the numbered sources at the end of the answer are the citations' texts, in order; those only the
    # verbose part refers to are listed there ("More sources")
    expected = [f"  [{i}] {c['text']}" + (f" <{c['url']}>" if c.get("url") else "")
                for i, c in enumerate(data["citations"], 1)]
    shown = data["answer"].split("Sources:\n")[1].splitlines()
    assert shown == expected[:len(shown)]
    assert expected[len(shown):] == (data["more"].split("More sources:\n")[1].splitlines() if expected[len(shown):] else [])
    # fixes name exact keys, most effective first
    assert "rollout.max_concurrent_rollouts" in data["answer"]
    assert "mem_fraction_static" in data["answer"]
    assert "[1]" in data["answer"]


def test_ask_prefers_the_framework_named_in_the_question() -> None:
    slime = json.loads(runner.invoke(app, ["ask", "slime OOM in backward pass with --micro-batch-size 4", "--offline", "--json"]).stdout)
    assert "--" in slime["answer"].split("What to change")[1]
    assert "[areal]" not in slime["answer"]


def test_ask_human_output_lists_sources() -> None:
    result = runner.invoke(app, ["ask", "NCCL watchdog timeout during weight sync", "--offline"])
    assert result.exit_code == 0
    assert "Sources:" in result.output and re.search(r"\[\d+\] card:", result.output)


def test_search_json_contract_over_cards() -> None:
    result = runner.invoke(app, ["search", "Dumped recover info to file", "-k", "2", "--kind", "card", "--json"])
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    assert len(results) == 2
    for item in results:
        assert set(item) >= {"source", "section", "score", "text", "citation"}
        assert item["citation"]["kind"] == "card" and item["citation"]["text"] == f"{item['source']} ({item['section']})"
    assert results[0]["source"] == "card:recovery-checkpoint-missing"


def test_search_rejects_bad_kind_and_docs_on_a_cards_only_index() -> None:
    result = runner.invoke(app, ["search", "anything", "--kind", "nonsense"])
    assert result.exit_code == 2 and "--kind" in result.output
    result = runner.invoke(app, ["search", "anything", "--kind", "doc"])
    assert result.exit_code == 2 and "rlmedic index" in result.output


def test_help_and_version_do_not_import_heavy_libraries() -> None:
    code = (
        "import sys; from rlmedic.ui.cli import app; "
        "heavy = [m for m in ('torch', 'chromadb', 'langchain', 'gradio', 'sentence_transformers', 'llama_index') "
        "if any(k == m or k.startswith(m + '.') for k in sys.modules)]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    version = subprocess.run([sys.executable, "-m", "rlmedic", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("rlmedic ")


def test_ask_with_pasted_log_lets_the_root_finding_pick_the_card() -> None:
    log = (
        "(RolloutWorker pid=4242) INFO step 12 generating\n"
        "(SGLangEngine pid=555) Traceback (most recent call last):\n"
        '(SGLangEngine pid=555)   File "sglang/srt/managers/scheduler.py", line 10, in event_loop\n'
        "(SGLangEngine pid=555) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. "
        "GPU 0 has a total capacity of 79.11 GiB\n"
    )
    data = json.loads(runner.invoke(app, ["ask", log, "--offline", "--json"]).stdout)
    assert data["cards"][0] == "oom-sglang-generation"
    assert data["answer"].startswith(("From the log", "Known issue:")) and "From the log" in data["answer"]
    log_cites = [c for c in data["citations"] if c["kind"] == "log"]
    assert log_cites and log_cites[0]["ref"] == "<question>" and log_cites[0]["text"].startswith("<question>:")
    assert log_cites[0]["lines"][0] == data["findings"][0]["line"]
    assert data["findings"] and data["findings"][0]["category"] == "oom_generation"


def test_first_use_index_build_embeds_nothing_and_stdout_stays_json() -> None:
    """The first search builds the card index from the shipped card vectors (seconds, no model):
    stdout stays the JSON document, nothing is embedded; the next search is silent.
    (An embedding of changed cards is announced: tests/test_prebuilt_cards.py.)"""
    first = runner.invoke(app, ["search", "NCCL watchdog timeout", "-k", "1", "--json"])
    assert first.exit_code == 0, first.output
    assert "embedding" not in first.stderr and "loading torch" not in first.stderr
    assert json.loads(first.stdout)["results"]
    again = runner.invoke(app, ["search", "NCCL watchdog timeout", "-k", "1", "--json"])
    assert again.exit_code == 0 and "playbook cards" not in again.stderr
