"""A real two-node Ray cluster on this machine, on loopback only (tests and benchmarks of tools/cluster).

Ray 2.60 leaves loopback unless told, so every node and client here runs with:

* ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: otherwise Ray rewrites 127.0.0.1 to the address of the
  interface that routes outward (``resolve_ip_for_localhost``) in the node IP and every address it
  canonicalises. With it ``ray start --address`` refuses to add a node, so each node is started by
  this file's launcher (``python cluster_fixture.py node ...``), which builds the node the way
  ``ray start`` does, its IP pinned to 127.0.0.1;
* ``HOME`` holding a ``ray_bootstrap_config.yaml``: without one the dashboard asks the cloud metadata
  address (169.254.169.254) which cloud it runs on;
* ``RAY_USAGE_STATS_REPORT_URL`` at a closed loopback port: the dashboard posts a "disabled" usage
  report even with usage stats off.

Each node has its own temp dir (short: AF_UNIX paths are capped at 107 bytes) and its own ports. The
processes are stopped by pid (their process group, created here); never ``ray stop``, which stops every
Ray process on the machine. :func:`outside_connections` samples ``ss -tunap`` for this cluster's
processes' sockets whose far end is not 127.0.0.0/8, so a test can fail on any.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OBJECT_STORE_BYTES = 100 * 1024 * 1024
READY_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loopback_env(home: Path, closed_port: int) -> dict[str, str]:
    """The environment every Ray process of the test cluster and every client of it runs with."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "ray_bootstrap_config.yaml").write_text("cluster_name: rlmedic-test\nprovider: {type: local}\n")
    env = dict(os.environ)
    for key in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        env.pop(key, None)
    env.update({
        "HOME": str(home),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_USAGE_STATS_REPORT_URL": f"http://127.0.0.1:{closed_port}/",
        "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
        "RAY_DEDUP_LOGS": "0",
        "PYTHONUNBUFFERED": "1",
    })
    return env


@dataclass
class Node:
    proc: subprocess.Popen[bytes]
    temp_dir: Path
    info: dict[str, Any] = field(default_factory=dict)


