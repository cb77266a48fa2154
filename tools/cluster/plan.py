"""Which log files on which node belong to the job, and where each goes in the local folder.

Facts of Ray 2.60 this rests on: log listings are per node (``/api/v0/logs?node_id=``), so a file is
named by its node; a worker's files are ``worker-<worker id>-<job id>-<pid>.{out,err}``, and the job id
in that name reads ``ffffffff`` for a worker started before a job claimed it (actors often), so files
are matched to actors by node and pid from ``list_actors``, and to the job through the actor's job id;
a submitted job's driver writes ``job-driver-<submission id>.log`` on the head. The driver's log repeats
the workers' lines (``(Actor pid=...)`` prefixes); the worker's own file is fetched too, and the
diagnosis puts the root on it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from rlmedic.errors import UserError

_WORKER_FILE = re.compile(r"^worker-(?P<wid>[0-9a-f]+)-(?P<job>[0-9a-f]+)-(?P<pid>\d+)\.(?P<stream>out|err)$")
_DRIVER_FILE = re.compile(r"^job-driver-(?P<sid>[\w.-]+)\.log$")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
#: Between the node, the actor and Ray's file name in a local name: one flat folder, because ``watch``
#: follows a folder's own files (not subfolders) and actors appear while it runs.
SEP = "__"
#: Exit types Ray records for a worker that did not mean to stop.
FAILED_EXITS = {"SYSTEM_ERROR", "USER_ERROR", "NODE_OUT_OF_MEMORY"}


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    ip: str
    head: bool
    state: str

    @property
    def folder(self) -> str:
        return f"node-{_SAFE.sub('_', self.ip)}-{self.node_id[:8]}"


@dataclass
class PlannedFile:
    node: NodeInfo
    filename: str  # as Ray lists it on the node
    local: str  # name in the local folder: node-<ip>-<id8>__<Actor>-pid<pid>__<Ray's name>
    priority: int  # lower is fetched (and budgeted) first
    who: str  # "TrainWorker pid 4567", "driver of raysubmit_...", "worker pid 12"
    pid: int | None = None  # a worker's file: its process
    driver: bool = False


@dataclass
class Plan:
    job: dict[str, Any] | None
    nodes: list[NodeInfo]
    files: list[PlannedFile] = field(default_factory=list)
    #: (node id, pid) of the actors and workers in scope (for the death records)
    pids: set[tuple[str, int]] = field(default_factory=set)
    skipped: list[dict[str, str]] = field(default_factory=list)


_LOCAL = re.compile(r"^node-(?P<ip>[A-Za-z0-9_.-]+?)-[0-9a-f]{1,8}__(?:(?P<who>[A-Za-z0-9_.-]+?)-pid(?P<pid>\d+)__\S+"
                    r"|job-driver-(?P<sid>\S+?)\.(?:log|out|err))$")


def describe_local(name: str) -> str | None:
    """Who wrote a file of the local folder, from its name (:attr:`PlannedFile.local`, or Ray's own record
    file): "TrainWorker pid 4567 on 10.0.0.5", "the driver of raysubmit_... on 10.0.0.4", "Ray's own
    records"; None for a name the mirror did not make. Answers name processes with it, not 120-character
    file names."""
    from rlmedic.tools.cluster.state import STATE_FILE

    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    if base == STATE_FILE:
        return "Ray's own records"
    m = _LOCAL.match(base)
    if not m:
        return None
    if m.group("sid"):
        return f"the driver of {m.group('sid')} on {m.group('ip')}"
    who = m.group("who")
    return f"{'a worker' if who == 'worker' else who} pid {m.group('pid')} on {m.group('ip')}"


def nodes_from(rows: list[dict[str, Any]]) -> list[NodeInfo]:
    out = [NodeInfo(str(r.get("node_id") or ""), str(r.get("node_ip") or "?"), bool(r.get("is_head_node")),
                    str(r.get("state") or "")) for r in rows if r.get("node_id")]
    return sorted(out, key=lambda n: (not n.head, n.ip, n.node_id))


def pick_job(jobs: list[dict[str, Any]], wanted: str | None) -> dict[str, Any] | None:
    """The job ``--job`` names (its job id or submission id), else the newest one; None when there are none."""
    if wanted:
        w = wanted.strip().lower()
        for j in jobs:
            if w in (str(j.get("job_id") or "").lower(), str(j.get("submission_id") or "").lower()):
                return j
        known = ", ".join(str(j.get("submission_id") or j.get("job_id")) for j in _newest_first(jobs)[:5]) or "none"
        raise UserError(f"--job {wanted}: no such job on the cluster (newest: {known})")
    ordered = _newest_first(jobs)
    return ordered[0] if ordered else None


def _newest_first(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(jobs, key=lambda j: int(j.get("start_time") or 0), reverse=True)


def _class_of(actor: dict[str, Any]) -> str:
    return _SAFE.sub("_", str(actor.get("class_name") or actor.get("repr_name") or "actor"))[:60] or "actor"


def make_plan(
    *, nodes: list[NodeInfo], listings: dict[str, dict[str, list[str]]], actors: list[dict[str, Any]],
    workers: list[dict[str, Any]], job: dict[str, Any] | None, since_minutes: float | None = None,
    now_ms: float | None = None,
) -> Plan:
    """The files to fetch (job driver and the job's worker files on every node), most telling first."""
    now_ms = now_ms if now_ms is not None else time.time() * 1000
    cutoff = now_ms - since_minutes * 60_000 if since_minutes else None
    job_id = str(job.get("job_id") or "").lower() if job else None
    sid = str(job.get("submission_id") or "") if job else ""
    by_node_pid_actor: dict[tuple[str, int], dict[str, Any]] = {}
    for a in actors:
        if a.get("node_id") and a.get("pid"):
            by_node_pid_actor[(str(a["node_id"]), int(a["pid"]))] = a
    ended: dict[tuple[str, int], dict[str, Any]] = {}
    for w in workers:
        if w.get("node_id") and w.get("pid"):
            ended[(str(w["node_id"]), int(w["pid"]))] = w
    plan = Plan(job=job, nodes=nodes)
    for node in nodes:
        listing = listings.get(node.node_id) or {}
        names = sorted({n for files in listing.values() for n in files if not n.endswith("/")})
        for name in names:
            d = _DRIVER_FILE.match(name)
            if d:
                if job is None or (sid and d.group("sid") == sid):
                    plan.files.append(PlannedFile(node, name, f"{node.folder}{SEP}{name}", 20,
                                                  f"driver of {d.group('sid')}", driver=True))
                continue
            m = _WORKER_FILE.match(name)
            if not m:
                continue
            pid = int(m.group("pid"))
            key = (node.node_id, pid)
            actor = by_node_pid_actor.get(key)
            file_job = m.group("job").lower()
            if job_id is not None:
                owner = str(actor.get("job_id") or "").lower() if actor else file_job
                if owner != job_id:
                    continue
            elif actor is not None and str(actor.get("name") or "").startswith("_ray_internal_"):
                continue  # Ray's own job supervisor
            record = ended.get(key) or {}
            end_ms = int(record.get("end_time_ms") or 0)
            if cutoff is not None and end_ms and end_ms < cutoff:
                plan.skipped.append({"file": f"{node.folder}{SEP}{name}", "reason": f"ended before the last {since_minutes:g} min"})
                continue
            failed = (str(record.get("exit_type") or "") in FAILED_EXITS
                      or (actor is not None and str(actor.get("state")) == "DEAD"))
            stream_rank = 0 if m.group("stream") == "err" else 1
            priority = (0 if failed else 40) + stream_rank * 10
            if actor is not None:
                who, folder = f"{_class_of(actor)} pid {pid}", f"{_class_of(actor)}-pid{pid}"
            else:
                who, folder = f"worker pid {pid}", f"worker-pid{pid}"
            plan.files.append(PlannedFile(node, name, f"{node.folder}{SEP}{folder}{SEP}{name}", priority, who, pid=pid))
            plan.pids.add(key)
    plan.files.sort(key=lambda f: (f.priority, f.local))
    return plan
