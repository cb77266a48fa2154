"""``rlmedic gpu``: what the GPUs hold right now (NVML), or a saved snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from rlmedic.ui.params import path as path_param


def register(app: typer.Typer) -> None:
    app.command("gpu", short_help="Show GPU memory and processes; flag leftovers.")(gpu)


def gpu(
    json_out: bool = typer.Option(False, "--json", help="Print the snapshot and advice as JSON."),
    snapshot: Optional[Path] = typer.Option(None, "--snapshot", parser=path_param, help="Read a snapshot saved with --save instead of the live GPUs."),
    save: Optional[Path] = typer.Option(None, "--save", parser=path_param, help="Also write the snapshot as JSON to this new file (paste it from the cluster)."),
) -> None:
    """GPU state: memory, utilisation, temperature, ECC, clocks, and the processes holding memory (leftovers flagged)."""
    from rlmedic.tools.gpu.snapshot import save_snapshot
    from rlmedic.ui.clikit import print_json, run_tool, tool_context

    ctx = tool_context([snapshot])
    report = run_tool("gpu_status", {"snapshot": str(snapshot) if snapshot else None}, roots=[], ctx=ctx)
    saved = save_snapshot(report.snapshot, save, inputs=ctx.confinement) if save else None
    if json_out:
        data = report.to_dict()
        data["saved_to"] = str(saved) if saved else None
        print_json(data)
        return
    typer.echo(render(report.snapshot, report.advice))
    if saved:
        typer.echo(f"\nsnapshot saved to {saved}")


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / 1024**3:.1f}"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def render(snap: Any, advice: list[Any]) -> str:
    lines = []
    where = f" ({snap.source})" if snap.source != "nvml" else ""
    if not snap.has_gpus:
        lines.append(f"No GPU visible{where}: {snap.message or snap.status}.")
        lines.append("This is a normal answer: on a machine without GPUs, check configs with a snapshot saved on the "
                     "cluster (`rlmedic gpu --save gpu.json` there, then `--snapshot gpu.json`).")
        return "\n".join(lines)
    lines.append(f"{snap.hostname or 'host'}{where}: driver {snap.driver_version or '?'}, CUDA {snap.cuda_version or '?'}, "
                 f"{len(snap.gpus)} GPU(s)")
    for g in snap.gpus:
        cc = f"SM{g.sm}" if g.sm else "SM?"
        power = f"{g.power_usage / 1000:.0f}/{g.power_limit / 1000:.0f} W" if g.power_usage is not None and g.power_limit else "? W"
        ecc = "n/a" if g.ecc_mode is None else ("off" if not g.ecc_mode else str(g.ecc_uncorrected_volatile or 0))
        reasons = ",".join(g.clocks_event_reason_names) or "none"
        lines.append(
            f"  [{g.index}] {g.name} {cc}  mem {_gib(g.memory_used)}/{_gib(g.memory_total)} GiB (free {_gib(g.memory_free)})  "
            f"util {g.utilization_gpu if g.utilization_gpu is not None else '?'}%  {g.temperature if g.temperature is not None else '?'}°C  "
            f"{power}  ECC uncorrected {ecc}  clocks: {reasons}"
        )
        lines.append(f"      uuid {g.uuid}")
        for p in g.processes:
            flag = f"  LEFTOVER: {p.leftover_reason}" if p.leftover else ""
            cmd = (p.cmdline or p.name or "(not visible from this namespace)")[:90]
            lines.append(f"      pid {p.pid:<8} {p.role:<8} {_gib(p.used_gpu_memory):>6} GiB  age {_age(p.age_s):>6}  {cmd}{flag}")
    if advice:
        lines.append("")
        for a in advice:
            lines.append(f"{a.severity}: {a.message}")
            if a.fixes:
                lines.append(f"    do: {a.fixes[0]}")
            if a.citation:
                lines.append(f"    see: {a.citation}")
    return "\n".join(lines)
