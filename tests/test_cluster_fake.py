"""A Ray cluster's logs and deaths through the dashboard's state API, against a fake dashboard on loopback.

The fake (``tests/fake_ray_dashboard.py``) serves rows, listings and log files recorded from a real
two-node Ray 2.60 cluster whose job failed as the slow test's does (``test_cluster_real.py``): a
TrainWorker on the second node ran out of CUDA memory, its peer on the head died waiting for it.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_ray_dashboard import FakeDashboard, FakeState, many_nodes, recorded  # noqa: E402

from rlmedic.confine import Confinement  # noqa: E402
from rlmedic.errors import UserError  # noqa: E402
from rlmedic.tools.cluster import Limits, Mirror, collect  # noqa: E402
from rlmedic.tools.cluster.state import STATE_FILE  # noqa: E402
from rlmedic.tools.logs.diagnose import diagnose  # noqa: E402

_REC = recorded()
HEAD = next(n["node_id"] for n in _REC.nodes if n["is_head_node"])[:8]
NODE2 = next(n["node_id"] for n in _REC.nodes if not n["is_head_node"])[:8]  # the TrainWorker's, the CUDA OOM
TRAIN = next(a for a in _REC.actors if a["class_name"] == "TrainWorker")
PEER = next(a for a in _REC.actors if a["class_name"] == "RolloutPeer")
SUPERVISOR_PID = next(a["pid"] for a in _REC.actors if a["class_name"] == "JobSupervisor")
JOB_ID, SID = _REC.jobs[0]["job_id"], _REC.jobs[0]["submission_id"]


def _file(node8: str, pid: int, stream: str) -> str:
    nid = next(n for n in _REC.files if n.startswith(node8))
    return next(n for n in _REC.files[nid] if n.startswith("worker-") and n.endswith(f"-{pid}.{stream}"))


def _diagnose(folder: Path):
    return diagnose([str(folder)], confinement=Confinement.for_paths([folder]))


def test_the_job_logs_of_every_node_land_named_by_node_ip_actor_and_file(tmp_path: Path) -> None:
    state = recorded()
    with FakeDashboard(state) as url:
        result = collect(url, folder=tmp_path / "ray")
    names = sorted(str(p.relative_to(tmp_path / "ray")) for p in (tmp_path / "ray").rglob("*") if p.is_file())
    oom = f"node-127.0.0.1-{NODE2}__TrainWorker-pid{TRAIN['pid']}__{_file(NODE2, TRAIN['pid'], 'err')}"
    # the peer's file reads job ffffffff: matched to its actor (the job's) by node and pid
    peer = f"node-127.0.0.1-{HEAD}__RolloutPeer-pid{PEER['pid']}__{_file(HEAD, PEER['pid'], 'err')}"
    assert "-ffffffff-" in peer and PEER["job_id"] == JOB_ID
    assert oom in names and peer in names
    assert f"node-127.0.0.1-{HEAD}__job-driver-{SID}.log" in names
    assert STATE_FILE in names
    # the job supervisor (Ray's own actor, job 01000000) and system logs are not the job's
    assert not any(f"-{SUPERVISOR_PID}." in n or "raylet" in n or "python-core" in n for n in names)
    assert (tmp_path / "ray" / oom).read_bytes() == state.files[next(n["node_id"] for n in state.nodes if n["node_id"].startswith(NODE2))][oom.rsplit("__", 1)[1]]
    # colour codes of the driver's log are dropped by the server (filter_ansi_code=true)
    raw = next(f[f"job-driver-{SID}.log"] for f in state.files.values() if f"job-driver-{SID}.log" in f)
    driver = (tmp_path / "ray" / f"node-127.0.0.1-{HEAD}__job-driver-{SID}.log").read_bytes()
    assert b"\x1b[" in raw and b"\x1b[" not in driver and b"Running entrypoint for job" in driver
    # the driver's echoes of workers whose own files are here are left out (the root belongs on the worker's file)
    assert f"(TrainWorker pid={TRAIN['pid']})".encode() in raw and f"(TrainWorker pid={TRAIN['pid']})".encode() not in driver
    assert b"ray.exceptions.ActorDiedError" in driver  # the driver's own traceback stays
    assert result.job and result.job["status"] == "FAILED" and len(result.nodes) == 2
    # read-only: GETs only, and the listing asked per node
    assert {m for m, _, _ in state.requests} == {"GET"}
    assert sorted(q["node_id"][0][:8] for m, p, q in state.requests if p == "/api/v0/logs") == sorted([NODE2, HEAD])


def test_ray_deaths_are_timestamped_lines_in_rays_words(tmp_path: Path) -> None:
    with FakeDashboard(recorded()) as url:
        collect(url, folder=tmp_path)
    lines = (tmp_path / STATE_FILE).read_text().splitlines()
    train = next(line for line in lines if "actor TrainWorker" in line)
    peer = next(line for line in lines if "actor RolloutPeer" in line)
    assert f"node 127.0.0.1 ({NODE2})" in train and f"pid {TRAIN['pid']}," in train and "Worker exit type: SYSTEM_ERROR" in train
    assert lines.index(train) < lines.index(peer)  # ordered by the workers' end times
    assert train[:4].isdigit() and train[4] == "-"  # timestamped, so causality can order it
    assert any(f"job {SID} FAILED" in line for line in lines)
    assert not any("JobSupervisor" in line for line in lines)  # an intended exit is no death


def test_the_folder_diagnoses_to_the_second_nodes_oom_with_the_peer_as_its_cascade(tmp_path: Path) -> None:
    with FakeDashboard(recorded()) as url:
        collect(url, folder=tmp_path)
    d = _diagnose(tmp_path)
    root = d.root_finding
    assert root is not None and root.id == "cuda-oom"
    assert f"node-127.0.0.1-{NODE2}__TrainWorker-pid{TRAIN['pid']}__" in root.file and root.file.endswith(f"-{TRAIN['pid']}.err")
    cascades = [f for f in d.findings if f.root == d.root and f is not root]
    assert any(f.id == "ray-actor-died" for f in cascades)
    # the peer on the head, named in the cascade by its process, not by its 120-character file name
    assert f"RolloutPeer pid {PEER['pid']} on 127.0.0.1" in root.summary and "__" not in root.summary


def test_the_cli_shows_the_synced_files_under_ray_and_its_json_says_what_was_read() -> None:
    """The temporary folder is gone after the command: findings name ``ray/<file>``, and ``--json`` carries
    the sync summary (nodes, job, files) that stderr printed."""
    import json

    with FakeDashboard(recorded()) as url:
        text = subprocess.run([sys.executable, "-m", "rlmedic", "diagnose", "--ray-address", url],
                              capture_output=True, text=True, timeout=120)
        as_json = subprocess.run([sys.executable, "-m", "rlmedic", "diagnose", "--json", "--ray-address", url],
                                 capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    assert f"  at ray/node-127.0.0.1-{NODE2}__TrainWorker-pid{TRAIN['pid']}__" in text.stdout
    assert "rlmedic-ray-" not in text.stdout + as_json.stdout
    d = json.loads(as_json.stdout)
    assert d["findings"][d["root"]]["file"].startswith("ray/node-")
    cluster = d["cluster"]
    assert cluster["job"]["submission_id"] == SID and len(cluster["nodes"]) == 2 and "folder" not in cluster
    assert any(f["local"].endswith(f"-{TRAIN['pid']}.err") for f in cluster["files"])


def test_echoes_of_a_worker_whose_file_is_gone_stay_in_the_drivers_copy(tmp_path: Path) -> None:
    state = recorded()
    nid = next(n for n in state.listings if n.startswith(NODE2))  # the second node's files are gone (node lost)
    state.listings[nid] = {k: [n for n in v if not n.startswith("worker-")] for k, v in state.listings[nid].items()}
    with FakeDashboard(state) as url:
        collect(url, folder=tmp_path)
    driver = next(tmp_path.glob("*__job-driver-*.log")).read_bytes()
    assert f"(TrainWorker pid={TRAIN['pid']}) torch.OutOfMemoryError".encode() in driver
    assert f"(RolloutPeer pid={PEER['pid']})".encode() not in driver  # its own file is here
    d = _diagnose(tmp_path)
    assert d.root_finding is not None and d.root_finding.id == "cuda-oom" and "__job-driver-" in d.root_finding.file


def test_an_oom_kill_ray_recorded_is_evidence_and_a_dead_node_is_named(tmp_path: Path) -> None:
    state = recorded()
    # the memory monitor SIGKILLs the trainer: nothing in its own log, only Ray's record says why
    nid = next(n["node_id"] for n in state.nodes if n["node_id"].startswith(NODE2))
    for name in list(state.files[nid]):
        if name.endswith((f"-{TRAIN['pid']}.err", f"-{TRAIN['pid']}.out")):
            state.files[nid][name] = b"20261129-00:08:16.867 TrainWorker INFO: train step 1\n"
    for files in state.files.values():  # nor in the driver's copy of its lines
        for name in list(files):
            if name.startswith("job-driver-"):
                files[name] = b"2026-11-29 00:08:06,430\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
    for a in state.actors:
        if a["class_name"] == "TrainWorker":
            a["death_cause"]["actor_died_error_context"]["error_message"] = (
                "The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY "
                "Worker exit detail: Task was killed due to the node running low on memory. Memory on the node "
                "(IP: 127.0.0.1, ID: 0336cd47) where the task was running was 22.80GB / 24.00GB (0.95), "
                "which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 4d1013544ecf) because "
                "it was the most recently scheduled task.")
    for w in state.workers:
        if w["pid"] == TRAIN["pid"]:
            w["exit_type"] = "NODE_OUT_OF_MEMORY"
    dead = copy.deepcopy(state.nodes[0])
    dead.update(node_id="dead0000" + dead["node_id"][8:], node_ip="10.0.0.9", state="DEAD",
                state_message="Health check failed due to missing heartbeats.", end_time_ms=1795910900000)
    state.nodes.append(dead)
    with FakeDashboard(state) as url:
        result = collect(url, folder=tmp_path)
    text = (tmp_path / STATE_FILE).read_text()
    # the node died before the job started: named among what could not be read, not as this job's failure
    assert "10.0.0.9" not in text
    assert any(s["file"] == "node-10.0.0.9-dead0000" and "went with it" in s["reason"] for s in result.skipped)
    d = _diagnose(tmp_path)
    assert d.root_finding is not None and d.root_finding.id == "ray-host-oom"
    assert d.root_finding.file.endswith(STATE_FILE)


def test_a_node_lost_during_the_job_is_the_root_and_its_actors_deaths_follow_from_it(tmp_path: Path) -> None:
    """The second node stops answering (preempted): its trainer's log just ends, Ray records the node dead
    and the actor dead with it; the node's loss is the root, the deaths under it."""
    state = recorded()
    nid = next(n["node_id"] for n in state.nodes if n["node_id"].startswith(NODE2))
    for name in list(state.files[nid]):
        if name.endswith((f"-{TRAIN['pid']}.err", f"-{TRAIN['pid']}.out")):
            state.files[nid][name] = b"20261129-00:08:16.867 TrainWorker INFO: train step 1\n"
    for files in state.files.values():
        for name in list(files):
            if name.startswith("job-driver-"):
                files[name] = b"2026-11-29 00:08:06,430\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
    train_end = next(w["end_time_ms"] for w in state.workers if w["pid"] == TRAIN["pid"])
    for n in state.nodes:
        if n["node_id"] == nid:
            n.update(state="DEAD", state_message="Health check failed due to missing heartbeats.",
                     end_time_ms=train_end - 500)
    for a in state.actors:
        if a["class_name"] == "TrainWorker":
            a["death_cause"]["actor_died_error_context"]["error_message"] = (
                "The actor is dead because its node has died. Node Id: " + nid)
    with FakeDashboard(state) as url:
        collect(url, folder=tmp_path)
    text = (tmp_path / STATE_FILE).read_text()
    assert f"node 127.0.0.1 ({NODE2}) is DEAD: Health check failed due to missing heartbeats." in text
    d = _diagnose(tmp_path)
    root = d.root_finding
    assert root is not None and root.id == "ray-node-died" and root.card == "ray-node-lost", [f.id for f in d.findings]
    assert any(f.id == "ray-actor-died" and f.root == d.root for f in d.findings)


