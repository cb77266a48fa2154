"""``rlmedic lint-config`` and ``fix-config``: check an AReaL YAML or slime launch script, and correct it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from rlmedic.ui.params import path as path_param


def register(app: typer.Typer) -> None:
    app.command("lint-config", short_help="Check an AReaL or slime config; changes nothing.")(lint_config)
    app.command("fix-config", short_help="Propose a corrected config, each change cited.")(fix_config)


SNAPSHOT_HELP = "A GPU snapshot (rlmedic gpu --save F) for the hardware checks: attention backend, GPU count, colocation memory."
SPOT_HELP = "The run uses spot/preemptible machines: recovery settings become errors."


def lint_config(
    config: Path = typer.Argument(..., metavar="CONFIG", parser=path_param, help="AReaL YAML config, or slime run script / argument file."),
    snapshot: Optional[Path] = typer.Option(None, "--snapshot", parser=path_param, help=SNAPSHOT_HELP),
    spot: bool = typer.Option(False, "--spot", help=SPOT_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check a config against AReaL's schema or slime's flags, and the config rules; changes nothing. Exit 1 when errors are found."""
    from rlmedic.ui.clikit import print_json, run_tool

    result = run_tool("lint_config", {"config": str(config), "snapshot": str(snapshot) if snapshot else None, "spot": spot},
                      roots=[config, snapshot])
    if json_out:
        print_json(result.to_dict())
    else:
        typer.echo(render_problems(str(config), result.framework, result.problems))
    if not result.valid:
        raise typer.Exit(1)


def fix_config(
    config: Path = typer.Argument(..., metavar="CONFIG", parser=path_param, help="AReaL YAML config, or slime run script / argument file (never modified)."),
    log: Optional[list[Path]] = typer.Option(None, "--log", parser=path_param, help="Training log(s): the failure phase picks the remedies."),
    snapshot: Optional[Path] = typer.Option(None, "--snapshot", parser=path_param, help=SNAPSHOT_HELP),
    output: Optional[Path] = typer.Option(None, "-o", "--output", parser=path_param, help="Write the corrected config here (a new file). Default: print it."),
    spot: bool = typer.Option(False, "--spot", help=SPOT_HELP),
    fileroot: str = typer.Option("", "--fileroot", help="Persistent path to move a relative or /tmp fileroot/--save to (default /workspace/outputs)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing -o file (never the input)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Produce the corrected config: each change with old and new value, reason and citation, plus a unified diff.
    Exit 1 when errors remain that need editing by hand."""
    from rlmedic.tools.config.fix import write_corrected
    from rlmedic.ui.clikit import print_json, run_tool, tool_context

    logs = [str(p) for p in log or []]
    ctx = tool_context([config, snapshot, *logs])
    result = run_tool("fix_config", {"config": str(config), "logs": logs, "snapshot": str(snapshot) if snapshot else None,
                                     "spot": spot, "fileroot": fileroot}, roots=[], ctx=ctx)
    if output is not None:  # the front door writes; the file keeps the user's own values, never replaces an input
        result.output = str(write_corrected(config, output, result.changes, confinement=ctx.confinement, force=force))
    if json_out:
        print_json(result.to_dict())
    else:
        typer.echo(render_fix(result), err=output is None)
        if output is None:
            typer.echo(result.text, nl=False)  # redacted by the registry: secrets stay out of terminals and pipes
    if not result.fixed_valid:
        raise typer.Exit(1)  # errors remain after the fixes ("still to look at"): like lint-config


def _cite(c: Any) -> str:
    return f" [{c}]" if c else ""


def render_problems(path: str, framework: str, problems: list[Any]) -> str:
    if not problems:
        return f"{path} ({framework}): no problems found"
    counts: dict[str, int] = {}
    for p in problems:
        counts[p.severity] = counts.get(p.severity, 0) + 1
    lines = [f"{path} ({framework}): " + ", ".join(f"{n} {sev}" for sev, n in counts.items())]
    for p in problems:
        where = f":{p.line}" if p.line else ""
        fix = "  (fixable)" if p.fixable else ""
        lines.append(f"  {p.severity:<7} {path}{where} {p.message}{fix}")
        if p.citation:
            lines.append(f"          see {p.citation}")
    return "\n".join(lines)  # the registry redacted the problems


def render_fix(result: Any) -> str:
    lines = []
    if result.phases:
        lines.append(f"failure phase(s) from the log: {', '.join(result.phases)}")
    left = [p for p in result.remaining if p.severity in ("critical", "error", "warning")]
    if not result.changes:
        if left:
            lines.append(f"{result.path}: no automatic fix for the problems below")
        elif result.actions:
            lines.append(f"{result.path}: no automatic change; to do by hand:")
        else:
            lines.append(f"{result.path}: no change needed")
    else:
        lines.append(f"{len(result.changes)} change(s) to {result.path}:")
        for i, c in enumerate(result.changes, 1):
            what = {"delete": f"remove {c.key} (was {c.old!r})", "rename": f"rename {c.key} -> {c.new}",
                    "remove_flag": f"remove {c.key}", "remove_value": f"drop the value given to the switch {c.key}",
                    "add_flag": f"add {c.key}" + ("" if c.new is True else f" {c.new}")}.get(
                c.op, f"{c.key}: {'(not set)' if c.old is None else repr(c.old)} -> {c.new!r}")
            lines.append(f"  {i}. {what}")
            lines.append(f"     why: {c.reason}")
            if c.citation:
                lines.append(f"     see: {c.citation}")
    for a in result.actions:
        lines.append(f"  do: {a.reason}{_cite(a.citation)}")
    if result.alternatives:
        lines.append("if that is not enough, next in order:")
        for c in result.alternatives:
            lines.append(f"  - {c.key}: {c.old!r} -> {c.new!r} ({c.reason}){_cite(c.citation)}")
    if left:
        lines.append("still to look at:")
        for p in left:
            lines.append(f"  {p.severity}: {p.message}{_cite(p.citation)}")
    if result.diff:
        lines.append("")
        lines.append(result.diff.rstrip("\n"))
    if result.output:
        lines.append(f"\nwrote {result.output} (the input is unchanged)")
    return "\n".join(lines)  # the registry redacted values, reasons and the diff
