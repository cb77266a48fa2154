"""Each tool's result as :class:`~rlmedic.types.Evidence`: the one interface answers are built from.

A tool names its adapter at registration (``@tool(evidence=...)``); the registry applies
it to the redacted result, so every consumer (the offline engine, the LLM loop's
grounding, a session's memory) reads findings, fixes, citations, a recovery plan, GPU
advice, a config diff and what was checked the same way, without knowing which tool
spoke. Nothing here reads files or the network: it only re-expresses a result.
"""

from __future__ import annotations

from typing import Any

from rlmedic.types import Citation, Evidence, Finding, Fix, UpstreamFix, severity_rank

GIB = 2**30


def _serious(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if severity_rank(f.severity) <= severity_rank("error")]


def _add_citations(out: list[Citation], items: Any) -> None:
    for c in items or ():
        if isinstance(c, Citation) and c not in out:
            out.append(c)


def diagnosis_evidence(d: Any) -> Evidence:
    """Logs: the root finding first with its fixes and citations; healthy when nothing serious was found."""
    root = d.root_finding
    findings = ([root] if root is not None else []) + [f for f in d.findings if f is not root]
    stats = d.stats or {}
    citations: list[Citation] = []
    _add_citations(citations, root.citations if root is not None else ())
    for fix in (root.fixes if root is not None else ()):
        _add_citations(citations, fix.citations)
    parts = [f"{stats.get('files', 0)} log file(s), {stats.get('lines', 0)} lines"]
    if stats.get("last_step") is not None:
        parts.append(f"last training step {stats['last_step']}")
    if stats.get("clean_shutdown"):
        parts.append("a clean shutdown at the end")
    if stats.get("frameworks"):
        parts.append("written by " + ", ".join(stats["frameworks"]))
    facts = [f"{f.summary} ({f.file}:{f.line})" if f.line else f.summary
             for f in findings if f is not root and f.root is None and f.severity == "warning"][:4]
    serious = _serious(list(d.findings))
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
        upstream_fixes=_upstream(stats.get("upstream_fixes")),
        metrics=_metric_summary(stats.get("metrics")),
    )


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


def _upstream(items: Any) -> list[UpstreamFix]:
    """Upstream fixes kept in a result as JSON (``stats.upstream_fixes``) back as models."""
    out = []
    for item in items or ():
        try:
            out.append(item if isinstance(item, UpstreamFix) else UpstreamFix.model_validate(item))
        except (TypeError, ValueError):
            continue
    return out


def env_evidence(listing: Any) -> Evidence:
    """The training environment's listing: its versions (they decide whether a fix is already in)."""
    versions = dict(getattr(listing, "versions", {}) or {})
    return Evidence(subject="env", versions=versions,
                    checked=f"{len(versions)} package versions from {getattr(listing, 'path', '')} ({getattr(listing, 'kind', '')})")


def code_evidence(quotes: Any) -> Evidence:
    """The failing functions quoted from the user's source: one fact per quote, its code included."""
    facts = [str(q) for q in quotes or ()]
    return Evidence(subject="code", facts=facts,
                    checked=f"{len(facts)} failing function(s) quoted from the source" if facts else "")


def upstream_evidence(result: Any) -> Evidence:
    """Commits that likely fixed a traceback, with the versions they were judged against."""
    fixes = _upstream(getattr(result, "fixes", ()))
    return Evidence(subject="upstream", versions=dict(getattr(result, "versions", {}) or {}), upstream_fixes=fixes,
                    citations=[f.citation for f in fixes[:3]], checked=getattr(result, "checked", ""))


def gpu_evidence(report: Any) -> Evidence:
    """GPUs: the advice (leftover processes, foreign memory, ECC, backend) and one fact per GPU."""
    snap = report.snapshot
    advice = list(report.advice)
    facts: list[str] = []
    for g in getattr(snap, "gpus", []) or []:
        procs = ", ".join(
            f"pid {p.pid} {p.role} {(p.used_gpu_memory or 0) / GIB:.1f} GiB" + (" (leftover)" if p.leftover else "")
            for p in g.processes[:4])
        facts.append(f"GPU {g.index} {g.name}: {g.memory_used / GIB:.1f}/{g.memory_total / GIB:.1f} GiB used"
                     + (f"; {procs}" if procs else "; no process"))
    fixes: list[Fix] = []
    citations: list[Citation] = []
    for a in advice:
        if severity_rank(a.severity) <= severity_rank("warning"):
            fixes += [f for f in a.fixes if f not in fixes]
            _add_citations(citations, a.citations)
    gpus = len(getattr(snap, "gpus", []) or [])
    return Evidence(
        subject="gpus", advice=advice, facts=facts, fixes=fixes, citations=citations,
        checked=f"{gpus} GPU(s) on {getattr(snap, 'hostname', '') or 'the host'} ({getattr(snap, 'source', '')})",
        healthy=gpus > 0 and not any(severity_rank(a.severity) <= severity_rank("warning") for a in advice),
    )


