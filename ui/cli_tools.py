"""``rlmedic tools``: every read-only tool from the command line, listed, or run by name.

The list is what the agent and MCP clients are offered (name, one-line summary, the kinds
of attached file the agent runs it on). ``rlmedic tools NAME KEY=VALUE...`` runs one: a
tool with no command of its own (a new one) is usable from the shell the moment it exists.
As with every command, the files it may read are the paths typed (plus
``RLMEDIC_ALLOWED_ROOTS``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from rlmedic.ui.params import path as path_param

ARGUMENTS_HELP = ("The tool's arguments as KEY=VALUE (see `rlmedic tools NAME --describe`); repeat a key for a list; "
                  "a value that starts with { or [ is read as JSON.")


def register(app: typer.Typer) -> None:
    app.command("tools", short_help="List the read-only tools, or run one by name.")(tools)


def tools(
    name: Optional[str] = typer.Argument(None, metavar="NAME", help="The tool to run; without it, the list."),
    arguments: Optional[list[str]] = typer.Argument(None, metavar="KEY=VALUE", help=ARGUMENTS_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the list, or the tool's result, as JSON."),
    describe: bool = typer.Option(False, "--describe", help="Print the tool's description and arguments."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", parser=path_param,
                                             help="The index the knowledge tools search (default: the data dir's)."),
) -> None:
    """List the read-only tools the agent, MCP clients and this command share, or run one by name
    (rlmedic tools excerpt paths=train.log)."""
    from rlmedic.errors import UserError
    from rlmedic.tools.registry import REGISTRY
    from rlmedic.ui.cli_knowledge import existing_index_dir
    from rlmedic.ui.clikit import call_tool, print_json

    if name is None:
        listing = [{"name": t.name, "summary": t.summary, "reads": {p: list(k) for p, k in t.reads.items()}}
                   for t in REGISTRY.tools()]
        if as_json:
            print_json(listing)
            return
        width = max(len(t["name"]) for t in listing)
        for t in listing:
            kinds = next(iter(t["reads"].values()), [])  # what the agent calls it for (the rest is context)
            typer.echo(f"{t['name']:<{width}}  {t['summary']}" + (f" (runs on attached: {', '.join(kinds)})" if kinds else ""))
        return
    entry = REGISTRY.get(name)
    if entry is None:
        raise UserError(f"no tool {name!r}; the tools are: {', '.join(t.name for t in REGISTRY.tools())}")
    if describe:
        typer.echo(entry.description + "\n")
        for param, spec in entry.schema.get("properties", {}).items():
            many = " (repeat for more)" if entry.takes_many(param) else ""
            required = " (required)" if param in entry.schema.get("required", []) else ""
            typer.echo(f"  {param}={spec.get('type') or 'VALUE'}{required}{many}: {spec.get('description', '')}")
        return
    parsed = parse_arguments(entry, arguments or [])
    roots = [v for v in _strings(parsed) if "\x00" not in v and os.path.lexists(v)]  # the paths typed: all it may read
    result = call_tool(name, parsed, roots, index_dir=existing_index_dir(index_dir), max_text_chars=0)
    if as_json:
        print_json(result.data)
    else:
        typer.echo(result.text)


def parse_arguments(entry: Any, items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items as the tool's arguments: a list parameter collects every value of its key."""
    import json

    from rlmedic.errors import UserError

    fields = entry.fields
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in fields:
            raise UserError(f"{item!r}: expected KEY=VALUE with KEY one of: {', '.join(fields)}")
        parsed: Any = value
        if value[:1] in ("{", "["):
            try:
                parsed = json.loads(value)
            except ValueError as exc:
                raise UserError(f"{key}: {value[:60]!r} is not valid JSON ({exc})") from None
        if entry.takes_many(key):
            out.setdefault(key, []).extend(parsed if isinstance(parsed, list) else [parsed])
        elif key in out:
            raise UserError(f"{key} is given twice; it takes one value")
        else:
            out[key] = parsed
    return out


def _strings(arguments: dict[str, Any]) -> list[str]:
    return [v for value in arguments.values() for v in (value if isinstance(value, list) else [value])
            if isinstance(v, str) and v]
