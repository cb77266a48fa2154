"""GPU state through NVML, behind one seam: a :class:`SnapshotProvider`.

:class:`NvmlProvider` reads the live machine (``pynvml`` from nvidia-ml-py, imported
lazily; host process details from psutil); :class:`FileProvider` loads a snapshot a user
saved on the cluster with ``rlmedic gpu --save F``. Everything downstream (advice,
config checks, tests) takes a :class:`GpuSnapshot` and never talks to NVML itself.

Field units follow NVML: memory in bytes, power in milliwatts, temperatures in °C,
utilisation in percent. "No GPU" (no library, no driver, zero devices) is a normal
snapshot with ``status`` set, not an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from rlmedic.bounded import load_json
from rlmedic.confine import Confinement, redact, write_new_text
from rlmedic.errors import UserError

SNAPSHOT_VERSION = 1
MIB = 1024**2
GIB = 1024**3

#: NVML clocks-event (formerly "throttle") reason bits, as in nvml.h.
CLOCKS_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: Reasons that mean the GPU is being held back by heat or power, worth a warning.
SLOWDOWN_REASONS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})

STATUS_OK = "ok"
STATUS_NO_LIBRARY = "no_library"  # NVMLError_LibraryNotFound: no libnvidia-ml (no driver installed)
STATUS_NO_DRIVER = "no_driver"  # NVMLError_DriverNotLoaded
STATUS_NO_DEVICES = "no_devices"  # driver fine, zero GPUs visible (e.g. CUDA_VISIBLE_DEVICES, container)
STATUS_ERROR = "error"  # NVML answered with another error; message says which
NO_GPU_STATUSES = frozenset({STATUS_NO_LIBRARY, STATUS_NO_DRIVER, STATUS_NO_DEVICES})

ROLE_SGLANG = "sglang"
ROLE_TRAINER = "trainer"
ROLE_OTHER = "other"
ROLE_UNKNOWN = "unknown"  # NVML reported the pid, but this host/namespace cannot see it


def decode_clocks_event_reasons(mask: int | None) -> list[str]:
    """Names of the bits set in an NVML clocks-event reason mask."""
    if not mask:
        return []
    return [name for bit, name in CLOCKS_EVENT_REASONS.items() if mask & bit]


@dataclass
class GpuProcess:
    """A process holding memory on a GPU: NVML's view plus what psutil could see."""

    pid: int
    used_gpu_memory: int | None = None  # bytes; None when NVML cannot tell (e.g. no permission, MIG)
    type: str = "compute"  # compute | graphics
    visible: bool = True  # psutil could see the pid (false across PID namespaces)
    name: str = ""
    cmdline: str = ""  # redacted, truncated
    username: str = ""
    create_time: float | None = None  # epoch seconds
    ppid: int | None = None
    parent_alive: bool | None = None
    status: str = ""  # psutil status: running, sleeping, zombie, ...
    # Derived (recomputed by :func:`classify_processes` on load):
    role: str = ROLE_UNKNOWN
    age_s: float | None = None
    leftover: bool = False
    leftover_reason: str = ""

    @property
    def used_gpu_memory_mib(self) -> float | None:
        return None if self.used_gpu_memory is None else self.used_gpu_memory / MIB

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GpuInfo:
    """One device, in NVML's units."""

    index: int
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    compute_capability: tuple[int, int] | None = None
    memory_total: int = 0  # bytes
    memory_used: int = 0
    memory_free: int = 0
    utilization_gpu: int | None = None  # percent
    utilization_memory: int | None = None
    temperature: int | None = None  # °C
    power_usage: int | None = None  # mW
    power_limit: int | None = None  # mW (enforced)
    ecc_mode: bool | None = None  # None when the board has no ECC
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    clocks_event_reasons: int | None = None  # raw NVML bitmask
    sm_clock: int | None = None  # MHz
    sm_clock_max: int | None = None
    processes: list[GpuProcess] = field(default_factory=list)

    @property
    def sm(self) -> int | None:
        """Compute capability as an SM number: (9, 0) -> 90, (12, 0) -> 120."""
        if not self.compute_capability:
            return None
        major, minor = self.compute_capability
        return major * 10 + minor

    @property
    def memory_total_gib(self) -> float:
        return self.memory_total / GIB

    @property
    def clocks_event_reason_names(self) -> list[str]:
        return decode_clocks_event_reasons(self.clocks_event_reasons)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["compute_capability"] = list(self.compute_capability) if self.compute_capability else None
        data["processes"] = [p.to_dict() for p in self.processes]
        data["clocks_event_reason_names"] = self.clocks_event_reason_names
        data["sm"] = self.sm
        data["memory_total_mib"] = round(self.memory_total / MIB)
        data["memory_used_mib"] = round(self.memory_used / MIB)
        data["memory_free_mib"] = round(self.memory_free / MIB)
        return data


