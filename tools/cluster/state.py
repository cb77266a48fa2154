"""Ray's record of deaths (actors, workers, nodes, the job) written as timestamped log lines.

What Ray itself knows is evidence the worker logs may lack: a worker SIGKILLed by the memory monitor
or the kernel writes nothing, but its ``exit_detail`` says "Task was killed due to the node running low
on memory"; a node lost to a missed heartbeat leaves only its ``state_message``. Written as lines in
``ray-state.log`` (one per death, in Ray's own words, timestamped with the worker's or node's end time),
the log diagnosis reads them with the same signatures and causality rules as any log: an out-of-memory
kill is a cause, an actor's "worker process has died" is the cascade of what that worker logged.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rlmedic.tools.cluster.plan import FAILED_EXITS, NodeInfo, Plan

STATE_FILE = "ray-state.log"
#: Longest death message kept (Ray's are a few hundred characters).
MAX_MESSAGE = 2000


def _stamp(ms: Any) -> str:
    """Local time, as the workers' own log lines are written on the nodes (Python logging's format)."""
    try:
        value = int(ms or 0)
    except (TypeError, ValueError):
        value = 0
    if value <= 0 or value >= 2**62:
        return ""
    return datetime.fromtimestamp(value / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3] + " "


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())[:MAX_MESSAGE]


def _death_message(actor: dict[str, Any]) -> str:
    cause = actor.get("death_cause") or {}
    if not isinstance(cause, dict):
        return ""
    for ctx in cause.values():  # actor_died_error_context, runtime_env_failed_context, creation_task_failure_context...
        if isinstance(ctx, dict):
            msg = ctx.get("error_message") or ctx.get("formatted_exception_string") or ctx.get("reason")
            if msg:
                return _one_line(msg)
    return ""


def state_lines(plan: Plan, *, actors: list[dict[str, Any]], workers: list[dict[str, Any]],
                nodes_rows: list[dict[str, Any]]) -> list[str]:
    """One line per dead actor, failed worker and dead node in scope, oldest first, then the job's end."""
    node_by_id: dict[str, NodeInfo] = {n.node_id: n for n in plan.nodes}
    worker_by: dict[tuple[str, int], dict[str, Any]] = {}
    for w in workers:
        if w.get("node_id") and w.get("pid"):
            worker_by[(str(w["node_id"]), int(w["pid"]))] = w
    rows: list[tuple[int, str]] = []
    covered: set[tuple[str, int]] = set()

    def where(node_id: str) -> str:
        n = node_by_id.get(node_id)
        return f"node {n.ip} ({node_id[:8]})" if n else f"node {node_id[:8]}"

    job_id = str((plan.job or {}).get("job_id") or "").lower()
    for a in actors:
        if str(a.get("state")) != "DEAD" or not a.get("node_id"):
            continue
        if str(a.get("name") or "").startswith("_ray_internal_"):
            continue
        if job_id and str(a.get("job_id") or "").lower() != job_id:
            continue
        key = (str(a["node_id"]), int(a.get("pid") or 0))
        worker = worker_by.get(key, {})
        msg = _death_message(a)
        if not msg and str(worker.get("exit_type") or "") not in FAILED_EXITS:
            continue
        if "INTENDED_USER_EXIT" in msg or str(worker.get("exit_type")) in ("INTENDED_USER_EXIT", "INTENDED_SYSTEM_EXIT") and not msg:
            continue
        covered.add(key)
        end = int(worker.get("end_time_ms") or 0)
        rows.append((end, f"{_stamp(end)}ERROR ray.state: actor {a.get('class_name') or '?'} (pid {key[1]}, actor "
                          f"{str(a.get('actor_id') or '')[:12]}) on {where(key[0])} is DEAD: {msg}"))
    for key, w in worker_by.items():
        if key in covered or str(w.get("exit_type") or "") not in FAILED_EXITS:
            continue
        if job_id and key not in plan.pids:
            continue
        end = int(w.get("end_time_ms") or 0)
        rows.append((end, f"{_stamp(end)}ERROR ray.state: worker pid {key[1]} on {where(key[0])} exited "
                          f"({w.get('exit_type')}): {_one_line(w.get('exit_detail'))}"))
    started = int((plan.job or {}).get("start_time") or 0)
    for n in nodes_rows:
        if str(n.get("state")) != "DEAD":
            continue
        end = int(n.get("end_time_ms") or 0)
        if started and end and end < started:
            continue  # gone before the job started: not this job's failure (the sync lists it as skipped)
        rows.append((end, f"{_stamp(end)}ERROR ray.state: {where(str(n.get('node_id') or ''))} is DEAD: "
                          f"{_one_line(n.get('state_message')) or 'no reason recorded'}"))
    rows.sort(key=lambda r: r[0])
    job = plan.job or {}
    if str(job.get("status") or "") in ("FAILED", "STOPPED"):
        first = str(job.get("message") or "").strip().splitlines()[0] if job.get("message") else ""
        first = _one_line(first.split(", last available logs")[0])
        rows.append((int(job.get("end_time") or 0), f"{_stamp(job.get('end_time'))}ERROR ray.state: job "
                     f"{job.get('submission_id') or job.get('job_id')} {job.get('status')}"
                     f" ({job.get('error_type') or 'no error type'}): {first}"))
    return [line for _, line in rows]
