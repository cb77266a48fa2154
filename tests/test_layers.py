"""The layers you can see: ui -> agent -> tools -> knowledge -> core, and nothing upward.

Every import in every module is read with ``ast``: top-level and the lazy ones inside
functions, absolute and relative, and ``from package import module`` as the edge to that
module. A module may import its own layer and the layers below it. An import by string
(``importlib.import_module``, ``__import__``) of rlmedic code would be an edge this check
cannot see, so there is none, but one form: a package's ``__init__`` importing its own
children by name (``import_module(f"{__name__}.{name}")``, how ``tools/toolset/`` loads every
tool module in its folder), counted here as an edge to each module in that folder. The one exception to the layers is the package's
``__main__`` (``python -m rlmedic`` runs the CLI). A broken rule names the file and the
import, so the fix (move the code down, or pass the dependency in) is clear.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: source folder -> package, bottom layer first
LAYERS = (("core", "rlmedic"), ("knowledge", "rlmedic.knowledge"), ("tools", "rlmedic.tools"),
          ("agent", "rlmedic.agent"), ("ui", "rlmedic.ui"))
RANK = {pkg: n for n, (_, pkg) in enumerate(LAYERS)}
ENTRY_POINTS = {"core/__main__.py"}
#: Calls that import a module named by a string.
STRING_IMPORTS = {"import_module", "__import__", "run_module", "find_spec"}


def layer_of(module: str) -> str:
    for _, pkg in reversed(LAYERS):
        if pkg != "rlmedic" and (module == pkg or module.startswith(pkg + ".")):
            return pkg
    return "rlmedic"


def module_of(path: Path) -> str:
    """The dotted name of a source file (``tools/logs/scan.py`` -> ``rlmedic.tools.logs.scan``)."""
    rel = path.relative_to(ROOT)
    pkg = dict(LAYERS)[rel.parts[0]]
    parts = [*pkg.split("."), *rel.parts[1:-1]] + ([] if rel.stem == "__init__" else [rel.stem])
    return ".".join(parts)


#: Every module of the package, by dotted name.
MODULES = {module_of(p): p for folder, _ in LAYERS for p in sorted((ROOT / folder).rglob("*.py"))}


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def imports(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """(line, module) of every rlmedic import in ``path``: lazy ones, relative ones resolved against
    ``package`` (the file's own by default), and ``from pkg import sub`` as ``pkg.sub`` when ``sub``
    is a module."""
    if package is None:
        here = module_of(path)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - (node.level - 1)], *([base] if base else [])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif path.name == "__init__.py" and _imports_children(node):
            names = [m for m in MODULES if m.rpartition(".")[0] == package and not m.rpartition(".")[2].startswith("_")]
        else:
            continue
        out += [(node.lineno, n) for n in dict.fromkeys(names) if n == "rlmedic" or n.startswith("rlmedic.")]
    return out


def _imports_children(node: ast.AST) -> bool:
    """``import_module(f"{__name__}.{...}")``: a package importing a module of its own folder."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.JoinedStr)):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    parts = node.args[0].values
    return (name == "import_module" and len(parts) == 3 and isinstance(parts[0], ast.FormattedValue)
            and isinstance(parts[0].value, ast.Name) and parts[0].value.id == "__name__"
            and isinstance(parts[1], ast.Constant) and parts[1].value == ".")


def string_imports(path: Path) -> list[tuple[int, str]]:
    """(line, call) of every import by string of rlmedic code (or of a name not written out), but a
    package's ``__init__`` importing its own children (see :func:`imports`)."""
    out = []
    for node in ast.walk(_tree(path)):
        if not isinstance(node, ast.Call) or (path.name == "__init__.py" and _imports_children(node)):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in STRING_IMPORTS or not node.args:
            continue
        arg = node.args[0]
        literal = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
        if literal is None or literal == "rlmedic" or literal.startswith("rlmedic."):
            out.append((node.lineno, ast.unparse(node)))
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


def test_every_edge_is_written_as_an_import() -> None:
    hidden = [f"{p.relative_to(ROOT).as_posix()}:{line} {call}" for p in MODULES.values()
              for line, call in string_imports(p)]
    assert hidden == []


def test_every_import_names_a_module_or_package_that_exists() -> None:
    """An import the check cannot place (a typo, a module moved without its importers) is a hidden edge too."""
    missing = [f"{p.relative_to(ROOT).as_posix()}:{line} imports {module}" for p in MODULES.values()
               for line, module in imports(p)
               if module not in MODULES and module.rpartition(".")[0] not in MODULES]
    assert missing == []


def test_the_check_sees_lazy_relative_submodule_and_string_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os\n\ndef f():\n    from rlmedic.ui.cli import app\n    import rlmedic.agent.engine\n"
                     "    from rlmedic.tools import registry, toolset\n"
                     "    importlib.import_module('rlmedic.tools.toolset')\n    __import__(name)\n    __import__('os')\n"
                     "    from . import events\n    from ..ui import cli\n    from .events import Event\n")
    assert imports(probe, package="rlmedic.agent") == [
        (4, "rlmedic.ui.cli"), (5, "rlmedic.agent.engine"), (6, "rlmedic.tools.registry"), (6, "rlmedic.tools.toolset"),
        (10, "rlmedic.agent.events"), (11, "rlmedic.ui.cli"), (12, "rlmedic.agent.events")]
    assert [line for line, _ in string_imports(probe)] == [7, 8]  # a stdlib module by its literal name is no edge
    assert [RANK[layer_of(m)] for _, m in imports(probe, package="rlmedic.agent")] == [4, 3, 2, 2, 3, 4, 3]
    assert layer_of("rlmedic.confine") == "rlmedic" and layer_of("rlmedic.tools.registry") == "rlmedic.tools"
    assert layer_of("rlmedic.knowledge.known.match") == "rlmedic.knowledge"
    assert module_of(ROOT / "agent" / "events.py") == "rlmedic.agent.events"
    assert module_of(ROOT / "tools" / "logs" / "__init__.py") == "rlmedic.tools.logs"
    assert module_of(ROOT / "core" / "confine.py") == "rlmedic.confine"


def test_a_package_importing_its_own_children_is_seen_and_nothing_else_is_allowed(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text("def load():\n    for n in names:\n        importlib.import_module(f'{__name__}.{n}')\n"
                    "    importlib.import_module(f'rlmedic.ui.{n}')\n    importlib.import_module(f'{__name__}{n}')\n")
    assert [line for line, _ in string_imports(init)] == [4, 5]  # another prefix, or no dot: hidden edges
    children = imports(init, package="rlmedic.tools.toolset")
    assert {m for _, m in children} == {m for m in MODULES if m.startswith("rlmedic.tools.toolset.")
                                        and not m.rpartition(".")[2].startswith("_")}
    assert {line for line, _ in children} == {3} and "rlmedic.tools.toolset.logs" in {m for _, m in children}
    plain = tmp_path / "plain.py"  # outside an __init__ the same call hides an edge
    plain.write_text("importlib.import_module(f'{__name__}.{n}')\n")
    assert [line for line, _ in string_imports(plain)] == [1] and imports(plain, package="rlmedic.tools") == []


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
    assembled = {m for _, m in imports(ROOT / "ui" / "cli.py")}
    assert {f"rlmedic.ui.{p.stem}" for p in (ROOT / "ui").glob("cli_*.py")} <= assembled  # plain imports