def test_each_file_keeps_its_end_within_the_per_file_cap_and_the_total_cap_skips_the_rest(tmp_path: Path) -> None:
    state = many_nodes(3, workers_per_node=4, lines_per_file=5000)
    nid = state.nodes[1]["node_id"]
    name = next(n for n in state.listings[nid]["worker_err"])
    state.files[nid][name] += b"20261129-00:09:00.000 TrainWorker ERROR: the very last line\n"
    limits = Limits(per_file=64 * 1024, total=6 * 64 * 1024, parallel=4)
    with FakeDashboard(state) as url:
        result = collect(url, folder=tmp_path, limits=limits)
    got = [p for p in tmp_path.iterdir() if p.is_file() and p.name != STATE_FILE]
    # budgeted in plan order: the head's job driver (8 KB: what it leaves of its share goes on), then the .err
    # files (failed workers' would come first); the sixth .err gets what is left, the .out files nothing
    assert len(got) == 7 and all(p.stat().st_size <= 64 * 1024 for p in got)
    assert sum(1 for p in got if "__job-driver-" in p.name) == 1 and sum(1 for p in got if p.suffix == ".err") == 6
    assert sorted(p.stat().st_size for p in got if p.suffix == ".err")[0] < 60 * 1024
    assert sum(p.stat().st_size for p in got) <= limits.total
    last = next(p for p in got if p.name.endswith("__" + name)).read_bytes()
    assert last.endswith(b"the very last line\n") and last.startswith(b"20261129-")  # the end, from a whole line
    assert len([s for s in result.skipped if "total cap" in s["reason"]]) == 16 + 1 - 7
    assert all(f["cut"] for f in result.files if f["local"].endswith((".err", ".out")))


