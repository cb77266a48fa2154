"""slime flags against the generated schema: typos, types, choices, switches; corpus scripts lint clean."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO, SHARED
from rlmedic.tools.config.checks import lint_slime
from rlmedic.tools.config.fix import fix_parsed
from rlmedic.tools.config.rules import LintContext
from rlmedic.tools.config.slime import parse_slime_launch
from rlmedic.tools.config.slime_flags import default_of, flags, schema
from rlmedic.ui.cli import app
from typer.testing import CliRunner

FLAG_RULES = ("slime-unknown-flag", "slime-flag-type", "slime-flag-choice", "slime-switch-value", "slime-flag-missing-value")
SCRIPT = """#!/bin/bash
ROLLOUT_ARGS=(
   --rollout-batch-size 32
   --n-samples-per-prompt 8
   --rollout-max-response-len 8192
)
TRAIN_ARGS=(
   --global-batch-size 256
   --advantage-estimator grpo
)
python3 train.py --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\
   --sglang-mem-fraction-static 0.7 \\
   ${ROLLOUT_ARGS[@]} ${TRAIN_ARGS[@]}
"""


def _flag_problems(text: str) -> list:
    return [p for p in lint_slime(parse_slime_launch(text, "run.sh")) if p.rule in FLAG_RULES]


def test_clean_script_has_no_flag_problems() -> None:
    assert _flag_problems(SCRIPT) == []


@pytest.mark.parametrize(("wrong", "right", "line"), [
    ("--rollout-batch-size 32", "--rollout-batch-szie 32", 3),
    ("--rollout-max-response-len 8192", "--rollout-max-reponse-len 8192", 5),
])
def test_misspelt_flag_gets_did_you_mean_and_a_rename(wrong: str, right: str, line: int) -> None:
    typo = right.split()[0]
    meant = wrong.split()[0]
    problems = _flag_problems(SCRIPT.replace(wrong, right))
    assert len(problems) == 1
    problem = problems[0]
    assert problem.rule == "slime-unknown-flag" and problem.severity == "error" and problem.line == line
    assert f"did you mean {meant}?" in problem.message and problem.suggestion == meant
    change = problem.fixes[0]
    assert (change.op, change.key, change.new) == ("rename", typo, meant)
    fixed = fix_parsed("slime", parse_slime_launch(SCRIPT.replace(wrong, right), "run.sh"), LintContext())
    assert wrong in fixed.text and typo not in fixed.text
    assert not [p for p in fixed.remaining if p.rule in FLAG_RULES]


def test_typo_no_longer_hides_the_batch_rule() -> None:
    """The misspelt flag is an error of its own; fixed, the batch arithmetic it carried is checked again."""
    text = SCRIPT.replace("--rollout-batch-size 32", "--rollout-batch-szie 30")
    result = fix_parsed("slime", parse_slime_launch(text, "run.sh"), LintContext())
    assert any(p.rule == "slime-unknown-flag" for p in result.problems)
    assert "--rollout-batch-size 30" in result.text
    assert any(c.rule == "slime-batch-arithmetic" for c in result.changes)


def test_value_of_the_wrong_type() -> None:
    problems = _flag_problems(SCRIPT.replace("--n-samples-per-prompt 8", "--n-samples-per-prompt eight"))
    assert [(p.rule, p.key) for p in problems] == [("slime-flag-type", "--n-samples-per-prompt")]
    assert "expects an integer, got 'eight'" in problems[0].message
    problems = _flag_problems(SCRIPT.replace("0.7", "0,7"))
    assert [(p.rule, p.key) for p in problems] == [("slime-flag-type", "--sglang-mem-fraction-static")]


def test_value_outside_the_choices_gets_the_closest() -> None:
    wrong, right = "reinforce_plus_plus_basline", "reinforce_plus_plus_baseline"
    problems = _flag_problems(SCRIPT.replace("--advantage-estimator grpo", f"--advantage-estimator {wrong}"))
    assert [(p.rule, p.suggestion) for p in problems] == [("slime-flag-choice", right)]
    assert f"did you mean {right!r}?" in problems[0].message
    assert problems[0].fixes[0].new == right and problems[0].fixes[0].old == wrong


@pytest.mark.parametrize(("value", "op", "expect"), [("true", "remove_value", "--colocate \\"), ("false", "remove_flag", None)])
def test_switch_given_a_value(value: str, op: str, expect: str | None) -> None:
    text = SCRIPT.replace("--colocate \\", f"--colocate {value} \\")
    problems = _flag_problems(text)
    assert [(p.rule, p.key) for p in problems] == [("slime-switch-value", "--colocate")]
    assert problems[0].fixes[0].op == op
    if value == "false":
        assert "still on" in problems[0].message
    fixed = fix_parsed("slime", parse_slime_launch(text, "run.sh"), LintContext())
    assert f"--colocate {value}" not in fixed.text
    if expect:
        assert expect in fixed.text
    else:
        assert "--colocate" not in fixed.text
    assert not [p for p in fixed.remaining if p.rule in FLAG_RULES]


def test_value_flag_without_a_value() -> None:
    problems = _flag_problems(SCRIPT.replace("--global-batch-size 256", "--global-batch-size"))
    assert [(p.rule, p.key) for p in problems] == [("slime-flag-missing-value", "--global-batch-size")]


def test_unknown_flag_without_a_close_match_is_a_warning() -> None:
    problems = _flag_problems(SCRIPT.replace("--advantage-estimator grpo", "--advantage-estimator grpo --my-reward-knob 3"))
    assert [(p.rule, p.severity, p.suggestion) for p in problems] == [("slime-unknown-flag", "warning", "")]


def test_unresolved_values_are_not_type_checked() -> None:
    text = SCRIPT.replace("--n-samples-per-prompt 8", "--n-samples-per-prompt $(nproc)")
    assert _flag_problems(text) == []


def test_schema_covers_the_three_parsers_at_pinned_versions() -> None:
    data = schema()
    assert set(data["sources"]) == {"slime", "megatron", "sglang", "router"}
    assert "624b824a898ab0ec1fcb4d373004c7f3852bf515" in data["sources"]["slime"]
    table = flags()
    assert table["--colocate"]["nargs"] == 0 and table["--colocate"]["source"] == "slime"
    assert table["--tensor-model-parallel-size"]["type"] == "int" and table["--tensor-model-parallel-size"]["source"] == "megatron"
    assert table["--sglang-mem-fraction-static"]["type"] == "float"
    assert "--sglang-tp-size" not in table  # slime sets SGLang's tp_size itself and skips the flag
    assert default_of("--actor-num-gpus-per-node") == 8
    assert default_of("--lr") == 1e-6  # slime resets Megatron's default
    assert sum(data["counts"].values()) == len(table) > 1000


def test_slime_part_of_the_schema_is_what_the_build_script_reads(tmp_path: Path, shared: Path) -> None:
    """Rebuilt from slime's own argument files (shared corpus), every slime flag matches the shipped table."""
    spec = importlib.util.spec_from_file_location("build_slime_schema", REPO / "tools" / "config" / "build_slime_schema.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    own = module.build(SHARED / "corpus" / "slime-src", None, None)
    assert own["sources"] == {"slime": schema()["sources"]["slime"]}
    shipped = flags()
    slime_only = {k: v for k, v in own["flags"].items() if v["source"] == "slime"}
    assert len(slime_only) > 150
    for name, entry in slime_only.items():
        assert shipped[name] == entry, name
    out = tmp_path / "s.json"
    module.main(["--slime-src", str(SHARED / "corpus" / "slime-src"), "-o", str(out)])
    assert json.loads(out.read_text())["flags"] == own["flags"]


def _corpus_scripts() -> list[tuple[str, str]]:
    """Launch scripts in the shared corpus: *.sh files, and shell blocks of the slime docs that run
    train.py or define the *_ARGS arrays a run script expands."""
    root = SHARED / "corpus"
    found: list[tuple[str, str]] = [(str(p.relative_to(root)), p.read_text()) for p in sorted(root.rglob("*.sh"))]
    for page in sorted((root / "slime").rglob("*.md")):
        blocks = re.findall(r"```(?:bash|shell|sh)?\n(.*?)```", page.read_text(), re.S)
        for i, block in enumerate(blocks):
            if re.search(r"\btrain(_async)?\.py\b", block) or re.search(r"^\s*[A-Z_]+_ARGS=\(", block, re.M):
                found.append((f"{page.relative_to(root)}#{i}", block))
    return found


def test_every_corpus_launch_script_lints_without_false_flag_errors(shared: Path) -> None:
    scripts = _corpus_scripts()
    assert len(scripts) >= 40
    flagged: dict[str, list[str]] = {}
    checked = 0
    for name, text in scripts:
        launch = parse_slime_launch(text, name)
        checked += len(launch.flags)
        for problem in lint_slime(launch):
            if problem.rule in FLAG_RULES and problem.severity == "error":
                flagged.setdefault(name, []).append(problem.message)
    assert checked > 300
    # the one error is real: slime's DeepSeek-R1 page writes "----sglang-ep-size" (four dashes)
    assert list(flagged) == ["slime/en/examples/deepseek-r1.md#11"], flagged
    assert flagged["slime/en/examples/deepseek-r1.md#11"][0].startswith("----sglang-ep-size is not a slime flag; did you mean --sglang-ep-size?")


def test_cli_lint_config_reports_the_typo_and_exits_1(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT.replace("--rollout-batch-size 32", "--rollout-batch-szie 32"))
    result = CliRunner().invoke(app, ["lint-config", str(script)])
    assert result.exit_code == 1, result.output
    assert "did you mean --rollout-batch-size?" in result.stdout
