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


def package_versions(paths: list[str] | None = None) -> dict[str, str]:
    """{shown name: version or "not installed"} from installed metadata, without importing anything.

    ``paths``: the site-packages folders of another environment (:func:`site_dirs`); default this one.
    """
    from importlib import metadata

    found: dict[str, str] = {}
    if paths is not None:  # another environment: read every dist-info there once
        for dist in metadata.distributions(path=paths):
            name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
            if name and name not in found:
                found[name] = dist.version
    out: dict[str, str] = {}
    for name, dists in PACKAGES:
        out[name] = NOT_INSTALLED
        for dist in dists:
            if paths is not None:
                version = found.get(dist.lower().replace("_", "-"))
                if version:
                    out[name] = version
                    break
                continue
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


#: Asks another interpreter where its packages live: isolated (-I) and without ``site`` (-S), so no
#: ``.pth`` file or sitecustomize of that environment runs; only the standard library's sysconfig.
#: Without ``site`` a venv does not know it is one (site reads ``pyvenv.cfg``), so the script does.
_WHERE = """
import json, os, sys, sysconfig
prefix, dirs = sys.prefix, []
home = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
cfg = os.path.join(home, "pyvenv.cfg")
system = True
if os.path.isfile(cfg):
    prefix = home
    with open(cfg) as fh:
        system = any(l.split("=")[0].strip() == "include-system-site-packages" and l.split("=", 1)[1].strip() == "true"
                     for l in fh if "=" in l)
p = sysconfig.get_paths(vars={"base": prefix, "platbase": prefix})
dirs += [p["purelib"], p["platlib"]]
if system:
    b = sysconfig.get_paths()
    dirs += [b["purelib"], b["platlib"]]
    v = "python%d.%d" % sys.version_info[:2]
    dirs += [os.path.join(sys.base_prefix, "lib", "python3", "dist-packages"),
             os.path.join(sys.base_prefix, "local", "lib", v, "dist-packages")]
print(json.dumps({"python": sys.version.split()[0], "dirs": dirs}))
"""


def site_dirs(python: str) -> tuple[str, list[str]]:
    """(Python version, site-packages folders) of the interpreter ``python``, nothing of it imported.

    A UserError names an interpreter that does not exist or does not run.
    """
    import json
    import subprocess
    from pathlib import Path

    from rlmedic.errors import UserError

    exe = Path(python).expanduser()
    if not exe.exists():
        raise UserError(f"--python {python}: no such interpreter")
    try:
        out = subprocess.run([str(exe), "-I", "-S", "-c", _WHERE], capture_output=True, text=True, timeout=30, check=False)
        data = json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        data = None
    if not isinstance(data, dict):
        raise UserError(f"--python {python}: it did not run as a Python interpreter")
    dirs = [d for d in dict.fromkeys(data.get("dirs") or []) if isinstance(d, str) and Path(d).is_dir()]
    return str(data.get("python") or ""), dirs


def torch_cuda(paths: list[str] | None = None) -> str:
    """The CUDA version torch was built with (``12.4``), ``cpu`` for a CPU build, "" when unknown.

    Read from ``torch/version.py`` as text: importing torch takes seconds and can fail.
    ``paths``: another environment's site-packages folders.
    """
    import importlib.util
    from pathlib import Path

    if paths is not None:
        candidates = [Path(d) / "torch" / "version.py" for d in paths]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            return ""
        return _cuda_of(path)
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin:
        return ""
    return _cuda_of(Path(spec.origin).parent / "version.py")


def _cuda_of(path: Any) -> str:
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


def collect(provider: Any = None, python: str | None = None) -> dict[str, Any]:
    """Everything ``rlmedic env`` shows, as one JSON-ready dict (redacted).

    ``python``: report that interpreter's environment (the training one) instead of rlmedic's own,
    from its dist-info folders; nothing there is imported.
    """
    from rlmedic.redact import redact_value

    gpu = gpus(provider)
    dirs: list[str] | None = None
    version = platform.python_version()
    if python:
        version, dirs = site_dirs(python)
    packages = package_versions(dirs)
    data = {
        "python": version,
        "platform": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "executable": python or sys.executable,
        "torch_cuda": torch_cuda(dirs) if packages.get("torch") != NOT_INSTALLED else "",
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


#: Bytes of an environment listing read (a full ``pip freeze`` of a big image is ~30 KiB).
MAX_ENV_BYTES = 2_000_000


def versions_of_file(path: Any, confinement: Any = None) -> tuple[str, dict[str, str]]:
    """(kind, {package: version}) of the training environment's listing in ``path``: ``pip freeze``,
    ``pip list`` (text or ``--format=json``), ``conda list`` or ``rlmedic env --json``. Read through
    ``confinement`` when given; a file that is none of them is one clear UserError."""
    from pathlib import Path

    from rlmedic.errors import UserError
    from rlmedic.versions import env_kind, from_env_listing

    p = Path(path).expanduser()
    try:
        if confinement is not None:
            text = confinement.read_text(p, max_bytes=MAX_ENV_BYTES)
        else:
            text = p.read_bytes()[:MAX_ENV_BYTES].decode("utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"--env {path}: cannot read it ({exc.strerror or exc})") from None
    kind = env_kind(text)
    versions = from_env_listing(text) if kind else {}
    if not versions:
        raise UserError(f"--env {path}: not a pip freeze, pip list, conda list or `rlmedic env --json` listing")
    return kind, versions
