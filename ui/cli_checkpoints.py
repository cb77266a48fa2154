"""``rlmedic checkpoints``: which checkpoints exist, are they intact, how to resume."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import typer

from rlmedic.ui.params import path as path_param


def register(app: typer.Typer) -> None:
    app.command("checkpoints", short_help="List and check checkpoints; print how to resume.")(checkpoints)


def checkpoints(
    root: Path = typer.Argument(..., metavar="ROOT", parser=path_param, help="A fileroot, its checkpoints/ dir (any level down to the trial), a slime --save dir, or HF save dirs."),
    experiment_name: Optional[str] = typer.Option(None, "--experiment-name", help="Only this AReaL experiment."),
    trial_name: Optional[str] = typer.Option(None, "--trial-name", help="Only this AReaL trial."),
    before_step: Optional[int] = typer.Option(None, "--before-step", min=0, help="Only checkpoints before this global step (e.g. where rewards collapsed)."),
    config: Optional[Path] = typer.Option(None, "--config", parser=path_param, help="The config you will resume with: the plan then lists what differs."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """List checkpoints with steps, times and sizes; check integrity; print the exact resume command.
    Exit 1 when none are found, or the newest (or an AReaL recover or Megatron one) is damaged."""
    from rlmedic.ui.clikit import print_json, run_tool

    report = run_tool("list_checkpoints", {"root": str(root), "experiment_name": experiment_name, "trial_name": trial_name,
                                           "before_step": before_step, "config": str(config) if config else None},
                      roots=[root, config])
    if json_out:
        print_json(report.to_dict())
    else:
        typer.echo(render(report))
    if any(issue.severity in ("critical", "error") for issue in report.issues):
        raise typer.Exit(1)  # nothing to resume from, or a damaged checkpoint: like lint errors


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _time(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "?"


def render(report: Any) -> str:
    lines = [f"{report.root}: {report.layout} layout, {report.total} checkpoint(s)"
             + (f", {len(report.selected())} before step {report.before_step}" if report.before_step is not None else "")]
    if report.tracker_iteration is not None:
        lines.append(f"  latest_checkpointed_iteration.txt: {report.tracker_iteration}")
    elif report.tracker_release:
        lines.append("  latest_checkpointed_iteration.txt: release (loads release/)")
    from rlmedic.tools.checkpoints.listing import LIST_LIMIT

    shown = report.selected()[-LIST_LIMIT:]
    if len(shown) < len(report.selected()) or report.omitted:
        lines.append(f"  ... older checkpoints not shown: the newest {len(shown)} follow")
    for c in shown:
        names = "/".join(x for x in (c.experiment, c.trial, c.role) if x)
        step = "?" if c.step is None else str(c.step)
        status = "ok" if c.valid else ("UNREAD" if c.unreadable else "DAMAGED" if c.checked else "unchecked")
        lines.append(f"  step {step:>7}  {c.kind:<13} {_time(c.mtime)}  {_size(c.size_bytes):>10}  {status:<7} {names}")
        lines.append(f"      {c.path}")
        for issue in c.issues:
            lines.append(f"      ! {issue}")
    others = [i for i in report.issues if i.id != "damaged-checkpoint"]
    if others:
        lines.append("")
        for i in others:
            lines.append(f"{i.severity}: {i.message}" + (f"  [{i.citation}]" if i.citation else ""))
    plan = report.plan
    if plan is not None and plan.mode == "none" and not report.checkpoints:
        plan = None  # "nothing to resume from" is what the error above already says
    if plan is not None:
        lines.append("")
        lines.append(f"Recovery plan ({plan.framework}, {plan.mode}):")
        if plan.command:
            lines.append(f"  {plan.command}")
        for note in plan.notes:
            lines.append(f"  - {note}")
        if plan.keep_unchanged:
            lines.append("  keep unchanged from the interrupted run: " + "; ".join(plan.keep_unchanged))
        for diff in plan.differences:
            lines.append(f"  DIFFERS: {diff}")
        if plan.citations:
            lines.append("  sources: " + "; ".join(str(c) for c in plan.citations))
    return "\n".join(lines)  # the registry redacted the report (the plan quotes config values)
