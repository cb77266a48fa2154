"""The ``rlmedic`` command line: a thin front door over ``tools/`` and ``agent/``.

Each group of commands lives in its own ``cli_*.py`` module with a ``register(app)``
function, so the modules stay small. Nothing heavy is imported at module level:
``rlmedic --help`` must start fast.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:  # typer carries its own click (typer._click); the separate click package is not imported
    from typer._click import Context, HelpFormatter

from rlmedic.errors import UserError


class _Group(TyperGroup):
    """Turn :class:`UserError` into one line on stderr and exit code 2."""

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as exc:
            typer.echo(f"rlmedic: error: {exc}", err=True)
            sys.exit(2)


_TYPE_LABEL = re.compile(r" <[^>]*>(\.\.\.)?$")


class _Command(TyperCommand):
    """Help in plain words: ``PATH...`` rather than ``{PATH}...``, and an option's value named
    by the option (``--index-dir DIR``) rather than a Python type (``<list[Path]>``)."""

    def invoke(self, ctx: Context) -> Any:
        from rlmedic.memory import resume_gc

        resume_gc()  # start-up (imports, argument parsing) is over: the command's own work begins
        return super().invoke(ctx)

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        return [re.sub(r"\{([^}]*)\}", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        args, opts = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            name, help_text = record
            if param.param_type_name == "argument":
                name = _TYPE_LABEL.sub("", name)
                if param.nargs != 1 and not name.endswith("..."):
                    name += "..."
                args.append((name, help_text))
            else:
                if not getattr(param, "is_flag", False) and _TYPE_LABEL.search(name):
                    value = getattr(param, "metavar", None) or _METAVARS.get(param.name or "", (param.name or "value").upper())
                    name = _TYPE_LABEL.sub(f" {value}", name)
                opts.append((name, help_text))
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        if opts:
            with formatter.section("Options"):
                formatter.write_dl(opts)


#: How an option's value is named in help (default: the option's name in capitals).
_METAVARS = {"index_dir": "DIR", "snapshot": "FILE", "save": "FILE", "output": "FILE", "config": "FILE", "log": "FILE",
             "max_lines": "N", "k": "N", "before_step": "STEP", "port": "PORT", "host": "HOST", "fileroot": "PATH",
             "kind": "doc|card|issue|known|commit", "fail_on": "warning|error|critical", "experiment_name": "NAME", "trial_name": "NAME"}


app = typer.Typer(
    cls=_Group,
    name="rlmedic",
    help="Troubleshoot RL training runs of LLMs (AReaL, slime): diagnose logs, search cited docs, check configs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from rlmedic import __version__

        typer.echo(f"rlmedic {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """rlmedic: the troubleshooting agent for RL training of LLMs."""


def run_tool(name: str, arguments: dict[str, Any], roots: list[Any], *, ctx: Any = None, **context: Any) -> Any:
    """Run a registry tool for the CLI: the roots are the paths the user typed (plus
    ``RLMEDIC_ALLOWED_ROOTS``); a user error becomes one line and exit 2, a bug keeps its
    traceback. Returns the tool's (redacted) result object. Pass ``ctx`` (from
    :func:`tool_context`) to keep it: its confinement knows every file the tool read, which
    an output (``-o``, ``--save``) must never replace."""
    from rlmedic.notices import step
    from rlmedic.registry import REGISTRY

    ctx = ctx or tool_context(roots, **context)
    # a big log folder or checkpoint tree takes a while: at a terminal, say so after a few seconds
    with step(f"running {name.replace('_', ' ')}", after=3, terminal_only=True):
        result = REGISTRY.call(name, arguments, ctx, catch_bugs=False, use_cache=False)  # one call per process
    return result.unwrap()


def tool_context(roots: list[Any], **context: Any) -> Any:
    """The :class:`~rlmedic.registry.ToolContext` for the paths the user typed (``None`` entries left out)."""
    from rlmedic.registry import ToolContext

    return ToolContext.for_roots([str(r) for r in roots if r is not None], **context)


def print_json(data: Any) -> None:
    """Machine output: one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


#: Command modules, each with ``register(app)``. Add a module here to add commands.
COMMAND_MODULES = (
    "rlmedic.ui.cli_logs",
    "rlmedic.ui.cli_knowledge",
    "rlmedic.ui.cli_issues",
    "rlmedic.ui.cli_code",
    "rlmedic.ui.cli_gpu",
    "rlmedic.ui.cli_checkpoints",
    "rlmedic.ui.cli_config",
    "rlmedic.ui.cli_mcp",
    "rlmedic.ui.cli_chat",
    "rlmedic.ui.cli_agent",
    "rlmedic.ui.cli_slack",
    "rlmedic.ui.cli_watch",
    "rlmedic.ui.cli_env",
)


def _register_all() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand) or type(info.cls).__name__ == "DefaultPlaceholder":
            info.cls = _Command
        if not info.short_help:  # the summary in `rlmedic --help`: one whole sentence, never cut
            info.short_help = SUMMARIES.get(info.name or "")


#: One-sentence summaries for the command list (click cuts longer docstrings mid-sentence).
SUMMARIES = {
    "diagnose": "Find the root cause in training logs, with its fix.",
    "excerpt": "Print the most telling lines of a log, redacted.",
    "index": "Add your own documents to the knowledge base.",
    "search": "Search your docs, the playbook cards and issue threads.",
    "ask": "Ask a troubleshooting question; the answer cites sources.",
    "gpu": "Show GPU memory and processes; flag leftovers.",
    "checkpoints": "List and check checkpoints; print how to resume.",
    "lint-config": "Check an AReaL or slime config; changes nothing.",
    "fix-config": "Propose a corrected config, each change cited.",
    "mcp": "Serve the read-only tools over MCP.",
    "serve-model": "Start SGLang for a local model and print its URL.",
    "sync-issues": "Index closed upstream issues that record a fix.",
    "chat": "Chat about a failed run in the terminal.",
    "web": "Serve the chat as a local web page.",
    "eval": "Score the agent on a set of cases.",
    "env": "Print the versions that matter, to paste into an issue.",
}


_register_all()


def main() -> None:  # console-script entry point
    # A file name that is not UTF-8 (a surrogate escape in Python) must not kill the output:
    # it is written as a \udcXX escape, which is also a valid escape inside a JSON string.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