@dataclass
class GpuSnapshot:
    """The GPUs of one host at one moment, or the reason there are none."""

    status: str = STATUS_OK
    message: str = ""
    taken_at: float = 0.0  # epoch seconds
    hostname: str = ""
    driver_version: str = ""
    cuda_driver_version: int | None = None  # e.g. 12040 for CUDA 12.4
    nvml_version: str = ""
    ray_running: bool | None = None  # a raylet runs on this host (None: not checked)
    gpus: list[GpuInfo] = field(default_factory=list)
    source: str = "nvml"
    version: int = SNAPSHOT_VERSION

    @property
    def has_gpus(self) -> bool:
        return self.status == STATUS_OK and bool(self.gpus)

    @property
    def cuda_version(self) -> str:
        if not self.cuda_driver_version:
            return ""
        return f"{self.cuda_driver_version // 1000}.{self.cuda_driver_version % 1000 // 10}"

    def leftovers(self) -> list[tuple[GpuInfo, GpuProcess]]:
        return [(g, p) for g in self.gpus for p in g.processes if p.leftover]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "status": self.status,
            "message": self.message,
            "taken_at": self.taken_at,
            "taken_at_iso": datetime.fromtimestamp(self.taken_at, UTC).isoformat() if self.taken_at else "",
            "hostname": self.hostname,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "cuda_version": self.cuda_version,
            "nvml_version": self.nvml_version,
            "ray_running": self.ray_running,
            "source": self.source,
            "gpus": [g.to_dict() for g in self.gpus],
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "snapshot") -> GpuSnapshot:
        """Rebuild a snapshot from :meth:`to_dict` output; derived fields are recomputed.

        A snapshot file comes from anywhere (another machine, an older version, a hand edit):
        every field is type-checked (a bad one is a :class:`UserError` naming it) and the
        text fields are redacted again.
        """
        if not isinstance(data, dict):
            raise UserError(f"{where}: a GPU snapshot must be a JSON object")
        version = data.get("version", SNAPSHOT_VERSION)
        if version != SNAPSHOT_VERSION:
            raise UserError(f"{where}: snapshot version {version} is not supported (expected {SNAPSHOT_VERSION})")
        try:
            gpus = [_gpu_from_dict(g, f"gpus[{i}]") for i, g in enumerate(_list(data.get("gpus"), "gpus"))]
            fields = _typed(cls, {k: v for k, v in data.items() if k in _SNAPSHOT_FIELDS}, "")
        except (TypeError, ValueError) as exc:
            raise UserError(f"{where}: not a valid GPU snapshot ({exc})") from exc
        snapshot = cls(**{"status": STATUS_OK, "source": "file", **fields, "gpus": gpus})
        snapshot.message, snapshot.hostname = redact(snapshot.message), redact(snapshot.hostname)
        if snapshot.status == STATUS_OK and not snapshot.gpus:
            snapshot.status = STATUS_NO_DEVICES
            snapshot.message = snapshot.message or "no GPU in the snapshot"
        classify_processes(snapshot)
        return snapshot


#: Largest magnitude a snapshot number may have: above any byte count, clock or Unix time
#: (2**63 bytes is 8 EiB), below what datetime and int conversions overflow on.
MAX_MAGNITUDE = 2.0**63
#: Unix-time fields, and the last second of year 9999 (what ``datetime`` can show).
TIME_FIELDS = ("taken_at", "create_time")
MAX_TIME = 253402300799.0


def _convert(annotation: str, value: Any, where: str) -> Any:
    """``value`` as the dataclass field type ``annotation`` (int, float, str, bool, optionally ``| None``)."""
    if value is None:
        if "None" in annotation:
            return None
        raise ValueError(f"{where} is missing")
    base = annotation.split("|")[0].strip()
    if base == "bool":
        if isinstance(value, bool):
            return value
        raise ValueError(f"{where}: {value!r} is not true/false")
    if base in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"{where}: {value!r} is not a number")
        if isinstance(value, str) and len(value) > 100:
            raise ValueError(f"{where}: {value[:20]!r}... is not a number")
        try:
            number = float(value)
        except (ValueError, OverflowError):  # OverflowError: an int too large for a float
            raise ValueError(f"{where}: {str(value)[:40]!r} is not a number") from None
        if where.rsplit(".", 1)[-1] in TIME_FIELDS and not 0 <= number <= MAX_TIME:
            raise ValueError(f"{where}: {number!r} is not a Unix time between 1970 and 9999")
        if not math.isfinite(number) or abs(number) > MAX_MAGNITUDE:
            raise ValueError(f"{where}: {str(value)[:40]!r} is not a finite number below {MAX_MAGNITUDE:.0e}")
        return int(number) if base == "int" else number
    if base == "str":
        return str(value)
    raise ValueError(f"{where}: unsupported field type {annotation}")  # pragma: no cover - a new field type


