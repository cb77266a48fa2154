"""slime launch arguments: shell scripts with arrays, argument lists, and text-patch edits."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ANYWHERE, FIXTURES
from rlmedic.errors import UserError
from rlmedic.tools.config.slime import (
    load_slime_launch,
    looks_like_slime,
    parse_slime_args,
    parse_slime_launch,
    tokenize,
)

SLIME = FIXTURES / "configs" / "slime"


def test_script_arrays_and_variables_expand_in_order() -> None:
    launch = load_slime_launch(SLIME / "base.sh", confinement=ANYWHERE)
    assert launch.entry == "train.py"
    assert launch.cluster_gpus == 8
    args = launch.as_args()
    assert args[:5] == ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--colocate"]
    assert args[args.index("--save") + 1] == "/workspace/ckpt/qwen3-4b-grpo"
    assert launch.get_int("--rollout-batch-size") == 32
    assert launch.get("--sglang-mem-fraction-static") == "0.7"
    assert launch.has("--use-dynamic-batch-size") and launch.get("--use-dynamic-batch-size") is None
    assert launch.line("--global-batch-size") == 34
    by_flag = {f.flag: f for f in launch.flags}
    assert by_flag["--rollout-batch-size"].source == "ROLLOUT_ARGS"
    assert by_flag["--colocate"].source == ""
    # ray job submit flags before `--` are not training flags
    assert not launch.has("--address") and not launch.has("--runtime-env-json")


def test_argument_list_file_and_python_list() -> None:
    launch = load_slime_launch(SLIME / "args.txt", confinement=ANYWHERE)
    assert launch.entry is None
    assert launch.get_int("--num-steps-per-rollout") == 2
    from_list = parse_slime_args(["--rollout-batch-size", "8", "--colocate", "--rollout-stop-token-ids", "1", "2"])
    assert from_list.get("--rollout-stop-token-ids") == "1 2"
    assert from_list.has("--colocate")
    from_list.set_flag("--rollout-batch-size", 16)
    assert from_list.as_args()[:2] == ["--rollout-batch-size", "16"]


def test_flag_equals_value_comments_and_quotes() -> None:
    text = (
        "python3 train.py --lr=1e-6 \\\n"
        "  --rollout-batch-size 32 \\\n"
        "  # a comment line with --colocate inside is ignored\n"
    )
    launch = parse_slime_launch(text)
    assert launch.get("--lr") == "1e-6"
    assert not launch.has("--colocate")
    launch.set_flag("--lr", "2e-6")
    assert "--lr=2e-6" in launch.dump()


def test_tokenizer_keeps_subshells_and_quotes_together() -> None:
    statements = tokenize('X=( --a "b c" --d $(seq 1 3) )\necho ${X[@]}\n')
    assert [t.value for t in statements[0]] == ["X=", "(", "--a", "b c", "--d", "$(seq 1 3)", ")"]
    assert [t.text for t in statements[1]] == ["echo", "${X[@]}"]


def test_edits_patch_only_their_lines() -> None:
    launch = load_slime_launch(SLIME / "base.sh", confinement=ANYWHERE)
    original = launch.original
    launch.set_flag("--global-batch-size", 128)
    launch.add_flag("--use-fault-tolerance")
    launch.add_flag("--rollout-num-gpus", 4, near="--actor-num-gpus-per-node")
    launch.remove_flag("--colocate")
    diff = [l for l in launch.diff().splitlines() if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    assert diff == [
        "-   --global-batch-size 256",
        "+   --global-batch-size 128",
        "+   --use-fault-tolerance",  # after the last flag: the end of SGLANG_ARGS
        "-   --colocate \\",
        "+   --rollout-num-gpus 4 \\",
    ]
    assert launch.get_int("--rollout-num-gpus") == 4 and not launch.has("--colocate")
    assert launch.has("--use-fault-tolerance")
    assert launch.original == original


def test_removing_the_last_continued_line_ends_the_command() -> None:
    text = "python3 train.py \\\n   --colocate \\\n   --rollout-batch-size 8 \\\n   --debug-rollout-only\n"
    launch = parse_slime_launch(text)
    launch.remove_flag("--debug-rollout-only")
    assert launch.dump() == "python3 train.py \\\n   --colocate \\\n   --rollout-batch-size 8\n"
    assert launch.get_int("--rollout-batch-size") == 8


def test_editing_through_a_variable_changes_its_assignment() -> None:
    launch = load_slime_launch(SLIME / "save_relative.sh", confinement=ANYWHERE)
    launch.set_flag("--save", "/workspace/ckpt/x")
    assert "SAVE_DIR=/workspace/ckpt/x\n" in launch.dump()
    assert launch.get("--load") == "/workspace/ckpt/x"


def test_multi_value_flag_cannot_be_set_as_text() -> None:
    launch = parse_slime_args(["--rollout-stop-token-ids", "1", "2"])
    with pytest.raises(UserError, match="several values"):
        launch.set_flag("--rollout-stop-token-ids", 3)


def test_no_flags_is_reported() -> None:
    launch = parse_slime_launch("echo hello\n")
    assert [p.rule for p in launch.problems] == ["slime-parse"]


def test_looks_like_slime() -> None:
    assert looks_like_slime((SLIME / "base.sh").read_text())
    assert looks_like_slime("--rollout-batch-size 4\n")
    assert not looks_like_slime("actor:\n  path: x\n")


def test_adding_a_flag_after_an_unterminated_quote_is_not_a_crash(tmp_path: Path) -> None:
    """A script cut off inside a quote (a bad paste) made fix-config index past the last line."""
    from rlmedic.tools.config.fix import fix_config

    for text in ('python3 train.py --max-tokens-per-gpu "9216\n', "python3 train.py --max-tokens-per-gpu '9216",
                 "python3 train.py --max-tokens-per-gpu 9216 \\"):
        src = tmp_path / "run.sh"
        src.write_text(text)
        result = fix_config(src, confinement=ANYWHERE)
        # the flag cannot be placed safely in a cut-off script: the text is left as it was and
        # the change is listed as an action to apply by hand
        assert result.text == text and result.changes == []
        by_hand = [a for a in result.actions if a.key == "--use-dynamic-batch-size"]
        assert len(by_hand) == 1 and "apply by hand" in by_hand[0].reason, (text, [a.reason for a in result.actions])


def test_shell_defaults_and_earlier_assignments_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """${RBS:=32}, $N_SAMPLES assigned earlier and "${STEPS}" from ${STEPS:-1} feed the batch arithmetic."""
    from rlmedic.tools.config.fix import lint_config

    monkeypatch.setenv("RBS", "64")  # the process environment is never read
    monkeypatch.setenv("STEPS", "2")
    launch = load_slime_launch(SLIME / "batch_from_variables.sh", confinement=ANYWHERE)
    assert launch.get_int("--rollout-batch-size") == 32
    assert launch.get_int("--n-samples-per-prompt") == 8  # N_SAMPLES=4 comes after the command
    assert launch.get_int("--num-steps-per-rollout") == 1
    assert launch.get_int("--actor-num-gpus-per-node") == 8 and launch.cluster_gpus == 8
    assert launch.variables["RBS"] == "32"  # ${RBS:=32} assigns it
    problems = lint_config(SLIME / "batch_from_variables.sh", confinement=ANYWHERE).problems
    assert [p.rule for p in problems] == ["slime-batch-arithmetic"]
    assert "32 x 8 = 256" in problems[0].message and "128 x 1" in problems[0].message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("python3 train.py --rollout-batch-size ${RBS:-32}\n", "32"),
        ("RBS=16\npython3 train.py --rollout-batch-size ${RBS:-32}\n", "16"),
        ("RBS=\npython3 train.py --rollout-batch-size ${RBS:-32}\n", "32"),  # empty counts as unset for :-
        ("RBS=${RBS:-8}\nexport N=2\npython3 train.py --rollout-batch-size $RBS --n $N\n", "8"),
        ("X=( --rollout-batch-size ${RBS:=4} )\npython3 train.py ${X[@]} --b $RBS\n", "4"),
        ("python3 train.py --rollout-batch-size=${RBS:-32}\n", "32"),
        ("python3 train.py --rollout-batch-size ${A:-${B:-7}}\n", "7"),
        # not resolved, as before: unassigned, single-quoted, other expansions, assigned after the command
        ("python3 train.py --rollout-batch-size $RBS\n", "$RBS"),
        ("python3 train.py --rollout-batch-size '${RBS:-32}'\n", "${RBS:-32}"),
        ("python3 train.py --rollout-batch-size ${RBS-32}\n", "${RBS-32}"),
        ("python3 train.py --rollout-batch-size $((4*8))\n", "$((4*8))"),
        ("python3 train.py --rollout-batch-size $RBS\nRBS=32\n", "$RBS"),
    ],
)
def test_expansion_forms(text: str, value: str) -> None:
    assert parse_slime_launch(text).get("--rollout-batch-size") == value


def test_fix_through_a_shell_default_is_an_edit_by_hand(tmp_path: Path) -> None:
    """A literal flag value is edited in place; a value from ${GBS:-128} is not overwritten but explained."""
    from rlmedic.tools.config.fix import fix_config

    original = (SLIME / "batch_from_variables.sh").read_text()
    result = fix_config(SLIME / "batch_from_variables.sh", confinement=ANYWHERE)
    assert [(c.key, c.old, c.new) for c in result.changes] == [("--global-batch-size", 128, 256)]
    assert result.text == original.replace("   --global-batch-size 128\n", "   --global-batch-size 256\n")

    src = tmp_path / "run.sh"
    src.write_text(original.replace("--global-batch-size 128", "--global-batch-size ${GBS:-128}"))
    result = fix_config(src, confinement=ANYWHERE)
    assert result.changes == [] and result.text == src.read_text()
    (action,) = [a for a in result.actions if a.key == "--global-batch-size"]
    assert "by hand" in action.reason and "change ${GBS:-128} to ${GBS:-256}" in action.reason

    launch = parse_slime_launch("GBS=64\nRBS=${RBS:-8}\npython3 train.py --global-batch-size ${GBS:=128} --rollout-batch-size $RBS\n")
    with pytest.raises(UserError, match=r"GBS is assigned GBS=64 at line 1, so the default is not used: change that assignment to GBS=256"):
        launch.set_flag("--global-batch-size", 256)
    with pytest.raises(UserError, match=r"assigned RBS=\$\{RBS:-8\} at line 2, a shell default: change \$\{RBS:-8\} to \$\{RBS:-16\}"):
        launch.set_flag("--rollout-batch-size", 16)
    assert launch.dump() == launch.original
    plain = parse_slime_launch("GBS=64\npython3 train.py --global-batch-size $GBS\n")
    plain.set_flag("--global-batch-size", 256)  # a plain assignment is still edited where it is made
    assert plain.dump() == "GBS=256\npython3 train.py --global-batch-size $GBS\n"
