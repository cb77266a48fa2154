"""Package versions: compare them (PEP 440, tolerant) and read them out of what users paste.

Known-issue records say which release fixed a bug; the user's log, ``pip list``, a docker
image tag or ``rlmedic env --json`` says what they run. This module is the one place that
turns those texts into ``{package: version}`` and decides "affected", "fixed in yours" or
"cannot say". Anything that is not a release number (a git sha, ``main``, ``nightly``)
is *unknown*: the answer then says so instead of guessing.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

Status = Literal["affected", "fixed_in_yours", "unknown"]

#: Canonical package names: what people write (PyPI names, import names, banners) -> one key.
ALIASES: dict[str, str] = {
    "sglang": "sglang", "sglang-router": "sglang-router", "sglang_router": "sglang-router",
    "vllm": "vllm",
    "torch": "torch", "pytorch": "torch",
    "megatron-core": "megatron-core", "megatron_core": "megatron-core", "megatron": "megatron-core",
    "megatron-lm": "megatron-core", "mcore": "megatron-core",
    "transformers": "transformers",
    "ray": "ray",
    "areal": "areal", "realhf": "areal",
    "slime": "slime",
    "verl": "verl",
    "flash-attn": "flash-attn", "flash_attn": "flash-attn", "flash-attention": "flash-attn",
    "flashinfer": "flashinfer", "flashinfer-python": "flashinfer", "flashinfer_python": "flashinfer",
    "deepspeed": "deepspeed",
    "nccl": "nccl", "nvidia-nccl-cu12": "nccl", "nvidia-nccl-cu11": "nccl",
    "cuda": "cuda", "python": "python", "driver": "driver",
    "torch-memory-saver": "torch-memory-saver", "torch_memory_saver": "torch-memory-saver",
    "peft": "peft", "accelerate": "accelerate", "triton": "triton", "xformers": "xformers",
}
#: Docker repositories whose tag is the version of one package.
IMAGE_PACKAGES = {"sglang": "sglang", "vllm-openai": "vllm", "vllm": "vllm", "verl": "verl", "areal": "areal",
                  "slime": "slime", "pytorch": "torch", "megatron": "megatron-core"}

_KNOWN = frozenset(ALIASES.values())
_UNKNOWN_WORDS = {"main", "master", "nightly", "latest", "dev", "head", "unknown", "source", "git", "local"}
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
_VERSION = r"v?\d+(?:\.\d+){0,3}(?:(?:\.?post|rc|a|b|\.dev)\d+)*(?:\+[\w.]+)?"


def canonical(name: str) -> str:
    """One key per package: ``flash_attn`` and ``flash-attn`` are the same; unknown names are lower-cased."""
    low = name.strip().lower()
    return ALIASES.get(low, ALIASES.get(low.replace("_", "-"), low.replace("_", "-")))


def parse(text: str | None):
    """A :class:`packaging.version.Version`, or ``None`` when the text is not a release.

    ``v0.4.6.post1``, ``0.4.6-post1``, ``2.6.0+cu124``, ``0.9.0.dev20250101+gabc`` parse;
    a git sha, ``main``, ``nightly`` and ``""`` do not (``None``: cannot say).
    """
    from packaging.version import InvalidVersion, Version

    if text is None:
        return None
    value = str(text).strip().strip("'\"").strip()
    if not value or value.lower() in _UNKNOWN_WORDS or _SHA.match(value.lower()) and not value.isdigit():
        return None
    value = re.sub(r"^[vV](?=\d)", "", value)
    value = re.sub(r"-(post|rc|dev)", r".\1", value)
    try:
        return Version(value)
    except InvalidVersion:
        m = re.match(r"\d+(?:\.\d+)*(?:\.post\d+|rc\d+|\.dev\d+)?", value)
        if not m:
            return None
        try:
            return Version(m.group(0))
        except InvalidVersion:
            return None


def _release(version):
    """The version without its local tag (``+cu124`` says how it was built, not which release)."""
    from packaging.version import Version

    return Version(version.public)


def compare(a: str, b: str) -> int | None:
    """-1, 0 or 1 like ``a`` vs ``b``; ``None`` when either is not a release (sha, main, nightly)."""
    va, vb = parse(a), parse(b)
    if va is None or vb is None:
        return None
    ra, rb = _release(va), _release(vb)
    return (ra > rb) - (ra < rb)


def satisfies(version: str, spec: str) -> bool | None:
    """Whether ``version`` is in the PEP 440 specifier set ``spec``; ``None`` when it cannot say.

    Pre-releases count (a ``0.5.0rc1`` user may well have the bug), local tags are ignored.
    """
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    parsed = parse(version)
    if parsed is None:
        return None
    try:
        specs = SpecifierSet(spec)
    except InvalidSpecifier:
        return None
    return specs.contains(_release(parsed), prereleases=True)


def status(yours: str | None, *, fixed_in: str = "", affected: str = "") -> Status:
    """``affected``, ``fixed_in_yours`` or ``unknown`` for a user's version of the package.

    A version at or past ``fixed_in`` has the fix; one inside ``affected`` (or before
    ``fixed_in``) has the bug; no version, or one that is not a release, cannot say.
    """
    if not yours or parse(yours) is None:
        return "unknown"
    if fixed_in:
        cmp = compare(yours, fixed_in)
        if cmp is not None:
            return "fixed_in_yours" if cmp >= 0 else "affected"
    if affected:
        inside = satisfies(yours, affected)
        if inside is not None:
            return "affected" if inside else "fixed_in_yours"
    return "unknown"


# -- readers -----------------------------------------------------------------------------------
_PIP_LINE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:===?|\s)\s*(" + _VERSION + r")(?:\s+[/~.\w:\\-]\S*)?\s*$")
_PIP_AT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*\S+")
_BANNER = re.compile(
    r"(?i)(?<![\w.-])(sglang(?:[-_]router)?|vllm|torch|pytorch|megatron(?:[-_]core|[-_]lm)?|mcore|transformers|ray|areal|"
    r"slime|verl|flash[-_]?attn|flashinfer(?:[-_]python)?|deepspeed|nccl|cuda|torch[-_]memory[-_]saver|triton|peft)"
    r"(?:\s*(?:==|=|:|@)\s*|\s+(?:version\s*:?\s*|v(?=\d))?|\s*/\s*|\s+is\s+)(" + _VERSION + r")(?![\w.])"
)
_IMAGE = re.compile(r"(?<![\w.-])(?:[\w.-]+/)*([a-z0-9][a-z0-9._-]*):(v?\d[\w.+-]*)")


def from_pip(text: str) -> dict[str, str]:
    """``pip list`` (two columns) or ``pip freeze`` (``name==version``) text -> {package: version}.

    Editable or VCS installs (``name @ git+...``) are recorded as ``"source"`` (unknown).
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(("Package", "-----", "#")):
            continue
        m = _PIP_LINE.match(line)
        if m:
            out[canonical(m.group(1))] = m.group(2)
            continue
        m = _PIP_AT.match(line)
        if m:
            out.setdefault(canonical(m.group(1)), "source")
    return out


