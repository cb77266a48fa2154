"""Your own documents and the built-in cards on one scale: the better match wins and is cited first."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rlmedic.ui.cli import app
from typer.testing import CliRunner

runner = CliRunner()
VERIFIER_DOC = """# Our math reward verifier

## Reward verifier timing out

When the sandboxed math verifier takes longer than its 10 second budget, the reward function
gives up and scores the sample 0. On long proofs this happens for most samples, and the mean
reward drops although the model is fine. Raise `VERIFIER_TIMEOUT_S` to 60 in `reward/verify.py`
and run the verifier pool with 32 workers instead of 8.

## Adding a new verifier

Register the function in `reward/__init__.py`.
"""
QUESTION = "our reward verifier times out and the reward drops to zero"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = tmp_path_factory.mktemp("docs")
    (docs / "verifier.md").write_text(VERIFIER_DOC)
    where = tmp_path_factory.mktemp("index")
    result = runner.invoke(app, ["index", str(docs), "--index-dir", str(where), "--json"])
    assert result.exit_code == 0, result.output
    return where


def test_a_better_matching_user_doc_is_the_top_search_result(index_dir: Path) -> None:
    result = runner.invoke(app, ["search", QUESTION, "--index-dir", str(index_dir), "-k", "5", "--json"])
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    assert results[0]["kind"] == "doc" and results[0]["section"].endswith("Reward verifier timing out")
    assert any(r["kind"] == "card" for r in results)  # the cards were in the same ranking, and lost


def test_ask_offline_leads_with_the_user_doc_and_says_where_fixes_come_from(index_dir: Path) -> None:
    result = runner.invoke(app, ["ask", QUESTION, "--offline", "--index-dir", str(index_dir), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    first_cite = data["citations"][0]
    assert first_cite["kind"] == "doc" and first_cite["ref"].endswith("verifier.md")
    assert first_cite["section"].endswith("Reward verifier timing out")
    first = data["answer"].splitlines()[0]
    assert first.startswith("From your documents (") and "[1]" in first
    assert "VERIFIER_TIMEOUT_S" in first  # the doc's own fix, quoted
    # every fix says where it comes from: a numbered source, here the playbook card behind it
    fix_lines = [line for line in data["answer"].split("What to change")[1].splitlines()[1:] if re.match(r"  \d+\. ", line)]
    assert fix_lines
    for line in fix_lines:
        number = int(re.search(r"\[(\d+)\]$", line).group(1))
        assert data["citations"][number - 1]["kind"] == "card", line
    assert data["answer"].index("[1]") < data["answer"].index("[2]")


def test_a_card_that_matches_better_still_comes_first(index_dir: Path) -> None:
    result = runner.invoke(app, ["ask", "sglang keeps running out of memory during rollout", "--offline",
                                 "--index-dir", str(index_dir), "--json"])
    data = json.loads(result.stdout)
    assert data["citations"][0]["kind"] == "card" and data["citations"][0]["ref"] == "oom-sglang-generation"
    assert "From your documents" not in data["answer"]
