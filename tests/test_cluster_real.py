"""``--ray-address`` on a real two-node Ray cluster on this machine, loopback only.

A head and a second node (``tests/cluster_fixture.py``), each with its own temp dir and ports; a submitted
job whose TrainWorker on the second node raises torch's CUDA out-of-memory error and exits, while its
peer on the head dies waiting for it (Ray's ActorDiedError). ``diagnose`` and ``ask --offline`` must name
the second node's OOM as the root with the peer under it, ``watch`` must alert once, nothing on the
cluster may change, and no process of the test (cluster, CLI, this one) may hold a socket outside
127.0.0.0/8 (``ss -tunap``, sampled all along). Slow: the cluster alone takes 30-60 s to start here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rlmedic[ray]')")
sys.path.insert(0, str(Path(__file__).parent))

from cluster_fixture import LocalRayCluster, LoopbackSampler, submit_failing_job  # noqa: E402

pytestmark = pytest.mark.slow
RLMEDIC = [sys.executable, "-m", "rlmedic"]
TIMES: dict[str, float] = {}


def _everyone() -> set[int]:
    """This test process and all its children (the CLI runs, the cluster launchers and their Ray processes)."""
    import psutil

    me = psutil.Process()
    return {me.pid, *(c.pid for c in me.children(recursive=True))}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("r")  # short: Ray's AF_UNIX socket paths must stay under 107 bytes
    c = LocalRayCluster(base)
    sampler = LoopbackSampler(c, extra_pids=_everyone)
    with sampler:
        started = time.perf_counter()
        c.start()
        TIMES["cluster start"] = time.perf_counter() - started
        started = time.perf_counter()
        info = submit_failing_job(c, base)
        TIMES["job until failed"] = time.perf_counter() - started
        assert info.get("status") == "FAILED", info
        env = dict(c.env, RLMEDIC_HOME=str(base / "rlmedic-home"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        try:
            yield {"cluster": c, "env": env, "base": base, "sampler": sampler, "info": info, "started": time.time()}
        finally:
            c.stop()
    print("\nreal-cluster times (s): " + ", ".join(f"{k} {v:.1f}" for k, v in TIMES.items()))
    assert sampler.bad == [], "connections outside 127.0.0.0/8:\n" + "\n".join(sampler.bad)


def _rl(cluster: dict[str, Any], *args: str, timeout: float = 300, label: str = "") -> subprocess.CompletedProcess[str]:
    started = time.perf_counter()
    out = subprocess.run([*RLMEDIC, *args], env=cluster["env"], capture_output=True, text=True, timeout=timeout)
    if label:
        TIMES[label] = time.perf_counter() - started
    return out


def _state(c: LocalRayCluster) -> dict[str, Any]:
    import httpx

    get = lambda p: httpx.get(c.dashboard_url + p, params={"detail": "true", "limit": 1000}, timeout=30,  # noqa: E731
                              trust_env=False).json()["data"]["result"]["result"]
    return {"jobs": sorted((j["submission_id"], j["status"]) for j in get("/api/v0/jobs")),
            "actors": sorted((a["actor_id"], a["state"]) for a in get("/api/v0/actors")),
            "nodes": sorted((n["node_id"], n["state"]) for n in get("/api/v0/nodes"))}


def _node2(c: LocalRayCluster) -> str:
    return c.nodes[1].info["node_id"][:8]


def _head(c: LocalRayCluster) -> str:
    return c.nodes[0].info["node_id"][:8]


def test_diagnose_names_the_second_nodes_oom_as_root_with_the_peer_on_the_head_under_it(cluster: dict[str, Any]) -> None:
    c = cluster["cluster"]
    before = _state(c)
    out = _rl(cluster, "diagnose", "--ray-address", c.dashboard_url, "--json", label="diagnose --ray-address (dashboard)")
    assert out.returncode == 0, out.stderr[-2000:]
    d = json.loads(out.stdout)
    root = d["findings"][d["root"]]
    assert root["id"] == "cuda-oom"
    assert f"node-127.0.0.1-{_node2(c)}__TrainWorker-pid" in root["file"] and root["file"].endswith(".err")
    cascades = [f for f in d["findings"] if f.get("root") == d["root"] and f is not root]
    assert any(f["id"] == "ray-actor-died" for f in cascades)
    assert "RolloutPeer pid " in root["summary"]  # the peer on the head, as the cascade, named by its process
    assert root["file"].startswith("ray/") and "rlmedic-ray-" not in out.stdout  # not the temp folder, gone after
    assert {n["node_id"][:8] for n in d["cluster"]["nodes"]} == {_head(c), _node2(c)}
    assert "Ray 2.60.0 at " in out.stderr and "2 node(s)" in out.stderr
    text = _rl(cluster, "diagnose", "--ray-address", c.dashboard_url)
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("ROOT CAUSE"))
    assert "CUDA out of memory" in lines[at] and f"{_node2(c)}__TrainWorker-pid" in lines[at + 1]
    below = "\n".join(lines[at:])
    assert "Caused by the root" in below and "A Ray actor died" in below.split("Caused by the root", 1)[1]
    assert _state(c) == before  # read-only: no job, actor or node changed


def test_the_gcs_address_works_as_the_dashboards(cluster: dict[str, Any]) -> None:
    c = cluster["cluster"]
    out = _rl(cluster, "diagnose", "--ray-address", c.gcs_address, "--json", label="diagnose --ray-address (GCS)")
    assert out.returncode == 0, out.stderr[-2000:]
    d = json.loads(out.stdout)
    assert d["findings"][d["root"]]["id"] == "cuda-oom"
    assert f"Ray 2.60.0 at {c.gcs_address}" in out.stderr


def test_ask_offline_answers_with_the_second_nodes_oom_and_the_cascade(cluster: dict[str, Any]) -> None:
    c = cluster["cluster"]
    out = _rl(cluster, "ask", "why did my run die?", "--ray-address", c.dashboard_url, "--offline",
              label="ask --ray-address --offline")
    assert out.returncode == 0, out.stderr[-2000:]
    first = out.stdout.splitlines()[0]
    assert first.startswith("From the log: CUDA out of memory")
    assert "It came first: RolloutPeer pid " in first and "reported the loss of a peer" in first
    sources = out.stdout.split("Sources:", 1)[1]
    assert f"node-127.0.0.1-{_node2(c)}__TrainWorker-pid" in sources.splitlines()[1]


def test_watch_alerts_once_while_it_re_reads_the_cluster(cluster: dict[str, Any]) -> None:
    c = cluster["cluster"]
    started = time.perf_counter()
    proc = subprocess.Popen([*RLMEDIC, "watch", "--ray-address", c.dashboard_url, "--interval", "1"],
                            env=cluster["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = ""
        while "rlmedic watch: following" not in seen:  # synced once and following: then several re-reads
            line = proc.stderr.readline()
            assert line, f"watch ended early: {seen}"
            seen += line
        time.sleep(6)
        proc.send_signal(signal.SIGTERM)
        stdout, rest = proc.communicate(timeout=60)
        stderr = seen + rest
    finally:
        if proc.poll() is None:
            proc.kill()
    TIMES["watch run (until stopped)"] = time.perf_counter() - started
    assert proc.returncode == 0, stderr[-2000:]
    assert "rlmedic watch: 1 alert(s)" in stderr
    assert stdout.count("rlmedic watch: the run failed") == 1 and "(cuda-oom," in stdout
    assert f"{_node2(c)}__TrainWorker-pid" in stdout
    once = _rl(cluster, "watch", "--ray-address", c.dashboard_url, "--once")
    assert once.returncode == 1 and "rlmedic watch: 1 alert(s)" in once.stderr


def test_bad_addresses_are_one_line_and_exit_2(cluster: dict[str, Any]) -> None:
    from cluster_fixture import free_port

    port = free_port()
    for args in (["diagnose", "--ray-address", f"127.0.0.1:{port}"], ["ask", "q", "--offline", "--ray-address", f"http://127.0.0.1:{port}"],
                 ["watch", "--ray-address", f"127.0.0.1:{port}", "--once"]):
        out = _rl(cluster, *args, timeout=120)
        assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, (args, out.stderr)
        assert "cannot reach the" in out.stderr
    gone = _rl(cluster, "diagnose", "--ray-address", cluster["cluster"].dashboard_url, "--job", "raysubmit_none")
    assert gone.returncode == 2 and "--job raysubmit_none: no such job" in gone.stderr


def test_a_gcs_address_read_by_another_ray_version_is_one_line(cluster: dict[str, Any]) -> None:
    """Ray's GCS client must match the cluster's version: a client reporting another version is refused."""
    c = cluster["cluster"]
    code = ("import ray; ray.__version__ = '2.40.0'\n"
            "from rlmedic.errors import UserError\nfrom rlmedic.tools.cluster import collect\n"
            f"try:\n    collect({c.gcs_address!r})\nexcept UserError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=cluster["env"], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == (f"--ray-address {c.gcs_address}: the cluster runs Ray 2.60.0, this environment Ray "
                                  "2.40.0; install the same version or pass the dashboard's http://HOST:PORT")


def test_no_temp_folder_is_left_behind_and_nothing_left_loopback(cluster: dict[str, Any]) -> None:
    import tempfile

    left = [p for p in Path(tempfile.gettempdir()).glob("rlmedic-ray-*") if p.stat().st_mtime >= cluster["started"]]
    assert left == []  # every command removed the folder it synced into
    sampler = cluster["sampler"]
    sampler.sample()
    assert sampler.samples > 10
    assert sampler.bad == [], "connections outside 127.0.0.0/8:\n" + "\n".join(sampler.bad)
