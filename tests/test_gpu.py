"""GPU snapshots: the provider seam, recorded NVML snapshots, no-GPU answers, process classification."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ANYWHERE, FIXTURES
from rlmedic.errors import UserError
from rlmedic.tools.gpu.snapshot import (
    NO_GPU_STATUSES,
    STATUS_NO_LIBRARY,
    ROLE_OTHER,
    ROLE_SGLANG,
    ROLE_TRAINER,
    ROLE_UNKNOWN,
    FileProvider,
    GpuProcess,
    GpuSnapshot,
    NvmlProvider,
    assess_leftover,
    classify_role,
    decode_clocks_event_reasons,
    gpu_snapshot,
    load_snapshot,
    save_snapshot,
)
from rlmedic.ui.cli import app
from typer.testing import CliRunner

GPU = FIXTURES / "gpu"
runner = CliRunner()


# --------------------------------------------------------------------------- recorded snapshots


def test_recorded_snapshot_loads_with_nvml_units() -> None:
    snap = load_snapshot(GPU / "h100x8_running.json", confinement=ANYWHERE)
    assert snap.has_gpus and len(snap.gpus) == 8 and snap.source == "file:h100x8_running.json"
    g = snap.gpus[0]
    assert g.name == "NVIDIA H100 80GB HBM3" and g.compute_capability == (9, 0) and g.sm == 90
    assert g.memory_total == 81559 * 2**20 and g.memory_used + g.memory_free == g.memory_total
    assert g.power_limit == 700_000  # mW, as NVML reports
    assert snap.cuda_version == "12.8"
    assert snap.gpus[5].ecc_uncorrected_volatile == 2
    assert snap.gpus[6].clocks_event_reason_names == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    roles = [p.role for g in snap.gpus for p in g.processes]
    assert roles == [ROLE_SGLANG] * 4 + [ROLE_TRAINER] * 4
    assert not snap.leftovers()
    assert snap.gpus[0].processes[0].age_s == 3600


def test_leftovers_are_flagged_with_a_reason() -> None:
    snap = load_snapshot(GPU / "a40_leftovers.json", confinement=ANYWHERE)
    flagged = {p.pid: p.leftover_reason for _g, p in snap.leftovers()}
    assert set(flagged) == {4121, 4388}
    assert "re-parented to PID 1" in flagged[4121]
    assert "pid 4200" in flagged[4388]


@pytest.mark.parametrize("name", ["a40_idle", "a40_leftovers", "rtx5090", "h100x8_running", "h200_idle", "no_gpu"])
def test_snapshot_round_trips_through_json(name: str, tmp_path: Path) -> None:
    snap = load_snapshot(GPU / f"{name}.json", confinement=ANYWHERE)
    out = save_snapshot(snap, tmp_path / "again.json")
    again = load_snapshot(out, confinement=ANYWHERE)
    assert again.to_dict() | {"source": ""} == snap.to_dict() | {"source": ""}


def test_no_gpu_snapshot_is_a_normal_answer() -> None:
    snap = load_snapshot(GPU / "no_gpu.json", confinement=ANYWHERE)
    assert snap.status in NO_GPU_STATUSES and not snap.has_gpus and snap.gpus == []


def test_bad_snapshot_files_are_user_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_snapshot(bad, confinement=ANYWHERE)
    bad.write_text(json.dumps({"version": 99}))
    with pytest.raises(UserError, match="version 99"):
        load_snapshot(bad, confinement=ANYWHERE)
    bad.write_text(json.dumps({"gpus": [{"index": "x"}]}))
    with pytest.raises(UserError, match="not a valid GPU snapshot"):
        load_snapshot(bad, confinement=ANYWHERE)
    bad.write_text("[]")
    with pytest.raises(UserError, match="JSON object"):
        load_snapshot(bad, confinement=ANYWHERE)
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"version": 1, "status": "ok", "gpus": []}))
    assert load_snapshot(empty, confinement=ANYWHERE).status == "no_devices"


def test_save_refuses_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "s.json"
    target.write_text("mine")
    with pytest.raises(UserError, match="already exists"):
        save_snapshot(load_snapshot(GPU / "a40_idle.json", confinement=ANYWHERE), target)
    assert target.read_text() == "mine"


# --------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("name", "cmdline", "role"),
    [
        ("python3", "python3 -m sglang.launch_server --model-path m --port 30000", ROLE_SGLANG),
        ("sglang::scheduler_TP0", "sglang::scheduler_TP0", ROLE_SGLANG),
        ("ray::SGLangEngine", "ray::SGLangEngine.init", ROLE_SGLANG),
        ("ray::FSDPPPOActor", "ray::FSDPPPOActor.train_batch", ROLE_TRAINER),
        ("python", "/usr/bin/python /opt/ray/default_worker.py --node-ip-address 10.0.0.2", ROLE_TRAINER),
        ("torchrun", "torchrun --nproc_per_node 8 examples/math/gsm8k_rl.py --config c.yaml", ROLE_TRAINER),
        ("python3", "python3 -m areal.infra.rpc.rpc_server --rank 0", ROLE_TRAINER),
        ("python3", "python3 train_async.py --actor-num-nodes 1", ROLE_TRAINER),
        ("python3", "python3 -m jupyter lab", ROLE_OTHER),
        ("Xorg", "/usr/lib/xorg/Xorg :0", ROLE_OTHER),
        ("", "", ROLE_UNKNOWN),
    ],
)
def test_classify_role(name: str, cmdline: str, role: str) -> None:
    assert classify_role(name, cmdline) == role


def _proc(**kw) -> GpuProcess:
    base = dict(pid=10, name="python3", cmdline="python3 -m sglang.launch_server", ppid=99, parent_alive=True,
                status="running")
    base.update(kw)
    proc = GpuProcess(**base)
    proc.role = classify_role(proc.name, proc.cmdline)
    return proc


def test_assess_leftover_signs() -> None:
    assert assess_leftover(_proc(), ray_running=True) == (False, "")
    assert assess_leftover(_proc(status="zombie"), ray_running=True)[0]
    assert assess_leftover(_proc(parent_alive=False), ray_running=True)[0]
    assert assess_leftover(_proc(ppid=1, parent_alive=None), ray_running=True)[0]
    ray_worker = _proc(name="ray::FSDPPPOActor", cmdline="ray::FSDPPPOActor.train_batch", ppid=50)
    assert assess_leftover(ray_worker, ray_running=True) == (False, "")
    assert assess_leftover(ray_worker, ray_running=False)[0]
    # a notebook holding memory is not "leftover" from a run, and invisible pids are not judged
    assert assess_leftover(_proc(name="python3", cmdline="python3 -m jupyter lab", parent_alive=False), True)[0] is False
    assert assess_leftover(_proc(visible=False, status="zombie"), True)[0] is False


def test_decode_clocks_event_reasons() -> None:
    assert decode_clocks_event_reasons(0) == []
    assert decode_clocks_event_reasons(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]


# --------------------------------------------------------------------------- the live provider


def test_live_provider_answers_on_any_machine() -> None:
    """On this machine (GPU or not) the live provider returns a snapshot, never raises."""
    import ctypes.util

    snap = gpu_snapshot()
    if ctypes.util.find_library("nvidia-ml") is None:  # no driver on this machine (CI): NVML's library is missing
        assert snap.status == STATUS_NO_LIBRARY and not snap.has_gpus, snap.status
    else:  # a GPU machine: NVML answers with devices, or says why not
        assert snap.status == "ok" or snap.status in NO_GPU_STATUSES, snap.status
    assert json.loads(json.dumps(snap.to_dict()))["version"] == 1
    if not snap.has_gpus:
        assert snap.message


class FakeNvml:
    """The slice of pynvml NvmlProvider uses, returning NVML's own shapes (bytes, mW, tuples)."""

    class NVMLError(Exception):
        pass

    class NVMLError_LibraryNotFound(NVMLError):
        pass

    class NVMLError_DriverNotLoaded(NVMLError):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_CLOCK_SM = 1

    def __init__(self, init_error: type[Exception] | None = None, devices: int = 1) -> None:
        self.init_error = init_error
        self.devices = devices
        self.shutdown = False

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error("boom")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.127.08"

    def nvmlSystemGetNVMLVersion(self) -> bytes:
        return b"12.550.127.08"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA A40"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:08x}-0000-0000-0000-000000000000"

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=b"00000000:18:00.0")

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return (8, 6)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=48305799168, used=1048576, free=48305799168 - 1048576)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=3, memory=1)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 33

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 28540

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 300000

    def nvmlDeviceGetEccMode(self, h: int) -> tuple[int, int]:
        raise self.NVMLError_NotSupported()

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:  # pragma: no cover
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return 0x1

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 210

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return 1740

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        # pid 1 is always there; 2**64-1 is NVML_VALUE_NOT_AVAILABLE
        return [SimpleNamespace(pid=1, usedGpuMemory=2**64 - 1)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return []


@pytest.mark.parametrize(
    ("error", "status"),
    [(FakeNvml.NVMLError_LibraryNotFound, "no_library"), (FakeNvml.NVMLError_DriverNotLoaded, "no_driver"),
     (FakeNvml.NVMLError, "error")],
)
def test_nvml_start_failures_are_answers(error: type[Exception], status: str) -> None:
    snap = NvmlProvider(nvml=FakeNvml(init_error=error)).snapshot()
    assert snap.status == status and not snap.has_gpus and snap.message


def test_nvml_zero_devices() -> None:
    nvml = FakeNvml(devices=0)
    snap = NvmlProvider(nvml=nvml).snapshot()
    assert snap.status == "no_devices" and "no GPU" in snap.message and nvml.shutdown


def test_nvml_adapter_reads_field_shapes(tmp_path: Path) -> None:
    snap = NvmlProvider(nvml=FakeNvml()).snapshot()
    assert snap.status == "ok" and snap.driver_version == "550.127.08" and snap.nvml_version == "12.550.127.08"
    g = snap.gpus[0]
    assert (g.name, g.sm, g.pci_bus_id, g.memory_total) == ("NVIDIA A40", 86, "00000000:18:00.0", 48305799168)
    assert g.ecc_mode is None and g.ecc_uncorrected_volatile is None  # not supported -> unknown, not an error
    assert g.clocks_event_reason_names == ["gpu_idle"]
    assert g.processes[0].pid == 1 and g.processes[0].used_gpu_memory is None
    # what the live provider records, the file provider reads back identically
    path = save_snapshot(snap, tmp_path / "live.json")
    again = FileProvider(path, confinement=ANYWHERE).snapshot()
    assert again.gpus[0].to_dict() == g.to_dict()


def test_snapshot_from_dict_recomputes_derived_fields() -> None:
    data = json.loads((GPU / "a40_leftovers.json").read_text())
    data["gpus"][0]["processes"][0]["role"] = "other"
    data["gpus"][0]["processes"][0]["leftover"] = False
    snap = GpuSnapshot.from_dict(data)
    assert snap.gpus[0].processes[0].role == ROLE_SGLANG and snap.gpus[0].processes[0].leftover


# --------------------------------------------------------------------------- CLI


def test_cli_gpu_snapshot_text() -> None:
    result = runner.invoke(app, ["gpu", "--snapshot", str(GPU / "a40_leftovers.json")])
    assert result.exit_code == 0, result.output
    assert "NVIDIA A40 SM86" in result.stdout
    assert "LEFTOVER" in result.stdout and "kill 4121" in result.stdout
    assert "card:oom-initialization" in result.stdout


def test_cli_gpu_json_and_save(tmp_path: Path) -> None:
    out = tmp_path / "saved.json"
    result = runner.invoke(app, ["gpu", "--snapshot", str(GPU / "rtx5090.json"), "--save", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["gpus"][0]["sm"] == 120 and data["saved_to"] == str(out)
    assert any(a["id"] == "attention-backend" and "flashinfer" in a["message"] for a in data["advice"])
    assert load_snapshot(out, confinement=ANYWHERE).gpus[0].name == "NVIDIA GeForce RTX 5090"


def test_cli_gpu_without_a_gpu_is_not_an_error() -> None:
    result = runner.invoke(app, ["gpu", "--snapshot", str(GPU / "no_gpu.json")])
    assert result.exit_code == 0
    assert "No GPU visible" in result.stdout
    live = runner.invoke(app, ["gpu", "--json"])
    assert live.exit_code == 0 and json.loads(live.stdout)["version"] == 1


def test_cli_gpu_bad_snapshot_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["gpu", "--snapshot", str(tmp_path / "missing.json")])
    assert result.exit_code == 2 and "no such file" in result.stderr


@pytest.mark.parametrize(
    ("gpus", "field"),
    [
        ([{"index": 0, "processes": [{"pid": "x", "used_gpu_memory": 1}]}], r"gpus\[0\]\.processes\[0\]\.pid"),
        ([{"index": 0, "processes": [{"pid": 1, "used_gpu_memory": "lots"}]}], "used_gpu_memory"),
        ([{"index": 0, "memory_total": 1, "processes": [{"pid": 1, "create_time": "yesterday"}]}], "create_time"),
        ([{"name": "H100"}], r"gpus\[0\]\.index is missing"),
        ([{"index": 0, "compute_capability": "9.0"}], "compute_capability"),
        ([{"index": 0, "temperature": "hot"}], "temperature"),
        ([{"index": 0, "ecc_mode": "yes"}], "ecc_mode"),
        ([{"index": 0, "processes": {"pid": 1}}], "processes must be a list"),
        ([1, 2], r"gpus\[0\] must be an object"),
        ({"a": 1}, "gpus must be a list"),
    ],
)
def test_malformed_snapshot_fields_are_named_user_errors(tmp_path: Path, gpus: object, field: str) -> None:
    """Hand-edited or foreign snapshot files used to crash later (sum() over a str, .get on an int)."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "gpus": gpus}))
    with pytest.raises(UserError, match=field):
        load_snapshot(bad, confinement=ANYWHERE)
    result = runner.invoke(app, ["gpu", "--snapshot", str(bad)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.output


def test_loaded_snapshot_is_redacted(tmp_path: Path) -> None:
    """A snapshot saved elsewhere (older version, hand-made) may carry secrets in process command lines."""
    data = json.loads((GPU / "a40_leftovers.json").read_text())
    data["gpus"][0]["processes"][0]["cmdline"] += " --api-key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"
    data["hostname"] = "https://trainer:s3cr3tPassw0rd@head-node"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    snap = load_snapshot(path, confinement=ANYWHERE)
    assert snap.gpus[0].processes[0].role == ROLE_SGLANG  # still classified
    for args in (["gpu", "--snapshot", str(path)], ["gpu", "--snapshot", str(path), "--json"]):
        out = runner.invoke(app, args).stdout
        assert "[REDACTED]" in out
        assert not any(s in out for s in ("sk-proj-AbCd", "hf_AbCdEf", "s3cr3tPassw0rd")), out