def test_job_is_picked_by_submission_or_job_id_and_an_unknown_one_is_one_line(tmp_path: Path) -> None:
    state = recorded()
    other = copy.deepcopy(state.jobs[0])
    other.update(job_id="0f000000", submission_id="raysubmit_other", status="RUNNING", start_time=1, end_time=None)
    state.jobs.append(other)
    with FakeDashboard(state) as url:
        by_id = collect(url, folder=tmp_path / "a", job=JOB_ID)
        by_sid = collect(url, folder=tmp_path / "b", job=SID)
        none = collect(url, folder=tmp_path / "c", job="raysubmit_other")
        with pytest.raises(UserError) as err:
            collect(url, folder=tmp_path / "d", job="raysubmit_nope")
    assert len(by_id.files) == len(by_sid.files) == 5
    assert none.files == []  # job 0f000000 has no actors or files here
    assert "--job raysubmit_nope: no such job" in str(err.value) and "raysubmit_other" in str(err.value)
    assert "\n" not in str(err.value)


def test_since_leaves_out_workers_that_ended_before_it(tmp_path: Path) -> None:
    state = recorded()
    with FakeDashboard(state) as url:
        # the recorded workers ended at 1795910905xxx ms; "now" is real time, far before or after
        mirror = Mirror(url, folder=tmp_path, since_minutes=1)
        result = mirror.sync()
        mirror.close()
    ended_long_ago = all(w["end_time_ms"] / 1000 < time.time() - 60 for w in state.workers if w["end_time_ms"])
    if ended_long_ago:
        assert [f for f in result.files if "worker-" in f["local"]] == []
        assert any("ended before the last 1 min" in s["reason"] for s in result.skipped)
    else:  # the machine's clock is before the recording: nothing ended "before the last minute"
        assert any("worker-" in f["local"] for f in result.files)
    with pytest.raises(UserError, match="--since"):
        Mirror("http://127.0.0.1:9", since_minutes=0)