def checkpoint_evidence(report: Any) -> Evidence:
    """Checkpoints: damaged saves and storage problems as findings, the recovery plan as steps."""
    findings = list(report.issues)
    facts = []
    selected = report.selected()
    for c in selected[-6:]:
        state = "intact" if c.valid else ("not readable" if c.unreadable else "DAMAGED (" + "; ".join(c.issues[:2]) + ")")
        facts.append(f"step {c.step} {c.kind} checkpoint {state}: {c.path}")
    newest = max(selected, key=lambda c: (c.step if c.step is not None else -1, c.mtime), default=None)
    if newest is not None and not newest.valid and not newest.unreadable:
        # the newest save being damaged is what decides how to resume: it leads
        findings = [f for f in findings if f.file != newest.path]
        findings.insert(0, Finding(
            id="newest-checkpoint-damaged", category="checkpoint_recovery", severity="error",
            summary=f"the newest checkpoint (step {newest.step}, {newest.path}) is damaged: {'; '.join(newest.issues[:3])}",
            file=newest.path))
    plan_lines: list[str] = []
    citations: list[Citation] = []
    frameworks: list[str] = []
    plan = report.plan
    if plan is not None:
        if plan.framework in ("areal", "slime"):
            frameworks.append(plan.framework)
        head = f"{plan.framework} recovery ({plan.mode})"
        if plan.resume_from is not None:
            head += f" from step {plan.resume_from.step}: {plan.resume_from.path}"
        plan_lines.append(head)
        if plan.command:
            plan_lines.append(f"run: {plan.command}")
        plan_lines += [f"set {line}" for line in plan.config_lines]
        plan_lines += list(plan.notes)
        plan_lines += [f"differs from the checkpoint: {d}" for d in plan.differences]
        plan_lines += [f"keep unchanged: {k}" for k in plan.keep_unchanged[:6]]
        _add_citations(citations, plan.citations)
    for f in findings:
        _add_citations(citations, f.citations)
    return Evidence(
        subject="checkpoints", findings=findings, root=0 if findings and findings[0].severity in ("critical", "error") else None,
        plan=plan_lines, facts=facts, citations=citations, frameworks=frameworks,
        checked=f"{report.total} checkpoint(s) under {report.root} ({report.layout} layout)",
        healthy=bool(selected) and not _serious(findings),
    )


def fix_evidence(result: Any) -> Evidence:
    """A config: its problems, the exact edits (changes first, then actions), the diff."""
    fixes = list(result.changes) + list(result.actions)
    citations: list[Citation] = []
    for fix in fixes:
        _add_citations(citations, fix.citations)
    for p in result.problems:
        _add_citations(citations, p.citations)
    problems = sorted(result.problems, key=lambda p: severity_rank(p.severity))  # errors first: the worst leads
    return Evidence(
        subject="config", findings=problems, root=0 if _serious(problems[:1]) else None,
        fixes=fixes, diff=result.diff or "", citations=citations,
        frameworks=[result.framework] if result.framework in ("areal", "slime") else [],
        facts=[f"still to edit by hand: {p.key}: {p.summary}" for p in result.remaining
               if severity_rank(p.severity) <= severity_rank("warning")][:4],
        checked=f"the config {result.path} ({result.framework})",
        healthy=not result.changes and not _serious(list(result.problems)),
        settings=dict(getattr(result, "settings", None) or {}),
    )


def lint_evidence(result: Any) -> Evidence:
    fixes = [fix for p in result.problems for fix in p.fixes]
    citations: list[Citation] = []
    for p in result.problems:
        _add_citations(citations, p.citations)
    problems = sorted(result.problems, key=lambda p: severity_rank(p.severity))
    return Evidence(subject="config", findings=problems, root=0 if _serious(problems[:1]) else None,
                    fixes=fixes, citations=citations,
                    frameworks=[result.framework] if result.framework in ("areal", "slime") else [],
                    checked=f"the config {result.path} ({result.framework})", healthy=not result.problems)


def search_evidence(results: list[Any]) -> Evidence:
    """Search hits: their citations (the top three), nothing else is a claim."""
    citations: list[Citation] = []
    for hit in list(results)[:3]:
        cite = getattr(hit, "citation", None)
        if isinstance(cite, Citation):
            _add_citations(citations, [cite])
    return Evidence(subject="knowledge", citations=citations)
