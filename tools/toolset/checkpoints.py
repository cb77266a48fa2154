"""The checkpoint tool: ``list_checkpoints`` (what exists, whether it is intact, how to resume)."""

from __future__ import annotations

from typing import Annotated, Any

from rlmedic.tools.registry import Param, ToolContext, tool
from rlmedic.tools.toolset._common import add_citations, serious_findings
from rlmedic.types import Citation, Evidence, Finding


def _render_checkpoints(report: Any) -> str:
    lines = [f"{report.root}: {report.layout} layout, {report.total} checkpoint(s)"]
    for c in report.selected()[-8:]:
        status = "ok" if c.valid else ("unread" if c.unreadable else "unchecked" if not c.checked
                                       else "DAMAGED: " + "; ".join(c.issues[:2]))
        lines.append(f"step {c.step} {c.kind} {status} {c.path}")
    for i in report.issues[:6]:
        lines.append(f"{i.severity}: {getattr(i, 'message', None) or getattr(i, 'summary', '')}")
    plan = report.plan
    if plan is not None:
        lines.append(f"recovery plan ({plan.framework}, {plan.mode}): {plan.command}")
        lines += [f"- {n}" for n in plan.notes[:6]]
        lines += [f"DIFFERS: {d}" for d in plan.differences[:6]]
    return "\n".join(lines)


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
        add_citations(citations, plan.citations)
    for f in findings:
        add_citations(citations, f.citations)
    return Evidence(
        subject="checkpoints", findings=findings, root=0 if findings and findings[0].severity in ("critical", "error") else None,
        plan=plan_lines, facts=facts, citations=citations, frameworks=frameworks,
        checked=f"{report.total} checkpoint(s) under {report.root} ({report.layout} layout)",
        healthy=bool(selected) and not serious_findings(findings),
    )


def _step_checkpoints(data: Any) -> str:
    if not isinstance(data, dict):
        return ""
    return f"{len(data.get('checkpoints') or [])} checkpoint(s), layout {data.get('layout')}"


# the one config attached (a YAML, not a launch script) is the one the run resumes with: the plan lists what differs
@tool(render=_render_checkpoints, evidence=checkpoint_evidence, step=_step_checkpoints,
      reads={"root": "checkpoints", "config": "config"}, use="for run and checkpoint folders (what to resume from)")
def list_checkpoints(
    ctx: ToolContext,
    root: Annotated[str, Param(description="A fileroot or its checkpoints/ folder, a slime --save folder, or HF save folders.")],
    experiment_name: Annotated[str | None, Param(description="Only this AReaL experiment.")] = None,
    trial_name: Annotated[str | None, Param(description="Only this AReaL trial.")] = None,
    before_step: Annotated[int | None, Param(ge=0, description="Only checkpoints before this global step.")] = None,
    config: Annotated[str | None, Param(description="The config the run will resume with: the plan lists what differs.")] = None,
) -> Any:
    """Checkpoints that exist (AReaL, slime/Megatron, Hugging Face): steps, times, sizes, integrity, and how to resume.

    Ends with the exact recovery plan (AReaL recover.mode=auto or a restart from saved
    weights; slime --load/--ckpt-step).
    """
    from rlmedic.tools.checkpoints.listing import list_checkpoints as scan
    from rlmedic.tools.checkpoints.listing import recovery_plan

    parsed = None
    if config:  # first: a config that cannot be read (or a YAML bomb) is refused before a long scan
        from rlmedic.tools.config.fix import load_config

        _framework, parsed = load_config(config, confinement=ctx.confinement)
    report = scan(root, experiment_name=experiment_name, trial_name=trial_name, before_step=before_step,
                  confinement=ctx.confinement)
    recovery_plan(report, config=parsed)
    return report