def test_a_second_sync_appends_only_the_new_lines(tmp_path: Path) -> None:
    state = recorded()
    nid = next(n["node_id"] for n in state.nodes if n["node_id"].startswith(NODE2))
    name = _file(NODE2, TRAIN["pid"], "err")
    with FakeDashboard(state) as url, Mirror(url, folder=tmp_path) as mirror:
        mirror.sync()
        local = next(tmp_path.glob("*__" + name))
        before = local.read_bytes()
        again = mirror.sync()
        assert local.read_bytes() == before  # nothing new: nothing written
        assert sum(f["bytes"] for f in again.files) == 0
        state.append(nid, name, b"20261129-00:09:01.000 TrainWorker INFO: restarted step 2\n")
        mirror.sync()
        state_lines = (tmp_path / STATE_FILE).read_text().count("\n")
        mirror.sync()
    assert local.read_bytes() == before + b"20261129-00:09:01.000 TrainWorker INFO: restarted step 2\n"
    assert (tmp_path / STATE_FILE).read_text().count("\n") == state_lines  # each death written once


# ------------------------------------------------------------------ bad addresses --


def test_an_unreachable_address_is_one_clear_line() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        for addr in (f"http://127.0.0.1:{port}", f"127.0.0.1:{port}"):
            with pytest.raises(UserError) as err:
                collect(addr)
            msg = str(err.value)
            assert msg.startswith(f"--ray-address {addr}: cannot reach the") and "\n" not in msg


