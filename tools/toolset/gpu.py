"""The GPU tool: ``gpu_status`` (memory per GPU and process, leftovers, advice)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from rlmedic.tools.registry import Param, ToolContext, tool
from rlmedic.tools.toolset._common import add_citations, cite
from rlmedic.types import Citation, Evidence, Fix, severity_rank

GIB = 2**30


@dataclass
class GpuReport:
    """A snapshot (live NVML or a saved file) and the advice drawn from it."""

    snapshot: Any
    advice: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = self.snapshot.to_dict()
        data["advice"] = [a.to_dict() for a in self.advice]
        return data


def _render_gpu(report: GpuReport) -> str:
    snap = report.snapshot
    if not snap.has_gpus:
        return f"no GPU visible ({snap.source}): {snap.message or snap.status}"
    lines = [f"{snap.hostname or 'host'} ({snap.source}): driver {snap.driver_version or '?'}, {len(snap.gpus)} GPU(s)"]
    for g in snap.gpus:
        lines.append(f"[{g.index}] {g.name} used {g.memory_used / 2**30:.1f}/{g.memory_total / 2**30:.1f} GiB, "
                     f"util {g.utilization_gpu}%, {len(g.processes)} process(es)"
                     + "".join(f"; pid {p.pid} {p.role} {(p.used_gpu_memory or 0) / 2**30:.1f} GiB"
                               + (" LEFTOVER" if p.leftover else "") for p in g.processes[:4]))
    for a in report.advice:
        lines.append(f"{a.severity}: {a.message}" + (f" | do: {a.fixes[0]}" if a.fixes else "")
                     + cite(getattr(a, "citation", None)))
    return "\n".join(lines)


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
            add_citations(citations, a.citations)
    gpus = len(getattr(snap, "gpus", []) or [])
    return Evidence(
        subject="gpus", advice=advice, facts=facts, fixes=fixes, citations=citations,
        checked=f"{gpus} GPU(s) on {getattr(snap, 'hostname', '') or 'the host'} ({getattr(snap, 'source', '')})",
        healthy=gpus > 0 and not any(severity_rank(a.severity) <= severity_rank("warning") for a in advice),
    )


def _step_gpu(data: Any) -> str:
    return f"{len(data.get('gpus') or [])} GPU(s), {len(data.get('advice') or [])} advice" if isinstance(data, dict) else ""


@tool(render=_render_gpu, evidence=gpu_evidence, step=_step_gpu, reads={"snapshot": "snapshot"},
      use="for GPU snapshots or this machine's GPUs")
def gpu_status(ctx: ToolContext,
               snapshot: Annotated[str | None, Param(description="A GPU snapshot JSON saved with `rlmedic gpu --save`; "
                                                     "omit to read the live GPUs through NVML.")] = None) -> GpuReport:
    """GPU state: memory per GPU and per process, utilisation, ECC, clocks, leftovers from dead runs.

    Reads the live GPUs through NVML (a machine without GPUs or driver says so), or a
    snapshot file. Adds advice: leftover processes holding memory, attention backend for
    the architecture, memory-optimised settings for GPUs under 80 GB.
    """
    from rlmedic.tools.gpu.advice import gpu_advice
    from rlmedic.tools.gpu.snapshot import gpu_snapshot, load_snapshot

    snap = load_snapshot(snapshot, confinement=ctx.confinement) if snapshot else gpu_snapshot()
    return GpuReport(snap, list(gpu_advice(snap)))
