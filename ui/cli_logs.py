"""``rlmedic diagnose`` and ``rlmedic excerpt``: log diagnosis from the terminal.

Rendering only: the work happens in :mod:`rlmedic.tools.logs.diagnose`. The human report puts
the root cause first (with its line), then the cascades grouped under it, then the fix;
``--json`` prints the :meth:`Diagnosis.to_dict` contract.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from rlmedic.ui.cli_code import ENV_HELP, SOURCE_HELP
from rlmedic.tools.cluster.options import JOB_HELP, RAY_ADDRESS_HELP, SINCE_HELP, check_options
from rlmedic.ui.params import path as path_param

if TYPE_CHECKING:
    from rlmedic.tools.logs.diagnosis import Diagnosis
    from rlmedic.tools.logs.scan import Source
    from rlmedic.types import Finding

_SEV_STYLE = {
    "critical": {"fg": "white", "bg": "red", "bold": True},
    "error": {"fg": "red", "bold": True},
    "warning": {"fg": "yellow"},
    "info": {"fg": "cyan"},
}
MAX_FIXES = 4
MAX_OTHERS = 8


class FailOn(str, Enum):
    warning = "warning"
    error = "error"
    critical = "critical"


def _sev(severity: str) -> str:
    return typer.style(f"[{severity}]", **_SEV_STYLE.get(severity, {}))  # type: ignore[arg-type]


def _where(f: Finding) -> str:
    return f"{f.file}:{f.line}" if f.line else f.file


def _excerpt(f: Finding, indent: str = "    ") -> list[str]:
    text = str(f.evidence.get("excerpt") or "")
    out = []
    for row in text.splitlines():
        if row.startswith(">"):
            out.append(indent + typer.style(row, bold=True))
        else:
            out.append(indent + typer.style(row, dim=True))
    return out


def _numbers(f: Finding) -> str:
    nums = f.evidence.get("numbers") or {}
    keep = {k: v for k, v in nums.items() if k not in ("pid", "process_pid", "tp_rank")}
    return "  ".join(f"{k}={v}" for k, v in keep.items())


def render(diagnosis: Diagnosis, *, verbose: bool = False) -> str:
    """The short coloured report: root cause, cascades, fix, then other findings."""
    stats = diagnosis.stats
    lines: list[str] = []
    mb = (stats.get("bytes") or 0) / 1e6
    head = f"rlmedic diagnose: {stats.get('files', 0)} file(s), {mb:.1f} MB, {stats.get('lines', 0)} lines in {stats.get('seconds', 0)} s"
    runs = stats.get("runs") or []
    if runs:  # W&B / TensorBoard runs, metric dumps: their curves, not lines
        head = (f"rlmedic diagnose: {len(runs)} run(s), {sum(int(r.get('points') or 0) for r in runs):,} points"
                + (f", {stats.get('lines', 0)} console log lines" if stats.get("lines") else "")
                + f" in {stats.get('seconds', 0)} s")
    if stats.get("last_step") is not None:
        head += f"; last training step {stats['last_step']}"
    lines.append(typer.style(head, dim=True))
    if stats.get("truncated"):
        lines.append(typer.style("  scan stopped at the byte cap (RLMEDIC_MAX_SCAN_BYTES); later lines were not read", fg="yellow"))
    for p in stats.get("partial") or []:
        lines.append(typer.style(f"  read only in part {p['file']}: {p['reason']}", fg="yellow"))
    for s in stats.get("skipped") or []:
        if verbose or s.get("reason") != "not a log file name":
            lines.append(typer.style(f"  skipped {s['file']}: {s['reason']}", dim=True))
    root = diagnosis.root_finding
    if root is None:
        serious = [f for f in diagnosis.findings if f.severity in ("critical", "error")]
        empty = next((f for f in diagnosis.findings if f.id == "empty-log"), None)
        if empty is not None:
            lines.append(_sev(empty.severity) + " " + typer.style(empty.summary, bold=True))
            return "\n".join(lines)
        if not serious:
            lines.append(typer.style("No error found.", fg="green", bold=True) + " Nothing in the log points at a failure.")
            health = diagnosis.stats.get("health") or {}
            if health.get("checked"):
                lines.append(typer.style(f"Checked ({health.get('verdict')}): " + "; ".join(health["checked"]), dim=True))
    else:
        lines.append("")
        lines.append(typer.style("ROOT CAUSE ", bold=True) + _sev(root.severity) + " " + typer.style(root.summary, bold=True))
        lines.append(f"  at {typer.style(_where(root), underline=True)}" + (f"  ({root.id}, {root.category})"))
        lines += _excerpt(root)
        nums = _numbers(root)
        if nums:
            lines.append(typer.style(f"    numbers: {nums}", dim=True))
        cascades = [f for f in diagnosis.findings if f.root == diagnosis.root and f is not root]
        if cascades:
            lines.append("")
            lines.append(typer.style("  Caused by the root (cascades, not separate problems):", bold=True))
            for f in cascades:
                lines.append(f"    - {_sev(f.severity)} {f.summary.split('. ')[0]}  {typer.style(_where(f), dim=True)}")
        if root.fixes:
            lines.append("")
            card = f" (card {root.card})" if root.card else ""
            lines.append(typer.style(f"  Fix, most effective first{card}:", bold=True, fg="green"))
            shown = root.fixes if verbose else root.fixes[:MAX_FIXES]
            for i, fix in enumerate(shown, 1):
                lines.append(f"    {i}. {fix}")
            if len(root.fixes) > len(shown):
                lines.append(typer.style(f"    ... {len(root.fixes) - len(shown)} more with --verbose or --json", dim=True))
        if root.citations:
            lines.append(typer.style("  Sources: " + "; ".join(str(c) for c in root.citations), dim=True))
    others = [f for f in diagnosis.findings if f is not root and f.root is None]
    if others:
        lines.append("")
        lines.append(typer.style("Other findings:", bold=True))
        shown_others = others if verbose else others[:MAX_OTHERS]
        for f in shown_others:
            lines.append(f"  {_sev(f.severity)} {f.summary}")
            lines.append(typer.style(f"      at {_where(f)}" + (f"; fix: {f.fixes[0]}" if f.fixes else ""), dim=True))
        if len(others) > len(shown_others):
            lines.append(typer.style(f"  ... {len(others) - len(shown_others)} more with --verbose", dim=True))
    return "\n".join(lines)


def split_streams(paths: list[Path]) -> tuple[list[str], list[Source]]:
    """The paths the user typed, less ``-`` (stdin) and pipes (``/dev/stdin``, ``<(...)``), which
    are opened here as streams: the user named them in their own shell, and the tools (which a
    model may call too) only read regular files through the confinement."""
    from rlmedic.errors import UserError
    from rlmedic.tools.logs.scan import STDIN, stream_source

    names = [str(p) for p in paths]
    if names.count(STDIN) > 1:
        raise UserError("-: standard input can be read only once; name it once")
    files: list[str] = []
    streams: list[Source] = []
    for name in names:
        src = stream_source(name)
        if src is None:
            files.append(name)
        else:
            streams.append(src)
    return files, streams


def _run(tool: str, paths: list[Path], *, shown: dict[Path, str] | None = None, **arguments: Any) -> Any:
    """Run the registry tool on the paths; stdin and pipes among them travel as streams the
    front door vouches for (``ToolContext.streams``), so they pass the same single redaction.
    ``shown`` names folders this command made (``Confinement.names``)."""
    from rlmedic.ui.clikit import run_tool, tool_context

    files, streams = split_streams(paths)
    ctx = tool_context(files)
    ctx.streams = {src.name: src for src in streams}
    for folder, name in (shown or {}).items():
        ctx.confinement.names[folder.resolve()] = name
    return run_tool(tool, {"paths": [*files, *ctx.streams], **arguments}, roots=files, ctx=ctx)


def register(app: typer.Typer) -> None:
    @app.command("diagnose", short_help="Find the root cause in training logs, with its fix.")
    def diagnose_cmd(
        paths: Optional[list[Path]] = typer.Argument(
            None, metavar="PATH", parser=path_param,
            help="Log files or directories of per-rank logs (gzip is fine), W&B run or wandb/ folders, TensorBoard log folders, JSONL/CSV metric dumps; - reads stdin.",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
        fail_on: FailOn = typer.Option(None, "--fail-on", help="Exit 1 when a finding of this severity (or worse) exists (an empty log is a warning)."),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every fix and finding."),
        all_runs: bool = typer.Option(False, "--all", help="A wandb/ or TensorBoard folder: every run in it, not only the newest."),
        env_file: Optional[Path] = typer.Option(None, "--env", metavar="FILE", help=ENV_HELP),
        source: Optional[Path] = typer.Option(None, "--source", metavar="PATH", help=SOURCE_HELP),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", help=RAY_ADDRESS_HELP),
        job: Optional[str] = typer.Option(None, "--job", metavar="ID", help=JOB_HELP),
        since: Optional[float] = typer.Option(None, "--since", metavar="MINUTES", help=SINCE_HELP),
    ) -> None:
        """Find the root cause in AReaL / slime training logs, with its line and the fix."""
        from rlmedic.errors import UserError
        from rlmedic.types import severity_rank
        from rlmedic.ui.clikit import print_json
        from rlmedic.ui.cli_code import code_for_diagnosis, env_versions, upstream_for_diagnosis

        env = env_versions(env_file)
        paths = list(paths or [])
        shown: dict[Path, str] = {}
        synced = None
        check_options(ray_address, job, since)
        if ray_address is not None:  # the job's logs on every node, as one more folder to diagnose
            from rlmedic.tools.cluster.frontdoor import cli_sync  # lazy: the HTTP client costs ~0.2 s to import

            synced = cli_sync(ray_address, job=job, since_minutes=since)
            paths.append(synced.folder)
            shown = {synced.folder: "ray"}  # its files show as ray/node-<ip>-<id>__<actor>... (the folder goes at exit)
        elif not paths:
            raise UserError("give a log PATH (or - for stdin) or --ray-address ADDR")
        if all_runs:
            from rlmedic.tools.runs.locate import every_run

            paths = [run for p in paths for run in every_run(p)]
        diagnosis = _run("diagnose", paths, shown=shown)
        upstream = upstream_for_diagnosis(diagnosis, env)
        code = code_for_diagnosis(diagnosis, source)
        if as_json:
            data = diagnosis.to_dict()
            if synced is not None:  # what was read from the cluster (the folder itself is gone after the command)
                data["cluster"] = {k: v for k, v in synced.to_dict().items() if k != "folder"}
            print_json(data)
        else:
            typer.echo(render(diagnosis, verbose=verbose))
            if upstream:
                typer.echo("\n".join(["", *upstream]))
            if code:
                typer.echo("\n".join(["", *code]))
        if fail_on is not None:
            worst = diagnosis.worst_severity()
            if worst is not None and severity_rank(worst) <= severity_rank(fail_on.value):
                raise typer.Exit(1)

    @app.command("excerpt", short_help="Print the most telling lines of a log, redacted.")
    def excerpt_cmd(
        paths: list[Path] = typer.Argument(..., metavar="PATH", parser=path_param, help="Log files or directories; - reads stdin."),
        max_lines: int = typer.Option(120, "--max-lines", min=10, help="Line budget of the excerpt."),
    ) -> None:
        """Print the most relevant lines of a log (around the root error, repeats collapsed), redacted."""
        typer.echo(_run("excerpt", paths, max_lines=max_lines))
