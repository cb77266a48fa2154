"""Help text a newcomer can read, and a README that documents every flag."""

from __future__ import annotations

import re

import typer.main
from conftest import REPO
from rlmedic.ui.cli import app
from typer.testing import CliRunner

runner = CliRunner()
COMMANDS = typer.main.get_command(app).commands
INTERNAL_WORDS = ("seed", "the registry", "toolset", "ToolContext")


def test_command_list_has_whole_one_sentence_summaries() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    rows = [line.split(None, 1) for line in result.stdout.split("Commands:")[1].strip().splitlines()]
    assert {name for name, _ in rows} == set(COMMANDS)
    for name, summary in rows:
        assert summary.endswith(".") and not summary.endswith("..."), (name, summary)
        assert summary.count(". ") == 0, (name, summary)  # one sentence
        assert not any(w in summary for w in INTERNAL_WORDS), (name, summary)


def test_usage_and_option_lines_are_plain() -> None:
    for name in COMMANDS:
        text = runner.invoke(app, [name, "--help"]).stdout
        assert re.search(r"\{[A-Z]+\}", text) is None, (name, text)  # {PATH}...
        assert re.search(r"<(list|str|int|path|float|Path)[^>]*>", text) is None, (name, text)  # <list[Path]>
        assert not any(w in text for w in INTERNAL_WORDS), (name, text)
    diagnose = runner.invoke(app, ["diagnose", "--help"]).stdout
    assert "Usage: rlmedic diagnose [OPTIONS] [PATH]..." in diagnose  # optional: --ray-address reads a cluster instead
    assert "--fail-on warning|error|critical" in diagnose


def test_help_names_every_choice_and_no_doubled_ellipsis() -> None:
    """An option's value label lists every value it takes (``--fail-on`` accepts ``warning``),
    and an argument of many values reads ``PATH...``, not ``PATH......``."""
    import enum

    checked = 0
    for name, command in COMMANDS.items():
        text = runner.invoke(app, [name, "--help"]).stdout
        assert "...." not in text, (name, text)
        for param in command.params:
            choices = getattr(param.type, "choices", None)  # an Enum option is a choice of its values
            if param.param_type_name == "option" and choices:
                label = next(line for line in text.splitlines() if param.opts[-1] in line)
                missing = [str(c.value if isinstance(c, enum.Enum) else c) for c in choices
                           if str(c.value if isinstance(c, enum.Enum) else c) not in label]
                assert not missing, (name, param.opts, label, missing)
                checked += 1
    assert checked >= 1  # --fail-on at least
    assert "--index-dir DIR" in runner.invoke(app, ["search", "--help"]).stdout


def test_readme_command_table_documents_every_flag() -> None:
    readme = (REPO / "README.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `rlmedic ([a-z-]+) .*$", readme, re.M)}
    assert set(rows) == set(COMMANDS)
    missing = []
    for name, command in COMMANDS.items():
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-") and opt != "--help" and not re.search(rf"`[^`]*{re.escape(opt)}\b[^`]*`", rows[name]):
                    missing.append(f"{name} {opt}")
    assert not missing, missing
