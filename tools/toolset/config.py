"""The config tools: ``lint_config`` (what is wrong) and ``fix_config`` (the corrected config and its diff)."""

from __future__ import annotations

from typing import Annotated, Any

from rlmedic.tools.registry import Param, ToolContext, tool
from rlmedic.tools.toolset._common import add_citations, cite, serious_findings
from rlmedic.types import Citation, Evidence, severity_rank


def _problem_line(p: Any) -> str:
    where = f":{p.line}" if getattr(p, "line", None) else ""
    message = getattr(p, "message", None) or getattr(p, "summary", "")
    return f"{p.severity}{where} {p.key}: {message}" + cite(getattr(p, "citation", None))


def _render_lint(result: Any) -> str:
    if not result.problems:
        return f"{result.path} ({result.framework}): no problems found"
    return "\n".join([f"{result.path} ({result.framework}): {len(result.problems)} problem(s)"]
                     + [_problem_line(p) for p in result.problems[:15]])


def _load_snapshot(ctx: ToolContext, snapshot: str | None) -> Any:
    if not snapshot:
        return None
    from rlmedic.tools.gpu.snapshot import load_snapshot

    return load_snapshot(snapshot, confinement=ctx.confinement)


Snapshot = Annotated[str | None, Param(description="A GPU snapshot (rlmedic gpu --save) for the hardware checks.")]
Spot = Annotated[bool, Param(description="The run uses spot/preemptible machines: recovery settings become errors.")]


def lint_evidence(result: Any) -> Evidence:
    fixes = [fix for p in result.problems for fix in p.fixes]
    citations: list[Citation] = []
    for p in result.problems:
        add_citations(citations, p.citations)
    problems = sorted(result.problems, key=lambda p: severity_rank(p.severity))
    return Evidence(subject="config", findings=problems, root=0 if serious_findings(problems[:1]) else None,
                    fixes=fixes, citations=citations,
                    frameworks=[result.framework] if result.framework in ("areal", "slime") else [],
                    checked=f"the config {result.path} ({result.framework})", healthy=not result.problems)


def _step_config(data: Any) -> str:
    """``2 change(s), 3 problem(s)`` (fix_config) or ``3 problem(s)`` (lint_config)."""
    if not isinstance(data, dict):
        return ""
    changes = data.get("changes")
    problems = data.get("problems") or []
    return f"{len(changes)} change(s), {len(problems)} problem(s)" if changes is not None else f"{len(problems)} problem(s)"


@tool(render=_render_lint, evidence=lint_evidence, step=_step_config, use="to check a config without logs")
def lint_config(ctx: ToolContext,
                config: Annotated[str, Param(description="An AReaL YAML config, or a slime launch script / argument file.")],
                snapshot: Snapshot = None, spot: Spot = False) -> Any:
    """Check an AReaL YAML config or slime launch script: schema, "did you mean", constraint rules. Changes nothing."""
    from rlmedic.tools.config.fix import lint_config as run

    return run(config, snapshot=_load_snapshot(ctx, snapshot), spot=spot, confinement=ctx.confinement)


def _render_fix(result: Any) -> str:
    lines = []
    if result.phases:
        lines.append(f"failure phase(s) from the logs: {', '.join(result.phases)}")
    lines.append(f"{len(result.changes)} change(s) to {result.path}" if result.changes else f"{result.path}: no automatic change")
    for c in result.changes:
        reason = getattr(c, "reason", None) or getattr(c, "why", "")
        lines.append(f"- {c.key}: {c.old!r} -> {c.new!r} ({reason}){cite(getattr(c, 'citation', None))}")
    for a in result.actions:
        lines.append(f"- do: {getattr(a, 'reason', None) or getattr(a, 'why', '')}")
    left = [p for p in result.remaining if p.severity in ("critical", "error", "warning")]
    lines += ["still: " + _problem_line(p) for p in left[:8]]
    if result.diff:
        lines.append(result.diff.rstrip("\n"))
    return "\n".join(lines)


def fix_evidence(result: Any) -> Evidence:
    """A config: its problems, the exact edits (changes first, then actions), the diff."""
    fixes = list(result.changes) + list(result.actions)
    citations: list[Citation] = []
    for fix in fixes:
        add_citations(citations, fix.citations)
    for p in result.problems:
        add_citations(citations, p.citations)
    problems = sorted(result.problems, key=lambda p: severity_rank(p.severity))  # errors first: the worst leads
    return Evidence(
        subject="config", findings=problems, root=0 if serious_findings(problems[:1]) else None,
        fixes=fixes, diff=result.diff or "", citations=citations,
        frameworks=[result.framework] if result.framework in ("areal", "slime") else [],
        facts=[f"still to edit by hand: {p.key}: {p.summary}" for p in result.remaining
               if severity_rank(p.severity) <= severity_rank("warning")][:4],
        checked=f"the config {result.path} ({result.framework})",
        healthy=not result.changes and not serious_findings(list(result.problems)),
        settings=dict(getattr(result, "settings", None) or {}),
    )


@tool(render=_render_fix, evidence=fix_evidence, step=_step_config,
      reads={"config": ("config", "script"), "logs": "log", "snapshot": "snapshot"},
      use="for configs and launch scripts (the corrected config, with the logs when there are some)")
def fix_config(
    ctx: ToolContext,
    config: Annotated[str, Param(description="An AReaL YAML config, or a slime launch script / argument file.")],
    logs: Annotated[list[str], Param(description="Training logs: the failure phase picks the remedies.")] = [],  # noqa: B006
    snapshot: Snapshot = None,
    spot: Spot = False,
    fileroot: Annotated[str, Param(description="Persistent path for a relative or /tmp fileroot/--save.")] = "",
) -> Any:
    """The corrected config: the smallest set of changes, each with old and new value, reason and citation, and a diff.

    Uses the logs' failure phase (OOM in generation, training or weight update...) and
    the GPU snapshot to pick remedies. Returns the corrected text; it never writes a file.
    """
    from rlmedic.tools.config.fix import fix_config as run

    return run(config, log_paths=logs, snapshot=_load_snapshot(ctx, snapshot), spot=spot, fileroot=fileroot,
               confinement=ctx.confinement)
