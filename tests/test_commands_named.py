"""Every ``rlmedic COMMAND`` that cards, docs, README and user-facing messages tell people to
run is a command the CLI has: a renamed or imagined command (``rlmedic lint CONFIG``) fails here.

A mention is ``rlmedic WORD`` inside backticks or a fenced code block, or followed by an
argument placeholder (``CONFIG``, ``PATH...``) or an option (``--json``); prose such as
"rlmedic never writes" is not a command.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlmedic.ui.cli import app

REPO = Path(__file__).resolve().parents[1]

#: Where users read commands: docs, cards and other data, and the messages in the code.
SOURCES = [
    *REPO.glob("*.md"),
    *(p for d in ("core", "agent", "knowledge", "tools", "ui") for p in (REPO / d).rglob("*")
      if p.suffix in {".md", ".yaml", ".yml", ".py", ".json", ".txt"} and p.is_file()),
]

_COMMAND = r"(?<![@\w])(?:\.venv/bin/)?rlmedic[ \t]+([a-z][a-z0-9-]*)"
#: a code span (paired backticks, one line) and a fenced block
_SPAN = re.compile(r"(`+)([^`\n]+?)\1")
_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
#: in prose: followed by a placeholder (``CONFIG``, ``PATH...``) or an option
_WITH_ARGS = re.compile(_COMMAND + r"[ \t]+(?:[A-Z][A-Z_]+(?:\.\.\.|[),;\]]|[ \t]+[-A-Z\[(]|$)|--?[a-z]|\[)", re.M)


def commands() -> set[str]:
    return {info.name or info.callback.__name__.replace("_", "-") for info in app.registered_commands}


def mentions(text: str) -> set[str]:
    """The command names ``text`` tells a user to run."""
    found = set(_WITH_ARGS.findall(text))
    for code in [m.group(2) for m in _SPAN.finditer(_FENCE.sub("", text))] + _FENCE.findall(text):
        found |= set(re.findall(_COMMAND, code))
    return found


def test_the_parser_finds_commands_and_skips_prose() -> None:
    text = ("rlmedic never writes a file. Run `rlmedic diagnose PATH` or rlmedic lint CONFIG, "
            "then rlmedic ask --offline. Mention `@rlmedic why` in Slack; ``nargs``, which rlmedic ships; "
            "rlmedic troubleshoots RL runs.\n```bash\nkubectl logs x | .venv/bin/rlmedic excerpt -\n```\n")
    assert mentions(text) == {"diagnose", "lint", "ask", "excerpt"}


def test_the_sources_are_there() -> None:
    names = {p.name for p in SOURCES}
    assert {"README.md", "config-validation-error.yaml", "cli.py"} <= names
    # the README's table and examples name (nearly) every command: the parser sees them
    assert len(mentions((REPO / "README.md").read_text()) & commands()) >= len(commands()) - 2


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_named_command_exists(path: Path) -> None:
    named = mentions(path.read_text(encoding="utf-8", errors="replace"))
    unknown = sorted(named - commands())
    assert not unknown, f"{path.relative_to(REPO)} names commands rlmedic does not have: {unknown}"
