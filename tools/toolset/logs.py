"""The log tools: ``diagnose`` (the root cause of a failed run) and ``excerpt`` (the lines to read)."""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Any

from rlmedic.tools.registry import Param, ToolContext, tool
from rlmedic.tools.toolset._common import add_citations, serious_findings, upstream_fixes_of
from rlmedic.types import Citation, Evidence

Paths = Annotated[list[str], Param(min_length=1, description="Log files or folders of per-rank logs (gzip is fine).")]


def _first(items: list[Any], n: int) -> list[Any]:
    return list(items)[:n]


def _render_diagnosis(d: Any) -> str:
    stats = d.stats
    lines = [f"scanned {stats.get('files', 0)} file(s), {stats.get('lines', 0)} lines"
             + (f"; last training step {stats['last_step']}" if stats.get("last_step") is not None else "")]
    if stats.get("truncated"):
        lines.append("NOTE: the scan stopped at the byte cap; later lines were not read")
    root = d.root_finding
    if root is None:
        serious = [f for f in d.findings if f.severity in ("critical", "error")]
        lines.append("no error found" if not serious else "no single root cause; findings below")
    else:
        where = f"{root.file}:{root.line}" if root.line else root.file
        lines.append(f"ROOT CAUSE [{root.severity}] {root.id} ({root.category}) at {where}: {root.summary}")
        excerpt = str(root.evidence.get("excerpt") or "")
        if excerpt:
            lines.append("evidence:\n" + excerpt)
        for i, fix in enumerate(_first(root.fixes, 4), 1):
            lines.append(f"fix {i}: {fix}")
        if root.citations:
            lines.append("sources: " + "; ".join(str(c) for c in root.citations))
        cascades = [f for f in d.findings if f.root == d.root and f is not root]
        if cascades:
            lines.append(f"{len(cascades)} cascade finding(s) caused by the root, e.g. " +
                         "; ".join(f"{f.id} at {f.file}:{f.line}" for f in cascades[:3]))
    others = [f for f in d.findings if f is not root and f.root is None]
    for f in others[:6]:
        lines.append(f"other [{f.severity}] {f.id} ({f.category}) at {f.file}:{f.line}: {f.summary}"
                     + (f" | fix: {f.fixes[0]}" if f.fixes else ""))
    return "\n".join(lines)


def _catalog(zero_reward_steps: int | None) -> Any:
    """The shipped catalog, or a copy whose zero-reward streak needs ``zero_reward_steps`` steps."""
    if zero_reward_steps is None:
        return None
    import copy
    import dataclasses

    from rlmedic.tools.logs.signatures import builtin_catalog

    base = builtin_catalog()
    metrics = copy.deepcopy(base.metrics)
    metrics.setdefault("rules", {}).setdefault("zero_reward", {})["min_steps"] = int(zero_reward_steps)
    return dataclasses.replace(base, metrics=metrics)


def diagnosis_evidence(d: Any) -> Evidence:
    """Logs: the root finding first with its fixes and citations; healthy when nothing serious was found."""
    root = d.root_finding
    findings = ([root] if root is not None else []) + [f for f in d.findings if f is not root]
    stats = d.stats or {}
    citations: list[Citation] = []
    add_citations(citations, root.citations if root is not None else ())
    for fix in (root.fixes if root is not None else ()):
        add_citations(citations, fix.citations)
    parts = [f"{stats.get('files', 0)} log file(s), {stats.get('lines', 0)} lines"]
    if stats.get("last_step") is not None:
        parts.append(f"last training step {stats['last_step']}")
    if stats.get("clean_shutdown"):
        parts.append("a clean shutdown at the end")
    if stats.get("frameworks"):
        parts.append("written by " + ", ".join(stats["frameworks"]))
    facts = [f"{f.summary} ({f.file}:{f.line})" if f.line else f.summary
             for f in findings if f is not root and f.root is None and f.severity == "warning"][:4]
    serious = serious_findings(list(d.findings))
    health = stats.get("health") if isinstance(stats.get("health"), dict) else {}
    if health:  # the diagnosis's own verdict and what it rests on
        checked = "; ".join(str(c) for c in health.get("checked") or []) or "; ".join(parts)
        healthy = health.get("verdict") in ("finished", "healthy") and not serious
    else:
        checked = "; ".join(parts)
        healthy = not serious and bool(stats.get("lines")) and not stats.get("empty_files")
    return Evidence(
        subject="logs", findings=findings, root=0 if root is not None else None, fixes=list(root.fixes) if root is not None else [],
        citations=citations, facts=facts, frameworks=list(stats.get("frameworks") or []),
        checked=checked, healthy=healthy, verdict=str(health.get("verdict") or ""),
        versions={str(k): str(v) for k, v in (stats.get("versions") or {}).items()},
        upstream_fixes=upstream_fixes_of(stats.get("upstream_fixes")),
        metrics=_metric_summary(stats.get("metrics")),
    )


