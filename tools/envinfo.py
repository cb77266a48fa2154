"""What the user runs: versions of the packages that matter, CUDA, driver and GPUs.

For ``rlmedic env`` (text meant to paste into an issue) and for matching known issues
against the user's releases. Package versions come from installed metadata
(``importlib.metadata``) and torch's CUDA build from its ``version.py`` read as text:
nothing is imported, so this is fast and safe on a broken install. Driver and GPU names
come from NVML through the GPU tool's snapshot seam; no GPU is a normal answer.
"""

from __future__ import annotations

import platform
import re
import sys
from typing import Any

NOT_INSTALLED = "not installed"
#: (shown name, distributions that provide it, first found wins)
PACKAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("torch",)),
    ("sglang", ("sglang",)),
    ("sglang-router", ("sglang-router",)),
    ("vllm", ("vllm",)),
    ("megatron-core", ("megatron-core", "megatron_core")),
    ("transformers", ("transformers",)),
    ("ray", ("ray",)),
    ("areal", ("areal", "realhf")),
    ("slime", ("slime",)),
    ("verl", ("verl",)),
    ("flash-attn", ("flash-attn", "flash_attn")),
    ("flashinfer", ("flashinfer-python", "flashinfer")),
    ("deepspeed", ("deepspeed",)),
    ("torch-memory-saver", ("torch-memory-saver", "torch_memory_saver")),
    ("nccl", ("nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl-cu13")),
)


def package_versions() -> dict[str, str]:
    """{shown name: version or "not installed"} from installed metadata, without importing anything."""
    from importlib import metadata

    out: dict[str, str] = {}
    for name, dists in PACKAGES:
        out[name] = NOT_INSTALLED
        for dist in dists:
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def torch_cuda() -> str:
    """The CUDA version torch was built with (``12.4``), ``cpu`` for a CPU build, "" when unknown.

    Read from ``torch/version.py`` as text: importing torch takes seconds and can fail.
    """
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin:
        return ""
    path = Path(spec.origin).parent / "version.py"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[:20000]
    except OSError:
        return ""
    m = re.search(r"(?m)^cuda\b[^=\n]*=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", text)
    if not m:
        return ""
    value = m.group(1) or m.group(2) or ""
    return value or "cpu"


def gpus(provider: Any = None) -> dict[str, Any]:
    """{driver, cuda_driver, gpus: [names], status}: NVML through the snapshot seam; no GPU is a normal answer."""
    from rlmedic.tools.gpu.snapshot import NvmlProvider

    try:
        snap = (provider or NvmlProvider(with_processes=False)).snapshot()
    except Exception as exc:  # noqa: BLE001 - env must print even when NVML misbehaves
        return {"driver": "", "cuda_driver": "", "gpus": [], "status": f"NVML failed: {type(exc).__name__}"}
    return {
        "driver": snap.driver_version or "",
        "cuda_driver": snap.cuda_version,
        "gpus": [g.name for g in snap.gpus],
        "status": snap.status if not snap.has_gpus else "ok",
    }


def collect(provider: Any = None) -> dict[str, Any]:
    """Everything ``rlmedic env`` shows, as one JSON-ready dict (redacted)."""
    from rlmedic.redact import redact_value

    gpu = gpus(provider)
    packages = package_versions()
    data = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "executable": sys.executable,
        "torch_cuda": torch_cuda() if packages.get("torch") != NOT_INSTALLED else "",
        "nccl": packages.get("nccl", NOT_INSTALLED),
        # not "driver"/"gpus": a JSON file with those keys is read as a GPU snapshot when attached
        "gpu_driver": gpu["driver"],
        "cuda_driver": gpu["cuda_driver"],
        "gpu_names": gpu["gpus"],
        "gpu_status": gpu["status"],
        "packages": packages,
    }
    return redact_value(data)


def render(data: dict[str, Any]) -> str:
    """Plain text to paste into an issue: one ``name: value`` per line."""
    lines = [f"python: {data['python']} on {data['platform']}"]
    torch = data["packages"].get("torch", NOT_INSTALLED)
    cuda = f" (CUDA {data['torch_cuda']})" if data.get("torch_cuda") and data["torch_cuda"] != "cpu" else (
        " (CPU build)" if data.get("torch_cuda") == "cpu" else "")
    lines.append(f"torch: {torch}{cuda}")
    if data["gpu_names"]:
        names = ", ".join(f"{n}x {name}" for name, n in _count(data["gpu_names"]))
        lines.append(f"gpus: {names}; driver {data['gpu_driver'] or '?'}" + (f", CUDA {data['cuda_driver']}" if data["cuda_driver"] else ""))
    else:
        lines.append(f"gpus: none visible ({data['gpu_status']})")
    for name, version in data["packages"].items():
        if name != "torch":
            lines.append(f"{name}: {version}")
    return "\n".join(lines)


def _count(names: list[str]) -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return list(out.items())
