"""The layers you can see: ui -> agent -> tools -> knowledge -> core, and nothing upward.

Every import in every module (top-level and the lazy ones inside functions) is read with
``ast``; a module may import its own layer and the layers below it. The one exception is
the package's ``__main__`` (``python -m rlmedic`` runs the CLI). A broken rule names the
file and the import, so the fix (move the code down, or pass the dependency in) is clear.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: source folder -> package, bottom layer first
LAYERS = (("core", "rlmedic"), ("knowledge", "rlmedic.knowledge"), ("tools", "rlmedic.tools"),
          ("agent", "rlmedic.agent"), ("ui", "rlmedic.ui"))
RANK = {pkg: n for n, (_, pkg) in enumerate(LAYERS)}
ENTRY_POINTS = {"core/__main__.py"}


def layer_of(module: str) -> str:
    for _, pkg in reversed(LAYERS):
        if pkg != "rlmedic" and (module == pkg or module.startswith(pkg + ".")):
            return pkg
    return "rlmedic"


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute rlmedic import in ``path``, lazy ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out += [(node.lineno, n) for n in names if n == "rlmedic" or n.startswith("rlmedic.")]
    return out


def upward(folder: str, pkg: str) -> list[str]:
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ENTRY_POINTS:
            continue
        for line, module in imports(path):
            if RANK[layer_of(module)] > RANK[pkg]:
                bad.append(f"{rel}:{line} imports {module} ({layer_of(module)} is above {pkg})")
    return bad


@pytest.mark.parametrize("folder,pkg", LAYERS)
def test_no_layer_imports_a_layer_above_it(folder: str, pkg: str) -> None:
    assert upward(folder, pkg) == []


def test_the_check_sees_lazy_imports_and_upward_ones(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os\n\ndef f():\n    from rlmedic.ui.cli import app\n    import rlmedic.agent.engine\n")
    assert imports(probe) == [(4, "rlmedic.ui.cli"), (5, "rlmedic.agent.engine")]
    assert [RANK[layer_of(m)] for _, m in imports(probe)] == [4, 3]
    assert layer_of("rlmedic.confine") == "rlmedic" and layer_of("rlmedic.tools.registry") == "rlmedic.tools" and layer_of("rlmedic.knowledge.known.match") == "rlmedic.knowledge"


def test_the_agent_folder_holds_the_agent_only() -> None:
    """Watch (a log tool), model serving (a command) and Slack threads (the Session) live elsewhere."""
    names = {p.stem for p in (ROOT / "agent").glob("*.py")}
    assert not names & {"watch", "serve", "threads", "conversation", "grounding"}


def test_the_cli_is_one_way() -> None:
    """``ui/cli.py`` assembles the command modules; none of them imports it back (they share ``clikit``)."""
    back = [f"{p.relative_to(ROOT).as_posix()}:{line} imports {module}"
            for p in sorted((ROOT / "ui").glob("cli_*.py")) for line, module in imports(p)
            if module == "rlmedic.ui.cli"]
    assert back == []
    tree = ast.parse((ROOT / "ui" / "cli.py").read_text(encoding="utf-8"))
    assembled = {a.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.module == "rlmedic.ui"
                 for a in node.names}
    assert {p.stem for p in (ROOT / "ui").glob("cli_*.py")} <= assembled  # plain imports, none by string
