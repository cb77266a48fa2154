"""What a path is: a W&B run or ``wandb/`` folder, a TensorBoard log folder, a metric dump, a zip of runs.

``rlmedic diagnose`` asks :func:`split_run_paths` about every path before reading logs, so this
module is light (no numpy, no YAML, no reader imported unless a name calls for it): a log
costs a suffix check.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError

EVENT_GLOB = "events.out.tfevents."
RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-\w+$")
DUMP_SUFFIXES = (".jsonl", ".csv", ".ndjson")
#: the CSV TensorBoard's dashboard downloads for one tag: ``run-<run>-tag-<tag>.csv`` (``Wall time,Step,Value``)
TB_EXPORT_NAME = re.compile(r"^run-(.*)-tag-(.+)\.csv$", re.IGNORECASE)
#: How deep below a folder TensorBoard event files are looked for (verl: tensorboard_log/<project>/<experiment>/)
TB_DEPTH = 3


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (RUN_DIR.match(path.name) is not None or any(path.glob("run-*.wandb")))


def is_wandb_root(path: Path) -> bool:
    """A ``wandb/`` folder: it holds run folders."""
    try:
        return path.is_dir() and any(RUN_DIR.match(p.name) and p.is_dir() for p in path.iterdir())
    except OSError:
        return False


def runs_in(root: Path) -> list[Path]:
    """The run folders of a ``wandb/`` folder, oldest first (their names carry the start time)."""
    return sorted((p for p in root.iterdir() if RUN_DIR.match(p.name) and p.is_dir()),
                  key=lambda p: p.name.split("run-", 1)[1])


def is_logdir(path: Path) -> bool:
    """Whether ``path`` is (or directly holds) TensorBoard event files."""
    if path.is_file():
        return path.name.startswith(EVENT_GLOB)
    try:
        return any(p.name.startswith(EVENT_GLOB) for p in path.iterdir())
    except OSError:
        return False


def event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted((p for p in path.iterdir() if p.name.startswith(EVENT_GLOB) and p.is_file()), key=lambda p: p.name)


def event_dirs(root: Path, depth: int = TB_DEPTH) -> list[Path]:
    found: list[Path] = []
    base = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if any(f.startswith(EVENT_GLOB) for f in filenames):
            found.append(here)
        if len(here.parts) - base >= depth:
            dirnames[:] = []
        dirnames[:] = [d for d in dirnames if not d.startswith(".")][:200]
        if len(found) > 200:
            break
    return found


def run_kind(path: Path, head: bytes | None = None) -> str | None:
    """``wandb-root``, ``wandb-run``, ``tensorboard``, ``tb-csv`` (a folder of TensorBoard CSV downloads),
    ``dump``, ``zip`` or None (a log or anything else)."""
    try:
        if path.is_dir():
            if is_wandb_root(path):
                return "wandb-root"
            if is_run_dir(path):
                return "wandb-run"
            if is_logdir(path):
                return "tensorboard"
            names = [p.name for p in list(path.iterdir())[:500]]
            if any(TB_EXPORT_NAME.match(n) for n in names):
                return "tb-csv"
            if any(n.endswith((".log", ".txt", ".out", ".err", ".gz")) for n in names):
                return None  # a folder of logs (a TensorBoard folder inside it is not what was meant)
            if "wandb" in names and is_wandb_root(path / "wandb"):
                return "wandb-root"
            return "tensorboard" if event_dirs(path) else None
        if path.name.endswith(".wandb"):
            return "wandb-run"
        if path.name.lower().endswith(".zip"):
            from rlmedic.tools.runs.archive import holds_runs

            return "zip" if holds_runs(path) else None
        if path.name.startswith(EVENT_GLOB):
            return "tensorboard"
        if path.name.lower().endswith(DUMP_SUFFIXES):
            from rlmedic.tools.runs import dumps

            if head is None:
                with open(path, "rb") as fh:
                    head = fh.read(16384)
            return "dump" if dumps.is_dump(path, head) else None
    except OSError:
        return None
    return None


def expand(kind: str, path: Path, all_runs: bool) -> list[tuple[str, Path]]:
    """The runs a path stands for: a ``wandb/`` folder's newest run (all with ``all_runs``), a folder of
    TensorBoard runs' newest (by its files' times), anything else itself."""
    if kind == "wandb-root":
        root = path / "wandb" if not is_wandb_root(path) else path
        runs = runs_in(root)
        return [("wandb-run", r) for r in (runs if all_runs else runs[-1:])]
    if kind == "tensorboard" and path.is_dir() and not any(p.name.startswith(EVENT_GLOB) for p in path.iterdir()):
        dirs = sorted(event_dirs(path), key=lambda d: max(f.stat().st_mtime for f in d.iterdir() if f.is_file()))
        return [("tensorboard", d) for d in (dirs if all_runs else dirs[-1:])]
    return [(kind, path)]


def split_run_paths(paths: list[Any], confinement: Any = None) -> tuple[list[Any], list[Any]]:
    """``(run paths, other paths)``: what :func:`diagnose_runs` reads and what stays a log. Cheap for logs
    (a name check); a path that does not resolve stays with the logs, whose reader reports it."""
    runs, logs = [], []
    for raw in paths:
        try:
            path = confinement.existing(raw) if confinement is not None else Path(raw)
        except (UserError, OSError):
            logs.append(raw)
            continue
        head = None
        if path.is_file() and path.name.lower().endswith((".jsonl", ".csv", ".ndjson")) and confinement is not None:
            try:
                head = confinement.read_bytes(path, max_bytes=16384)
            except (UserError, OSError):
                head = b""
        (runs if run_kind(path, head) else logs).append(raw)
    return runs, logs


def every_run(path: Path) -> list[Path]:
    """A ``wandb/`` folder or a folder of TensorBoard runs as all its run folders (``diagnose --all``);
    any other path as itself."""
    kind = run_kind(path) if path.exists() else None
    if kind in ("wandb-root", "tensorboard"):
        return [p for _k, p in expand(kind, path, True)]
    return [path]
