"""A local folder that mirrors a Ray job's logs on every node: parallel, bounded, tail first, read-only.

One :meth:`Mirror.sync` lists the cluster (nodes, jobs, actors, workers), lists each live node's log
files in parallel, plans which belong to the job (:mod:`.plan`), and fetches the planned files' tails in
parallel: each at most ``Limits.per_file`` bytes (its end: the newest lines), all together at most
``Limits.total`` (budgeted in plan order: failed workers' ``.err`` first). Files land side by side as
``node-<ip>-<id>__<ActorClass>-pid<pid>__<Ray's file name>`` with ``ray-state.log`` (:mod:`.state`), so
the log diagnosis names the node's IP, the actor and its file, and ``watch`` follows one folder.

A second sync (``watch``) appends only what is new at each file's end (the previous end is found in the
new tail), so a follower reading the folder sees appended lines, as with a live local log. Only GET
requests reach the cluster; the folder is created private (0700) and nothing else is written.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError
from rlmedic.tools.cluster.address import Resolved, resolve
from rlmedic.tools.cluster.client import StateAPIError, StateClient
from rlmedic.tools.cluster.plan import NodeInfo, Plan, make_plan, nodes_from, pick_job
from rlmedic.tools.cluster.state import STATE_FILE, state_lines

#: The end of the previous copy searched for in a new tail (complete lines, up to this many bytes).
ANCHOR_BYTES = 2048
SKIPPED_MARK = b"[rlmedic: lines between two looks at the cluster were not fetched]\n"


def _env_bytes(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UserError(f"{name}={raw}: not a number of bytes") from None
    if value < 1024:
        raise UserError(f"{name}={raw}: give at least 1024 bytes")
    return value


@dataclass(frozen=True)
class Limits:
    """Bounds on one sync: bytes per file (its end), bytes in all, lines asked per file, parallel requests.
    ``RLMEDIC_RAY_MAX_FILE_BYTES`` and ``RLMEDIC_RAY_MAX_BYTES`` change the first two (:meth:`from_env`)."""

    per_file: int = 256 * 1024
    total: int = 16 * 1024 * 1024
    lines: int = 10_000
    parallel: int = 8
    #: below this share of a file left in the total budget, the file is skipped (named in ``skipped``)
    min_file: int = 4 * 1024

    @classmethod
    def from_env(cls) -> Limits:
        per_file = _env_bytes("RLMEDIC_RAY_MAX_FILE_BYTES", cls.per_file)
        return cls(per_file=per_file, total=max(per_file, _env_bytes("RLMEDIC_RAY_MAX_BYTES", cls.total)))


@dataclass
class SyncResult:
    folder: Path
    address: str
    dashboard: str
    ray_version: str
    job: dict[str, Any] | None
    nodes: list[NodeInfo]
    files: list[dict[str, Any]] = field(default_factory=list)  # local, node, who, bytes, cut
    skipped: list[dict[str, str]] = field(default_factory=list)
    state_lines: int = 0
    bytes: int = 0
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        job = self.job or {}
        name = job.get("submission_id") or job.get("job_id") or "every job"
        return (f"Ray {self.ray_version} at {self.address}: {len(self.nodes)} node(s), job {name} "
                f"({job.get('status', '?')}); {len(self.files)} log file(s), {self.bytes / 1e6:.1f} MB, "
                f"{self.state_lines} death record(s) in {self.seconds:.1f} s")

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "address": self.address, "dashboard": self.dashboard,
                "ray_version": self.ray_version,
                "job": {k: (self.job or {}).get(k) for k in ("job_id", "submission_id", "status")} if self.job else None,
                "nodes": [{"node_id": n.node_id, "ip": n.ip, "head": n.head, "state": n.state} for n in self.nodes],
                "files": self.files, "skipped": self.skipped, "state_lines": self.state_lines,
                "bytes": self.bytes, "seconds": round(self.seconds, 3), "timings": self.timings}


#: A line the driver's log echoes from a worker: ``(TrainWorker pid=4567) ...`` or, from another node,
#: ``(TrainWorker pid=4567, ip=10.0.0.2) ...`` (Ray's log_to_driver prefix, colour codes already dropped).
_ECHO = re.compile(rb"^\((?:[^()\s]+ )?pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s]+))?\) ")


def drop_echoes(data: bytes, own: set[tuple[str, int | None]], driver_ip: str) -> bytes:
    """The driver's log less the lines it echoes from workers whose own file is in the folder.

    Ray's driver repeats every worker's output with a ``(Actor pid=N)`` prefix, at the same time
    stamp, so a failure would be found twice and its root could land on the driver's copy; the
    worker's own file names the node and the actor. Echoes of workers whose file is not here (a
    node that died with its files, a file past the caps) are kept: they are the only copy."""
    if not own:
        return data
    kept = []
    for line in data.splitlines(keepends=True):
        m = _ECHO.match(line)
        if m and ((m.group("ip") or driver_ip.encode()).decode(errors="replace"), int(m.group("pid"))) in own:
            continue
        kept.append(line)
    return b"".join(kept)


class Mirror:
    """The job's logs on a Ray cluster, kept in ``folder`` (a new private temp folder when not given)."""

    def __init__(self, address: str, *, folder: str | os.PathLike[str] | None = None, job: str | None = None,
                 since_minutes: float | None = None, limits: Limits | None = None,
                 resolved: Resolved | None = None) -> None:
        if since_minutes is not None and since_minutes <= 0:
            raise UserError(f"--since {since_minutes:g}: give a number of minutes above 0")
        self.resolved = resolved or resolve(address)
        self.job_wanted = job
        self.since = since_minutes
        self.limits = limits or Limits.from_env()
        self.folder = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="rlmedic-ray-"))
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.client = StateClient(self.resolved.dashboard, max_connections=max(4, self.limits.parallel))
        self._anchors: dict[str, bytes] = {}
        self._state_seen: set[str] = set()

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ one look --

    def sync(self) -> SyncResult:
        started = time.perf_counter()
        timings: dict[str, float] = {}
        c = self.client
        with ThreadPoolExecutor(max_workers=4) as pool:
            f_nodes, f_jobs = pool.submit(c.nodes), pool.submit(c.jobs)
            f_actors, f_workers = pool.submit(c.actors), pool.submit(c.workers)
            try:
                node_rows, jobs, actors, workers = f_nodes.result(), f_jobs.result(), f_actors.result(), f_workers.result()
            except StateAPIError as exc:
                raise UserError(f"--ray-address {self.resolved.given}: {exc}") from None
        timings["state"] = time.perf_counter() - started
        nodes = nodes_from(node_rows)
        job = pick_job(jobs, self.job_wanted)
        t = time.perf_counter()
        listings, skipped = self.list_logs(nodes)
        timings["listing"] = time.perf_counter() - t
        plan = make_plan(nodes=nodes, listings=listings, actors=actors, workers=workers, job=job,
                         since_minutes=self.since)
        skipped += plan.skipped
        t = time.perf_counter()
        files, more = self._fetch(plan)
        timings["fetch"] = time.perf_counter() - t
        skipped += more
        lines = state_lines(plan, actors=actors, workers=workers, nodes_rows=node_rows)
        self._write_state(lines)
        total = sum(int(f["bytes"]) for f in files)
        return SyncResult(folder=self.folder, address=self.resolved.given, dashboard=self.resolved.dashboard,
                          ray_version=self.resolved.ray_version, job=job, nodes=nodes, files=files, skipped=skipped,
                          state_lines=len(lines), bytes=total, seconds=time.perf_counter() - started, timings=timings)

    def list_logs(self, nodes: list[NodeInfo]) -> tuple[dict[str, dict[str, list[str]]], list[dict[str, str]]]:
        """Each live node's file listing, in parallel; a node that does not answer is named in ``skipped``."""
        listings: dict[str, dict[str, list[str]]] = {}
        skipped: list[dict[str, str]] = []
        live = [n for n in nodes if n.state == "ALIVE"]
        for n in nodes:
            if n.state != "ALIVE":
                skipped.append({"file": n.folder, "reason": f"node {n.state.lower() or 'gone'}: its log files went with it"})
        with ThreadPoolExecutor(max_workers=self.limits.parallel) as pool:
            futures = {n.node_id: pool.submit(self.client.log_files, n.node_id) for n in live}
            for n in live:
                try:
                    listings[n.node_id] = futures[n.node_id].result()
                except StateAPIError as exc:
                    skipped.append({"file": n.folder, "reason": f"cannot list its logs ({exc})"})
        return listings, skipped

    def _fetch(self, plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """Tails in parallel, in rounds: each round gives the next files in plan order a share of what is
        left of the total (at most ``per_file`` each); what a short file leaves unused goes to the next round."""
        lim = self.limits
        left = lim.total
        pending = list(plan.files)
        done: list[dict[str, Any]] = []
        fetched: list[tuple[Any, bytes, bool]] = []
        skipped: list[dict[str, str]] = []
        floor = min(lim.min_file, lim.per_file)
        with ThreadPoolExecutor(max_workers=lim.parallel) as pool:
            while pending and left >= floor:
                batch: list[tuple[Any, int]] = []
                budget = left
                while pending and budget >= floor:
                    share = min(lim.per_file, budget)
                    batch.append((pending.pop(0), share))
                    budget -= share
                futures = [(pf, pool.submit(self.client.tail, pf.node.node_id, pf.filename,
                                            lines=lim.lines, max_bytes=share)) for pf, share in batch]
                for pf, fut in futures:
                    try:
                        data, cut = fut.result()
                    except StateAPIError as exc:
                        skipped.append({"file": pf.local, "reason": str(exc)})
                        continue
                    left -= len(data)
                    fetched.append((pf, data, cut))
        own = {(pf.node.ip, pf.pid) for pf, data, _ in fetched if pf.pid is not None and data}
        for pf, data, cut in fetched:
            if pf.driver:
                data = drop_echoes(data, own, pf.node.ip)
            written = self._append(pf.local, data)
            done.append({"local": pf.local, "node_ip": pf.node.ip, "node_id": pf.node.node_id,
                         "who": pf.who, "file": pf.filename, "bytes": written, "cut": cut})
        skipped += [{"file": pf.local, "reason": f"over the total cap of {lim.total} bytes"} for pf in pending]
        return done, skipped

    # ------------------------------------------------------------------ the folder --

    def _path(self, local: str) -> Path:
        target = (self.folder / local).resolve()
        root = self.folder.resolve()
        if root not in target.parents:
            raise UserError(f"{local}: a log name from the cluster that would leave {root}")
        return target

    def _append(self, local: str, data: bytes) -> int:
        """Write what is new at the end of ``data`` (everything the first time); returns bytes written."""
        target = self._path(local)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        anchor = self._anchors.get(local)
        new = data
        if anchor is not None:
            at = data.rfind(anchor) if anchor else -1
            if at >= 0:
                new = data[at + len(anchor):]
            elif data:
                new = SKIPPED_MARK + data
        if data:
            keep = data[-ANCHOR_BYTES:]
            nl = keep.find(b"\n")
            if len(data) > ANCHOR_BYTES and nl >= 0:
                keep = keep[nl + 1:]
            self._anchors[local] = keep
        if new:
            with open(target, "ab") as fh:
                fh.write(new)
        elif not target.exists():
            target.touch()
        return len(new)

    def _write_state(self, lines: list[str]) -> None:
        """Death records are appended once each, as they appear (Ray's lists only grow while the job runs)."""
        target = self._path(STATE_FILE)
        fresh = [line for line in lines if line not in self._state_seen]
        self._state_seen.update(fresh)
        if fresh or not target.exists():
            with open(target, "a", encoding="utf-8") as fh:
                fh.writelines(line + "\n" for line in fresh)


def collect(address: str, *, folder: str | os.PathLike[str] | None = None, job: str | None = None,
            since_minutes: float | None = None, limits: Limits | None = None) -> SyncResult:
    """One sync of the job's logs on the cluster at ``address`` into ``folder`` (a new temp folder when None)."""
    with Mirror(address, folder=folder, job=job, since_minutes=since_minutes, limits=limits) as mirror:
        return mirror.sync()
