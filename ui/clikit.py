"""What every command module shares: running a registry tool for the CLI, its context, JSON output.

The command modules (``cli_*.py``) import this, never :mod:`rlmedic.ui.cli`: the CLI is
one-way (``cli.py`` imports the command modules and assembles them into one app; they do
not import it back). Nothing heavy at module level: ``rlmedic --help`` loads this.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def run_tool(name: str, arguments: dict[str, Any], roots: list[Any], *, ctx: Any = None, **context: Any) -> Any:
    """Run a registry tool for the CLI: the roots are the paths the user typed (plus
    ``RLMEDIC_ALLOWED_ROOTS``); a user error becomes one line and exit 2, a bug keeps its
    traceback. Returns the tool's (redacted) result object. Pass ``ctx`` (from
    :func:`tool_context`) to keep it: its confinement knows every file the tool read, which
    an output (``-o``, ``--save``) must never replace."""
    return call_tool(name, arguments, roots, ctx=ctx, **context).value


def call_tool(name: str, arguments: dict[str, Any], roots: list[Any], *, ctx: Any = None, **context: Any) -> Any:
    """:func:`run_tool`, returning the whole (redacted) ``ToolResult``: value, JSON data and text."""
    from rlmedic.notices import step
    from rlmedic.tools.registry import REGISTRY

    ctx = ctx or tool_context(roots, **context)
    # a big log folder or checkpoint tree takes a while: at a terminal, say so after a few seconds
    with step(f"running {name.replace('_', ' ')}", after=3, terminal_only=True):
        result = REGISTRY.call(name, arguments, ctx, catch_bugs=False, use_cache=False)  # one call per process
    result.unwrap()  # a user error: one line, exit 2
    return result


def tool_context(roots: list[Any], **context: Any) -> Any:
    """The :class:`~rlmedic.tools.registry.ToolContext` for the paths the user typed (``None`` entries left out)."""
    from rlmedic.tools.registry import ToolContext

    return ToolContext.for_roots([str(r) for r in roots if r is not None], **context)


def print_json(data: Any) -> None:
    """Machine output: one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