def _step_diagnosis(data: Any) -> str:
    """``root cause cuda-oom (oom_training) rank0.log:812``, or how many findings without one."""
    if not isinstance(data, dict):
        return ""
    root = data.get("root")
    findings = data.get("findings") or []
    if root is not None and root < len(findings):
        f = findings[root]
        where = f"{PurePath(str(f.get('file') or '')).name}:{f.get('line')}" if f.get("line") else ""
        return f"root cause {f.get('id')} ({f.get('category')}) {where}".strip()
    return f"{len(findings)} finding(s), no root cause"


@tool(render=_render_diagnosis, cache_paths="paths", evidence=diagnosis_evidence, step=_step_diagnosis,
      reads={"paths": "log"}, use="for logs (the root cause, with file:line)")
def diagnose(ctx: ToolContext, paths: Paths,
             zero_reward_steps: Annotated[int | None, Param(ge=1, le=100_000, description=(
                 "Steps in a row with zero reward that make the zero-reward streak (default: 10)."))] = None) -> Any:
    """Find the root cause of a failed AReaL/slime training run in its logs.

    Scans log files or folders of per-rank logs for failure signatures (CUDA OOM by phase,
    SGLang crashes, NCCL timeouts, NaN loss, zero rewards, recovery errors...) and metric
    trouble. Returns the root cause with its file:line and excerpt, the cascades it
    caused, the fixes (most effective first) and citations.
    """
    from rlmedic.tools.logs.diagnose import diagnose as run

    files, streams = ctx.split_streams(paths)
    d = run(files, confinement=ctx.confinement, streams=streams, catalog=_catalog(zero_reward_steps))
    _add_upstream(d, ctx)
    return d


def _add_upstream(d: Any, ctx: ToolContext) -> None:
    """The commits of a synced framework history (``rlmedic sync-code``) that match the root traceback,
    and the versions the logs show, into the diagnosis's stats (nothing without an index or a traceback)."""
    from rlmedic.tools.upstream import for_diagnosis

    fixes, versions = for_diagnosis(d, ctx.index_dir)
    if versions:
        d.stats["versions"] = versions
    if fixes:
        d.stats["upstream_fixes"] = [f.to_dict() for f in fixes]


@tool(use="for the log lines around the error, after `diagnose`")
def excerpt(ctx: ToolContext, paths: Paths,
            max_lines: Annotated[int, Param(ge=10, le=1000, description="Line budget of the excerpt.")] = 120) -> str:
    """The most relevant lines of training logs: around the root error, repeats collapsed, redacted.

    Use it to read the log itself after `diagnose` (what happened just before the error).
    """
    from rlmedic.tools.logs.excerpt import build_excerpt

    files, streams = ctx.split_streams(paths)
    return build_excerpt(files, max_lines=max_lines, confinement=ctx.confinement, streams=streams)


def _metric_summary(metrics: Any) -> dict[str, dict[str, Any]]:
    """The logs' metric series by concept: the longest series of each (its key and numbers)."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(metrics, dict):
        return out
    for concept, series in metrics.items():
        if not isinstance(series, dict):
            continue
        best = max(((k, v) for k, v in series.items() if isinstance(v, dict)),
                   key=lambda kv: kv[1].get("points") or 0, default=None)
        if best is not None:
            out[str(concept)] = {"key": best[0], **best[1]}
    return out
