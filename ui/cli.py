"""The ``rlmedic`` command line: a thin front door over ``tools/`` and ``agent/``.

Each group of commands lives in its own ``cli_*.py`` module with a ``register(app)``
function that adds its commands and their one-sentence summaries; this module only
assembles them (one way: they never import it back; what they share is in
:mod:`rlmedic.ui.clikit`). Nothing heavy is imported at module level: ``rlmedic --help``
must start fast.
"""

from __future__ import annotations

import copy
import re
import sys
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:  # typer carries its own click (typer._click); the separate click package is not imported
    from typer._click import Context, HelpFormatter

from rlmedic.errors import UserError
from rlmedic.ui import (cli_agent, cli_chat, cli_checkpoints, cli_code, cli_config, cli_env, cli_gpu, cli_issues,
                        cli_knowledge, cli_logs, cli_mcp, cli_slack, cli_tools, cli_watch)


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
        """``[OPTIONS] [PATH]...``: braces dropped, and an argument of many values ends in ``...`` even when
        it names its metavar (click then prints the metavar alone)."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            for piece in param.get_usage_pieces(ctx):
                piece = re.sub(r"\{([^}]*)\}", r"\1", piece)
                if param.param_type_name == "argument" and param.nargs != 1 and not piece.endswith("..."):
                    piece += "..."
                pieces.append(piece)
        return pieces

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


#: The command modules, each with ``register(app)`` adding its commands (with their one-sentence
#: summaries). They never import this module back (they share :mod:`rlmedic.ui.clikit`).
COMMAND_MODULES = (cli_logs, cli_knowledge, cli_issues, cli_code, cli_gpu, cli_checkpoints, cli_config, cli_mcp,
                   cli_chat, cli_agent, cli_slack, cli_watch, cli_env, cli_tools)


def _assemble() -> None:
    """Every module's commands into :data:`app`, each with the help formatting of :class:`_Command`."""
    for module in COMMAND_MODULES:
        module.register(app)
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand) or type(info.cls).__name__ == "DefaultPlaceholder":
            info.cls = _Command


_assemble()


def app_for(argv: list[str]) -> typer.Typer:
    """The app to run for ``argv``: when its first word names a command, an app holding that command
    alone. Typer builds the parameters of every registered command before it runs one (~30 ms of each
    cold command for the twenty of ours); anything else (``--help``, ``--version``, a misspelt
    command, which gets its "did you mean") runs the whole app."""
    first = argv[0] if argv else ""
    if first.startswith("-"):
        return app
    from typer.main import get_command_name  # how typer names a command registered without a name

    named = [info for info in app.registered_commands
             if (info.name or get_command_name(info.callback.__name__ if info.callback else "")) == first]
    if len(named) != 1:
        return app
    one = copy.copy(app)
    one.registered_commands = named
    return one


def main() -> None:  # console-script entry point
    # A file name that is not UTF-8 (a surrogate escape in Python) must not kill the output:
    # it is written as a \udcXX escape, which is also a valid escape inside a JSON string.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    app_for(sys.argv[1:])()


if __name__ == "__main__":  # pragma: no cover
    main()
