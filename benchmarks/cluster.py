"""Reading a 64-node Ray cluster's job logs (``--ray-address``) against a fake dashboard on loopback.

The fake (``tests/fake_ray_dashboard.py``) serves the recorded Ray 2.60 shapes cloned onto N nodes, each
with ``--workers`` actors of the job (a ``.out`` and an ``.err`` each, ``--lines`` lines) and Ray's own
system logs, and waits ``--latency`` seconds before every answer (a dashboard across a network).

Figures, each next to its anchor from the same process:

* listing: the state calls plus every live node's log listing, in parallel (goal: under 10 s for 64 nodes);
  anchor: the same listing requests one after another with a plain ``httpx`` loop;
* sync: the whole mirror (listing, plan, tails of every job file within the byte caps, death records);
* CLI: a cold ``rlmedic diagnose --ray-address`` end to end; anchors: ``rlmedic --help`` (start-up) and
  ``rlmedic diagnose FOLDER`` on the same files already mirrored (what reading the cluster adds).

Run: ``.venv/bin/python benchmarks/cluster.py [--nodes 64] [--workers 8] [--lines 2000] [--latency 0.02]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_ray_dashboard import FakeDashboard, many_nodes  # noqa: E402

from rlmedic.tools.cluster.client import StateClient  # noqa: E402
from rlmedic.tools.cluster.mirror import Mirror  # noqa: E402
from rlmedic.tools.cluster.plan import nodes_from  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--latency", type=float, default=0.02)
    a = ap.parse_args()
    state = many_nodes(a.nodes, workers_per_node=a.workers, lines_per_file=a.lines)
    state.latency_s = a.latency
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2 cores)")
    with FakeDashboard(state) as url:
        import httpx

        # anchor: the same requests, one after another
        started = time.perf_counter()
        with httpx.Client(base_url=url, trust_env=False, timeout=60) as http:
            for kind in ("nodes", "jobs", "actors", "workers"):
                http.get(f"/api/v0/{kind}", params={"limit": 10000, "detail": "true"}).raise_for_status()
            for node in state.nodes:
                http.get("/api/v0/logs", params={"node_id": node["node_id"]}).raise_for_status()
        sequential = time.perf_counter() - started

        folder = tempfile.mkdtemp(prefix="rlmedic-bench-")
        with Mirror(url, folder=folder) as mirror:
            started = time.perf_counter()
            with StateClient(url) as c:
                nodes = nodes_from(c.nodes())
                c.jobs(), c.actors(), c.workers()
            listings, _ = mirror.list_logs(nodes)
            listing = time.perf_counter() - started
            files = sum(len(v) for lst in listings.values() for v in lst.values())

            result = mirror.sync()
        print(f"listing {a.nodes} nodes ({files} files, {a.latency * 1000:.0f} ms per answer): {listing:.2f} s; "
              f"anchor one after another {sequential:.2f} s (ratio {listing / sequential:.2f})")
        print(f"sync: {result.seconds:.2f} s for {len(result.files)} files, {result.bytes / 1e6:.1f} MB "
              f"({', '.join(f'{k} {v:.2f} s' for k, v in result.timings.items())}); "
              f"skipped at the caps: {sum(1 for s in result.skipped if 'cap' in s['reason'])}; "
              f"ratio to the sequential listing {result.seconds / sequential:.2f}")

        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rlmedic", "--help"], env=env, capture_output=True, check=True)
        help_s = time.perf_counter() - started
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "rlmedic", "diagnose", "--ray-address", url], env=env,
                             capture_output=True, text=True)
        cli_s = time.perf_counter() - started
        ok = "ROOT CAUSE" in out.stdout or "No error found" in out.stdout
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rlmedic", "diagnose", folder], env=env, capture_output=True)
        local_s = time.perf_counter() - started
        print(f"CLI diagnose --ray-address: {cli_s:.2f} s (exit {out.returncode}, report {'ok' if ok else 'MISSING'}); "
              f"anchors: rlmedic --help {help_s:.2f} s (ratio {cli_s / help_s:.1f}), diagnose of the same files "
              f"already on disk {local_s:.2f} s (ratio {cli_s / local_s:.2f})")
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