def test_a_server_that_is_not_a_ray_dashboard_or_too_old_is_one_line() -> None:
    state = recorded()
    state.version = {"version": "4", "ray_version": "2.5.1"}
    with FakeDashboard(state) as url:
        with pytest.raises(UserError, match=r"runs Ray 2\.5\.1; reading it needs Ray 2\.9"):
            collect(url)
    empty = FakeState(version={}, nodes=[], actors=[], workers=[], jobs=[], listings={}, files={})
    with FakeDashboard(empty) as url:
        with pytest.raises(UserError, match="of unknown version"):
            collect(url)
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    class Plain(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>hello</html>")

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Plain)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(UserError, match="is not a Ray dashboard"):
            collect(f"http://127.0.0.1:{srv.server_address[1]}")
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_dashboard_with_token_auth_gets_ray_auth_token_and_says_so_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = recorded()
    state.token = "s3cret-token-value"
    with FakeDashboard(state) as url:
        monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
        with pytest.raises(UserError) as err:
            collect(url, folder=tmp_path / "a")
        assert "wants Ray's auth token (set RAY_AUTH_TOKEN)" in str(err.value)
        monkeypatch.setenv("RAY_AUTH_TOKEN", state.token)
        assert len(collect(url, folder=tmp_path / "b").files) == 5


def test_a_gcs_address_without_the_ray_extra_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        # ray made unimportable in a child interpreter, as in an install without the extra
        code = (
            "import sys; sys.modules['ray'] = None; sys.modules['ray._raylet'] = None\n"
            "from rlmedic.errors import UserError\n"
            "from rlmedic.tools.cluster import collect\n"
            f"try:\n    collect('127.0.0.1:{port}')\nexcept UserError as e:\n    print(e)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().startswith(f"--ray-address 127.0.0.1:{port}: a GCS address needs the ray extra")
    assert "pip install 'rlmedic[ray]'" in out.stdout and out.stdout.count("\n") == 1


def test_cluster_log_names_cannot_leave_the_folder(tmp_path: Path) -> None:
    state = recorded()
    with FakeDashboard(state) as url, Mirror(url, folder=tmp_path / "m") as mirror:
        with pytest.raises(UserError, match="would leave"):
            mirror._append("../escape.log", b"x\n")
    assert not (tmp_path / "escape.log").exists()


# ------------------------------------------------------------------ the sampler itself --


def test_the_loopback_sampler_flags_a_socket_outside_loopback() -> None:
    """The real-cluster test fails on a non-loopback socket; here the sampler sees one (a wildcard listener)."""
    from cluster_fixture import outside_connections

    if subprocess.run(["which", "ss"], capture_output=True).returncode != 0:
        pytest.skip("ss (iproute2) is not installed")
    code = "import socket,time; s=socket.socket(); s.bind(('0.0.0.0',0)); s.listen(1); print('up', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        assert outside_connections({proc.pid}), "a 0.0.0.0 listener must count as outside loopback"
        assert outside_connections({proc.pid + 10_000_000}) == []
    finally:
        proc.kill()
        proc.wait()


def test_byte_caps_come_from_the_environment_and_a_bad_one_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMEDIC_RAY_MAX_FILE_BYTES", "65536")
    monkeypatch.setenv("RLMEDIC_RAY_MAX_BYTES", "1048576")
    assert (Limits.from_env().per_file, Limits.from_env().total) == (65536, 1048576)
    monkeypatch.setenv("RLMEDIC_RAY_MAX_BYTES", "lots")
    with pytest.raises(UserError, match="RLMEDIC_RAY_MAX_BYTES=lots: not a number of bytes"):
        Limits.from_env()


def test_sixty_four_nodes_are_listed_in_parallel_within_bounds(tmp_path: Path) -> None:
    state = many_nodes(64, workers_per_node=2, lines_per_file=50)
    state.latency_s = 0.02
    with FakeDashboard(state) as url:
        started = time.perf_counter()
        result = collect(url, folder=tmp_path, limits=Limits(per_file=16 * 1024, total=8 * 1024 * 1024))
        took = time.perf_counter() - started
    assert len(result.nodes) == 64
    assert len({f["node_id"] for f in result.files}) == 64  # every worker node has the job's files, the head its driver
    # 64 listings + 252 tails at 20 ms each take 6.3 s one after another; in parallel well under that
    assert took < 10, took