class LocalRayCluster:
    """A head node (with the dashboard) and a second node with the custom resource ``node2``."""

    def __init__(self, base: Path, *, num_cpus: int = 1) -> None:
        self.base = base
        self.num_cpus = num_cpus
        self.closed_port = free_port()  # nobody listens here: the usage report fails at once, on loopback
        self.env = loopback_env(base / "home", self.closed_port)
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
        self.nodes: list[Node] = []

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _launch(self, name: str, args: list[str]) -> Node:
        temp = self.base / name
        temp.mkdir(parents=True, exist_ok=True)
        ready = temp / "ready.json"
        log = open(temp / "launcher.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, __file__, "node", "--temp-dir", str(temp), "--ready", str(ready),
             "--num-cpus", str(self.num_cpus), *args],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        node = Node(proc, temp)
        self.nodes.append(node)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                text = (temp / "launcher.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"ray node {name} did not start:\n{text}")
            time.sleep(0.2)
        node.info = json.loads(ready.read_text())
        return node

    def start(self) -> LocalRayCluster:
        try:
            self._launch("h", ["--head", "--gcs-port", str(self.gcs_port), "--dashboard-port", str(self.dashboard_port)])
            self._launch("w", ["--address", self.gcs_address, "--resources", json.dumps({"node2": 1})])
            self.wait_dashboard()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_dashboard(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Until the dashboard lists both nodes alive (the state API answers only after it has started)."""
        import httpx

        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"{self.dashboard_url}/api/v0/nodes", timeout=5, trust_env=False)
                rows = r.json()["data"]["result"]["result"]
                if sum(1 for n in rows if n["state"] == "ALIVE") >= 2:
                    return
                last = f"{len(rows)} node(s)"
            except Exception as exc:  # noqa: BLE001 - not up yet
                last = repr(exc)
            time.sleep(0.5)
        raise RuntimeError(f"dashboard at {self.dashboard_url} not ready: {last}")

    def pids(self) -> set[int]:
        """Every live process of this cluster: the launchers and all their descendants."""
        import psutil

        found: set[int] = set()
        for node in self.nodes:
            try:
                p = psutil.Process(node.proc.pid)
                found.add(p.pid)
                found.update(c.pid for c in p.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self) -> None:
        """SIGTERM each launcher (it stops its node's processes), then SIGKILL what is left, by pid."""
        import psutil

        everyone = self.pids()
        for node in reversed(self.nodes):
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in reversed(self.nodes):
            try:
                node.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(timeout=10)
        for pid in everyone:
            try:
                p = psutil.Process(pid)
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.nodes.clear()

    def __enter__(self) -> LocalRayCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# ------------------------------------------------------------------ loopback check --


def _is_loopback(addr: str) -> bool:
    host = addr.rsplit(":", 1)[0].strip("[]")
    if host.startswith("::ffff:"):
        host = host[7:]
    return host.startswith("127.") or host in ("::1", "*", "0.0.0.0", "::", "")


def outside_connections(pids: set[int]) -> list[str]:
    """``ss -tunap`` lines of these processes whose local or far end is not loopback (listening
    sockets on a wildcard address count too: a Ray process that binds 0.0.0.0 is reachable from outside)."""
    out = subprocess.run(["ss", "-tunap"], capture_output=True, text=True, timeout=10).stdout
    bad = []
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 7 or "pid=" not in line:
            continue
        owners = {int(x.split(",")[0]) for x in line.split("pid=")[1:]}
        if not owners & pids:
            continue
        local, peer = parts[4], parts[5]
        if not _is_loopback(peer) or (not local.startswith(("127.", "[::ffff:127.", "[::1]"))):
            bad.append(line)
    return bad


class LoopbackSampler:
    """Samples ``ss -tunap`` every ``interval`` s in a thread while the cluster runs; ``bad`` keeps offenders."""

    def __init__(self, cluster: LocalRayCluster, interval: float = 0.5, extra_pids: Any = None) -> None:
        import threading

        self.cluster = cluster
        self.interval = interval
        self.extra_pids = extra_pids or (lambda: set())
        self.bad: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        pids = self.cluster.pids() | set(self.extra_pids())
        for line in outside_connections(pids):
            if line not in self.bad:
                self.bad.append(line)
        self.samples += 1

    def __enter__(self) -> LoopbackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()


# ------------------------------------------------------------------ the node launcher --


def _node_main(argv: list[str]) -> None:
    """One Ray node, built as ``ray start`` builds it, its IP pinned to 127.0.0.1; runs until SIGTERM."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--temp-dir", required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--num-cpus", type=int, default=1)
    ap.add_argument("--head", action="store_true")
    ap.add_argument("--gcs-port", type=int)
    ap.add_argument("--dashboard-port", type=int)
    ap.add_argument("--address")
    ap.add_argument("--resources", default="{}")
    a = ap.parse_args(argv)
    if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") != "0":
        raise SystemExit("refusing to start: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 must be set (loopback only)")

    import ray._private.node
    from ray._private.parameter import RayParams

    params = RayParams(
        node_ip_address="127.0.0.1",
        num_cpus=a.num_cpus,
        num_gpus=0,
        object_store_memory=OBJECT_STORE_BYTES,
        resources=json.loads(a.resources),
        temp_dir=a.temp_dir,
        include_log_monitor=True,
        node_manager_port=free_port(),
        object_manager_port=free_port(),
        metrics_export_port=free_port(),
        metrics_agent_port=free_port(),
        runtime_env_agent_port=free_port(),
        dashboard_agent_listen_port=free_port(),
    )
    if a.head:
        params.update(
            gcs_server_port=a.gcs_port, include_dashboard=True, dashboard_host="127.0.0.1",
            dashboard_port=a.dashboard_port, session_name=f"session_{os.getpid()}",
        )
    else:
        params.gcs_address = a.address
    node = ray._private.node.Node(params, head=a.head, shutdown_at_exit=False, spawn_reaper=False)
    stop = {"now": False}

    def on_term(*_: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    Path(a.ready).write_text(json.dumps({
        "pid": os.getpid(), "node_id": node.node_id, "gcs_address": node.gcs_address,
        "logs_dir": node.get_logs_dir_path(), "webui": node.address_info.get("webui_url"),
    }))
    while not stop["now"]:
        time.sleep(0.2)
    node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["node"]:
        _node_main(sys.argv[2:])
    else:
        raise SystemExit("usage: cluster_fixture.py node --temp-dir DIR --ready FILE [--head ...]")


# ------------------------------------------------------------------ the failing job --

#: The job the tests submit: a TrainWorker on the second node runs out of CUDA memory (torch's real
#: exception and message) and its process exits; its peer on the head, waiting on it, gets Ray's
#: ActorDiedError and dies too (the cascade); the driver fails. Lines are timestamped as AReaL's are.
FAILING_JOB = r'''
import logging, os, sys, time
import ray

FMT = "%(asctime)s.%(msecs)03d %(name)s %(levelname)s: %(message)s"
DATE = "%Y%m%d-%H:%M:%S"

def _log(name):
    logging.basicConfig(level=logging.INFO, format=FMT, datefmt=DATE, stream=sys.stderr, force=True)
    return logging.getLogger(name)

@ray.remote(num_cpus=0, resources={"node2": 0.1})
class TrainWorker:
    def step(self, n):
        log = _log("TrainWorker")
        log.info("train step %d: actor forward/backward, mb_spec.max_tokens_per_mb=10240", n)
        import torch
        try:
            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of 79.11 GiB "
                "of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory "
                "in use. Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.31 GiB is reserved "
                "by PyTorch but unallocated.")
        except torch.OutOfMemoryError:
            log.exception("train step %d failed", n)
            logging.shutdown()
            sys.stderr.flush()
            os._exit(1)

@ray.remote(num_cpus=0, resources={"node:__internal_head__": 0.01})
class RolloutPeer:
    def run(self, worker):
        log = _log("RolloutPeer")
        log.info("waiting for the trainer's step 1")
        try:
            ray.get(worker.step.remote(1))
        except Exception:
            time.sleep(1.5)
            log.exception("peer lost while waiting for the trainer")
            logging.shutdown()
            sys.stderr.flush()
            os._exit(1)

if __name__ == "__main__":
    ray.init(address="auto", log_to_driver=True)
    w = TrainWorker.remote()
    p = RolloutPeer.remote()
    ray.get(p.run.remote(w))
'''


def submit_failing_job(cluster: LocalRayCluster, workdir: Path, timeout: float = 120) -> dict[str, Any]:
    """Submit :data:`FAILING_JOB` through the dashboard's job API and wait until it has failed."""
    import httpx

    script = workdir / "failing_job.py"
    script.write_text(FAILING_JOB)
    body = {"entrypoint": f"{sys.executable} {script}", "runtime_env": {},
            "submission_id": f"raysubmit_rlmedic_{os.getpid()}_{int(time.time())}"}
    r = httpx.post(f"{cluster.dashboard_url}/api/jobs/", json=body, timeout=30, trust_env=False)
    r.raise_for_status()
    sid = r.json()["submission_id"]
    deadline = time.monotonic() + timeout
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        info = httpx.get(f"{cluster.dashboard_url}/api/jobs/{sid}", timeout=10, trust_env=False).json()
        if info.get("status") in ("FAILED", "SUCCEEDED", "STOPPED"):
            break
        time.sleep(0.5)
    # the actors' deaths reach the GCS a moment after the driver fails
    deadline2 = time.monotonic() + 30
    while time.monotonic() < deadline2:
        rows = httpx.get(f"{cluster.dashboard_url}/api/v0/actors", params={"detail": "true"},
                         timeout=10, trust_env=False).json()["data"]["result"]["result"]
        if rows and all(a["state"] == "DEAD" for a in rows):
            break
        time.sleep(0.5)
    return info
