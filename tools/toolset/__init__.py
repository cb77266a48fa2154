"""The built-in tools, each with one home: what the CLI, the agent, MCP, the web app and Slack call.

Every module here holds one subject's tools (``logs``, ``gpu``, ``checkpoints``, ``config``,
``knowledge``, ``upstream``, ...), and each tool there is everything the front doors need
of it, named once at registration with ``@tool``: the typed function (its docstring is
what a model reads, its parameters the JSON schema), ``render`` (the text a model sees),
``step`` (the one line web, Slack and chat show for the call), ``reads`` (the attachment
kinds it takes: the agent runs it on attached files by itself) and ``evidence`` (its result
as :class:`~rlmedic.types.Evidence`, what answers are composed from). Tools read only
through ``ctx.confinement``, never write, and return a result object;
:mod:`rlmedic.tools.registry` validates the arguments and redacts the result.

Add a tool: one module here (plus its test). Nothing else to wire: this package imports
every module in its folder (a name starting with ``_`` is a helper, not a tool), so the CLI
(``rlmedic tools``), the agent, ``rlmedic mcp``, the web app and Slack pick it up from the
registry.
"""

from __future__ import annotations


def _import_every_tool_module() -> None:
    """Import each module of this package, in name order: their ``@tool`` decorators register them.

    The one import by name in the package, and only of its own children (same folder, same
    layer): ``tests/test_layers.py`` reads those files and counts these edges."""
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_import_every_tool_module()