def from_banners(text: str) -> dict[str, str]:
    """Versions printed in logs: ``sglang==0.4.6``, ``vLLM version 0.8.5``, ``torch 2.6.0+cu124``,
    ``AReaL v0.3.0``, ``Megatron-core 0.12``. The first mention of each package wins."""
    out: dict[str, str] = {}
    for m in _BANNER.finditer(text):
        out.setdefault(canonical(m.group(1).replace(" ", "")), m.group(2).lstrip("vV"))
    return out


def from_image_tags(text: str) -> dict[str, str]:
    """Docker image tags: ``lmsysorg/sglang:v0.4.6.post1-cu124`` -> ``{sglang: 0.4.6.post1}``."""
    out: dict[str, str] = {}
    for m in _IMAGE.finditer(text):
        package = IMAGE_PACKAGES.get(m.group(1).lower())
        if not package:
            continue
        tag = m.group(2)
        version = re.match(r"v?(\d+(?:\.\d+)*(?:\.post\d+|rc\d+)?)", tag)
        if version and parse(version.group(1)) is not None:
            out.setdefault(package, version.group(1))
    return out


def from_env_json(data: str | dict[str, Any]) -> dict[str, str]:
    """``rlmedic env --json`` output -> {package: version} (packages "not installed" left out)."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return {}
    packages = data.get("packages", {}) if isinstance(data, dict) else {}
    out = {canonical(k): str(v) for k, v in packages.items() if isinstance(v, str) and v and v != "not installed"}
    if isinstance(data, dict) and isinstance(data.get("torch_cuda"), str) and data["torch_cuda"] not in ("", "cpu"):
        out.setdefault("cuda", data["torch_cuda"])
    for key, name in (("python", "python"), ("cuda", "cuda"), ("gpu_driver", "driver"), ("nccl", "nccl")):
        value = data.get(key) if isinstance(data, dict) else None
        if isinstance(value, str) and value and value != "not installed":
            out.setdefault(name, value)
    return out


_CONDA_LINE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s+(" + _VERSION + r")\s+\S+(?:\s+\S+)?\s*$")


def from_conda(text: str) -> dict[str, str]:
    """``conda list`` (name, version, build, channel; ``#`` header lines) -> {package: version}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _CONDA_LINE.match(line)
        if m:
            out[canonical(m.group(1))] = m.group(2)
    return out


def from_pip_json(data: str | list[Any]) -> dict[str, str]:
    """``pip list --format=json`` ([{name, version}, ...]) -> {package: version}."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return {}
    if not isinstance(data, list):
        return {}
    return {canonical(str(d["name"])): str(d["version"]) for d in data
            if isinstance(d, dict) and d.get("name") and d.get("version")}


#: What an environment listing looks like, by its first lines: the reader that fits it.
EnvKind = Literal["pip-json", "rlmedic-env", "conda", "pip", ""]


def env_kind(text: str) -> EnvKind:
    """Which listing ``text`` is (``pip freeze``/``pip list``, its JSON, ``conda list``, ``rlmedic env --json``),
    "" when it is none of them (a log, a config). Decided by content, so an upload needs no special name."""
    head = text.lstrip()[:4000]
    if head.startswith("["):
        return "pip-json" if from_pip_json(text) else ""
    if head.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            return ""
        return "rlmedic-env" if isinstance(data, dict) and isinstance(data.get("packages"), dict) else ""
    lines = [line for line in head.splitlines() if line.strip()][:40]
    if not lines:
        return ""
    if any(line.startswith("# packages in environment at") for line in lines[:3]) or (
            sum(bool(_CONDA_LINE.match(line)) for line in lines) >= 0.8 * len(lines)
            and sum(bool(_PIP_LINE.match(line)) for line in lines) < 0.5 * len(lines)):
        return "conda"
    listed = [line for line in lines if not line.startswith(("Package", "-----", "#"))]
    if listed and sum(bool(_PIP_LINE.match(line) or _PIP_AT.match(line)) for line in listed) >= 0.8 * len(listed):
        # "name version" with a space is also what a log line looks like ("step 1"): that form needs
        # pip list's header or a few lines of it; "name==version" and "name @ url" are pip's own
        header = any(line.startswith("Package") for line in lines[:2])
        pinned = sum(bool(re.match(r"^\s*[A-Za-z0-9][\w.-]*\s*(?:===?|@)", line)) for line in listed)
        if header or pinned >= 0.8 * len(listed) or len(listed) >= 3:
            return "pip"
    return ""


_JSON_LISTING = re.compile(r'^\s*\[\s*\{\s*"name"\s*:\s*"[^"]+"\s*,\s*"version"\s*:|^\s*\{[^{}]*"python"\s*:[\s\S]*"packages"\s*:\s*\{')


def looks_like_env(peek: str) -> bool:
    """Whether the first few KiB of a file are an environment listing (a cut JSON listing counts)."""
    if _JSON_LISTING.match(peek):
        return True
    whole = peek if len(peek) < 4000 else peek[: peek.rfind("\n") + 1]
    return env_kind(whole) in ("pip", "conda")


def from_env_listing(text: str) -> dict[str, str]:
    """Every package of an environment listing (see :func:`env_kind`); {} when the text is not one."""
    kind = env_kind(text)
    if kind == "pip-json":
        return from_pip_json(text)
    if kind == "rlmedic-env":
        return from_env_json(text)
    if kind == "conda":
        return from_conda(text)
    if kind == "pip":
        return from_pip(text)
    return {}


#: Of a text longer than twice this, only the head and the tail are read for versions.
BIG_TEXT_PART = 200_000


def read_versions(*texts: str) -> dict[str, str]:
    """Every version any reader finds in ``texts``; an explicit ``pip``/env listing beats a banner."""
    out: dict[str, str] = {}
    for text in texts:
        if not text:
            continue
        if len(text) > 2 * BIG_TEXT_PART:  # banners open a log, the failure ends it: the middle is steps
            text = text[:BIG_TEXT_PART] + "\n" + text[-BIG_TEXT_PART:]
        stripped = text.lstrip()
        found: dict[str, str] = {}
        if stripped.startswith("{"):
            found |= from_env_json(stripped)
        found = from_image_tags(text) | from_banners(text) | found
        # a pip listing names any package; in free text only the packages this module knows count
        found |= {k: v for k, v in from_pip(text).items() if k in _KNOWN}
        for key, value in found.items():
            out.setdefault(key, value)
    return out