def _typed(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    """Keyword arguments for the dataclass ``cls`` from ``data``, each converted to its field's type."""
    prefix = f"{where}." if where else ""
    fields = dataclasses.fields(cls)
    for f in fields:
        if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{prefix}{f.name} is missing")
    types = {f.name: str(f.type) for f in fields}
    return {k: _convert(types[k], v, f"{prefix}{k}") for k, v in data.items()}


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{where} must be a list")
    return value


_SNAPSHOT_FIELDS = {f.name for f in dataclasses.fields(GpuSnapshot) if f.name not in ("gpus", "version")}
_GPU_FIELDS = {f.name for f in dataclasses.fields(GpuInfo) if f.name not in ("processes", "compute_capability")}
#: recorded facts only: the derived fields (role, age, leftover) are recomputed on load
_PROC_FIELDS = {"pid", "used_gpu_memory", "type", "visible", "name", "cmdline", "username", "create_time", "ppid",
                "parent_alive", "status"}


def _gpu_from_dict(data: Any, where: str) -> GpuInfo:
    if not isinstance(data, dict):
        raise TypeError(f"{where} must be an object")
    info = GpuInfo(**_typed(GpuInfo, {k: v for k, v in data.items() if k in _GPU_FIELDS}, where))
    cc = data.get("compute_capability")
    if cc is not None:
        if not isinstance(cc, (list, tuple)) or len(cc) != 2:
            raise ValueError(f"{where}.compute_capability: {cc!r} is not [major, minor]")
        info.compute_capability = (_convert("int", cc[0], f"{where}.compute_capability"),
                                   _convert("int", cc[1], f"{where}.compute_capability"))
    for i, raw in enumerate(_list(data.get("processes"), f"{where}.processes")):
        pwhere = f"{where}.processes[{i}]"
        if not isinstance(raw, dict):
            raise TypeError(f"{pwhere} must be an object")
        proc = GpuProcess(**_typed(GpuProcess, {k: v for k, v in raw.items() if k in _PROC_FIELDS}, pwhere))
        proc.cmdline, proc.name, proc.username = redact(proc.cmdline)[:500], redact(proc.name), redact(proc.username)
        info.processes.append(proc)
    return info


# --------------------------------------------------------------------------- processes

_SGLANG_MARKERS = ("sglang", "sgl_router", "sgl-router")
_TRAINER_MARKERS = (
    "torchrun",
    "torch.distributed",
    "ray::",
    "default_worker.py",  # Ray worker processes before they set a title
    "areal",
    "slime",
    "megatron",
    "train.py",
    "train_async.py",
    "deepspeed",
    "accelerate",
)


def classify_role(name: str, cmdline: str) -> str:
    """``sglang`` for SGLang servers/schedulers, ``trainer`` for torch/Ray workers, else ``other``.

    SGLang runs inside Ray actors in slime (``ray::SGLangEngine``), so SGLang markers win.
    """
    text = f"{name} {cmdline}".lower()
    if not text.strip():
        return ROLE_UNKNOWN
    if any(marker in text for marker in _SGLANG_MARKERS):
        return ROLE_SGLANG
    if any(marker in text for marker in _TRAINER_MARKERS):
        return ROLE_TRAINER
    return ROLE_OTHER


def assess_leftover(proc: GpuProcess, ray_running: bool | None) -> tuple[bool, str]:
    """Does this GPU process look like it outlived its run? Returns (flag, reason).

    The signs, strongest first: a zombie still holding memory; an SGLang server or
    trainer whose parent is gone (re-parented to PID 1, typical after the launcher
    died); a Ray worker on a host where no raylet runs any more.
    """
    if not proc.visible:
        return False, ""
    if proc.status == "zombie":
        return True, "zombie process still holding GPU memory"
    if proc.role in (ROLE_SGLANG, ROLE_TRAINER):
        if proc.parent_alive is False:
            return True, f"its parent process (pid {proc.ppid}) has exited"
        if proc.ppid in (0, 1) and proc.role == ROLE_SGLANG:
            return True, "orphaned SGLang process (re-parented to PID 1): its launcher is gone"
        if ("ray::" in proc.cmdline or "default_worker.py" in proc.cmdline) and ray_running is False:
            return True, "Ray worker on a host where no raylet is running"
    return False, ""


def classify_processes(snapshot: GpuSnapshot) -> GpuSnapshot:
    """Fill each process's role, age and leftover flag from its recorded facts."""
    for gpu in snapshot.gpus:
        for proc in gpu.processes:
            proc.role = classify_role(proc.name, proc.cmdline) if proc.visible else ROLE_UNKNOWN
            if proc.create_time and snapshot.taken_at:
                proc.age_s = max(0.0, snapshot.taken_at - proc.create_time)
            proc.leftover, proc.leftover_reason = assess_leftover(proc, snapshot.ray_running)
    return snapshot


# --------------------------------------------------------------------------- providers


class SnapshotProvider(Protocol):
    """The seam: anything that returns a :class:`GpuSnapshot`."""

    def snapshot(self) -> GpuSnapshot: ...


@dataclass
class FileProvider:
    """A snapshot saved as JSON (``rlmedic gpu --save F`` on the cluster), read through confinement."""

    path: str | os.PathLike[str]
    confinement: Confinement  # the caller's roots: a tool never widens them

    def snapshot(self) -> GpuSnapshot:
        data = load_json(self.confinement.read_text(self.path, whole=True), str(self.path))
        snapshot = GpuSnapshot.from_dict(data, where=str(self.path))
        snapshot.source = f"file:{Path(self.path).name}"
        return snapshot


@dataclass
class NvmlProvider:
    """The live machine through NVML. ``nvml`` may be passed for tests of the adapter itself."""

    nvml: Any = None
    with_processes: bool = True

    def snapshot(self) -> GpuSnapshot:
        snap = GpuSnapshot(taken_at=time.time(), hostname=socket.gethostname() or platform.node(), source="nvml")
        try:
            nvml = self.nvml or _import_pynvml()
        except ImportError:
            snap.status, snap.message = STATUS_NO_LIBRARY, "nvidia-ml-py (pynvml) is not installed"
            return snap
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            snap.status, snap.message = _init_failure(nvml, exc)
            return snap
        try:
            snap.driver_version = _text(_safe(nvml, nvml.nvmlSystemGetDriverVersion) or "")
            snap.nvml_version = _text(_safe(nvml, nvml.nvmlSystemGetNVMLVersion) or "")
            snap.cuda_driver_version = _safe(nvml, nvml.nvmlSystemGetCudaDriverVersion_v2)
            count = _safe(nvml, nvml.nvmlDeviceGetCount) or 0
            for index in range(count):
                snap.gpus.append(_read_device(nvml, index, self.with_processes))
        finally:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
        if not snap.gpus:
            snap.status = STATUS_NO_DEVICES
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            snap.message = "the NVIDIA driver is loaded but reports no GPU" + (
                f" (CUDA_VISIBLE_DEVICES={visible!r} does not restrict NVML; check the container's device list)"
                if visible is not None
                else ""
            )
            return snap
        if self.with_processes:
            _fill_host_details(snap)
        classify_processes(snap)
        return snap


def _import_pynvml() -> Any:
    import pynvml  # nvidia-ml-py; lazy so `rlmedic --help` never loads it

    return pynvml


def _init_failure(nvml: Any, exc: Exception) -> tuple[str, str]:
    if isinstance(exc, getattr(nvml, "NVMLError_LibraryNotFound", ())):
        return STATUS_NO_LIBRARY, "no NVIDIA driver library (libnvidia-ml.so) on this machine"
    if isinstance(exc, getattr(nvml, "NVMLError_DriverNotLoaded", ())):
        return STATUS_NO_DRIVER, "the NVIDIA kernel driver is not loaded"
    if isinstance(exc, getattr(nvml, "NVMLError_NoPermission", ())):
        return STATUS_ERROR, "NVML refused access (no permission to /dev/nvidia*)"
    return STATUS_ERROR, f"NVML failed to start: {exc}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _safe(nvml: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Call an NVML query; ``None`` when the board does not support it or refuses."""
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def _read_device(nvml: Any, index: int, with_processes: bool) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    info = GpuInfo(index=index)
    info.name = _text(_safe(nvml, nvml.nvmlDeviceGetName, handle) or "")
    info.uuid = _text(_safe(nvml, nvml.nvmlDeviceGetUUID, handle) or "")
    pci = _safe(nvml, nvml.nvmlDeviceGetPciInfo, handle)
    info.pci_bus_id = _text(getattr(pci, "busId", "") or "") if pci is not None else ""
    cc = _safe(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle)
    info.compute_capability = (int(cc[0]), int(cc[1])) if cc else None
    mem = _safe(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
    if mem is not None:
        info.memory_total, info.memory_used, info.memory_free = int(mem.total), int(mem.used), int(mem.free)
    util = _safe(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
    if util is not None:
        info.utilization_gpu, info.utilization_memory = int(util.gpu), int(util.memory)
    info.temperature = _safe(nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
    info.power_usage = _safe(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
    info.power_limit = _safe(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    ecc = _safe(nvml, nvml.nvmlDeviceGetEccMode, handle)
    if ecc is not None:
        info.ecc_mode = bool(ecc[0])
        if info.ecc_mode:
            uncorrected = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            info.ecc_uncorrected_volatile = _safe(
                nvml, nvml.nvmlDeviceGetTotalEccErrors, handle, uncorrected, nvml.NVML_VOLATILE_ECC
            )
            info.ecc_uncorrected_aggregate = _safe(
                nvml, nvml.nvmlDeviceGetTotalEccErrors, handle, uncorrected, nvml.NVML_AGGREGATE_ECC
            )
    # renamed from "throttle" to "clocks event" reasons in newer NVML bindings
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    info.clocks_event_reasons = _safe(nvml, reasons_fn, handle)
    info.sm_clock = _safe(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
    info.sm_clock_max = _safe(nvml, nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)
    if with_processes:
        info.processes = _read_processes(nvml, handle)
    return info


def _read_processes(nvml: Any, handle: Any) -> list[GpuProcess]:
    found: dict[int, GpuProcess] = {}
    for kind, fn_name in (("compute", "nvmlDeviceGetComputeRunningProcesses"), ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        fn = getattr(nvml, fn_name, None)
        for entry in (_safe(nvml, fn, handle) if fn else None) or []:
            used = getattr(entry, "usedGpuMemory", None)
            # NVML reports NVML_VALUE_NOT_AVAILABLE (2**64-1) when it cannot attribute memory.
            if used is not None and used >= 2**63:
                used = None
            pid = int(entry.pid)
            if pid not in found:
                found[pid] = GpuProcess(pid=pid, used_gpu_memory=used, type=kind)
    return list(found.values())


def _fill_host_details(snap: GpuSnapshot) -> None:
    """Command line, age, parent and status of each GPU process, from psutil."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return
    snap.ray_running = any(p.info.get("name") == "raylet" for p in psutil.process_iter(["name"]))
    for gpu in snap.gpus:
        for proc in gpu.processes:
            try:
                p = psutil.Process(proc.pid)
                with p.oneshot():
                    proc.name = p.name()
                    proc.cmdline = redact(" ".join(p.cmdline()))[:500]
                    proc.create_time = p.create_time()
                    proc.ppid = p.ppid()
                    proc.status = p.status()
                    try:
                        proc.username = p.username()
                    except (psutil.Error, KeyError):
                        proc.username = ""
                proc.parent_alive = psutil.pid_exists(proc.ppid) if proc.ppid not in (None, 0) else None
            except psutil.NoSuchProcess:
                proc.visible = False  # NVML sees host PIDs; a container cannot
            except psutil.AccessDenied:
                proc.visible = True
                proc.name = proc.name or "?"


# --------------------------------------------------------------------------- API


def gpu_snapshot(provider: SnapshotProvider | None = None) -> GpuSnapshot:
    """The current GPU state (live NVML unless another provider is given)."""
    return (provider or NvmlProvider()).snapshot()


def load_snapshot(path: str | os.PathLike[str], *, confinement: Confinement) -> GpuSnapshot:
    """Load a snapshot saved with :func:`save_snapshot` (or ``rlmedic gpu --save``)."""
    return FileProvider(path, confinement).snapshot()


def save_snapshot(snapshot: GpuSnapshot, path: str | os.PathLike[str], *, inputs: Confinement | None = None) -> Path:
    """Write a snapshot as JSON. Refuses to overwrite an existing file, or any file read through ``inputs``."""
    return write_new_text(path, json.dumps(snapshot.to_dict(), indent=2) + "\n", inputs=inputs)
