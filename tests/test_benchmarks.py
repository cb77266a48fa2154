"""The benchmark scripts stay runnable: what they import from rlmedic exists, and the anchors accept their patterns.

Benchmarks are not run by the test suite (they take minutes), so a rename in the product
broke two of them silently (``benchmarks/web.py`` imported the removed ``Conversation``;
``benchmarks/logscan.py`` handed ``rg`` a pattern file it refused). These checks are cheap.
"""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def _rlmedic_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from rlmedic... import name`` in the script, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rlmedic":
            out += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names if alias.name.split(".")[0] == "rlmedic"]
    return out


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_what_a_benchmark_imports_from_rlmedic_exists(script: Path) -> None:
    for module, name in _rlmedic_imports(script):
        mod = importlib.import_module(module)
        if name and not hasattr(mod, name):
            importlib.import_module(f"{module}.{name}")  # a submodule imported by name


def _patterns(tmp_path: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        logscan = importlib.import_module("logscan")
    finally:
        sys.path.remove(str(BENCHMARKS))
    pats = logscan.ere_patterns()
    ere, rg = tmp_path / "patterns.ere", tmp_path / "patterns.rg"
    ere.write_text("\n".join(pats) + "\n", encoding="utf-8")
    rg.write_text("\n".join(logscan.rg_bytes(p) for p in pats) + "\n", encoding="utf-8")
    return ere, rg


LOG_LINES = (
    "[2025-11-22 19:19:52] [TP0] Decode batch. #running-req: 145, #token: 59778\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB.\n"
    "weight update takes 30–40 seconds\n"
)


def test_grep_accepts_the_logscan_patterns(tmp_path: Path) -> None:
    ere, _ = _patterns(tmp_path)
    log = tmp_path / "x.log"
    log.write_text(LOG_LINES, encoding="utf-8")
    proc = subprocess.run(["grep", "-E", "-c", "-f", str(ere), str(log)], capture_output=True, text=True,
                          env={**os.environ, "LC_ALL": "C"})
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 2


def test_rg_accepts_the_logscan_patterns(tmp_path: Path) -> None:
    rg = shutil.which("rg")
    if rg is None:
        pytest.skip("ripgrep is not installed (apt-get install ripgrep; .ci/run installs it)")
    _, patterns = _patterns(tmp_path)
    log = tmp_path / "x.log"
    log.write_text(LOG_LINES, encoding="utf-8")
    proc = subprocess.run([rg, "-c", "--no-unicode", "-f", str(patterns), str(log)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 2
