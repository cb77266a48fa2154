"""A zip of run folders (what the web app and Slack take): unpacked into a private temporary folder.

The archive is read through the confinement; its members are written under a fresh
``mkdtemp`` folder (mode 0700) only when their names stay inside it (no absolute paths, no
``..``, no links), within :data:`MAX_MEMBERS` members and :data:`MAX_UNPACKED` bytes in
all, and the folder is removed when the diagnosis is done. The user's zip is not modified.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from rlmedic.errors import UserError
from rlmedic.tools.runs.curves import read_file_bytes

MAX_MEMBERS = 20_000
MAX_UNPACKED = 2 << 30
RUN_MARKERS = (".wandb", "events.out.tfevents.", "wandb-summary.json", "output.log")


def holds_runs(path: Path, confinement: Any = None) -> bool:
    """Whether ``path`` is a zip whose member names show a W&B or TensorBoard run (or TensorBoard CSV downloads)."""
    if not path.name.lower().endswith(".zip"):
        return False
    try:
        with (confinement.open_binary(path) if confinement is not None else open(path, "rb")) as fh:
            with zipfile.ZipFile(fh) as zf:
                names = zf.namelist()[:MAX_MEMBERS]
    except (zipfile.BadZipFile, OSError, UserError, ValueError):
        return False
    from rlmedic.tools.runs.locate import TB_EXPORT_NAME

    return any(PurePosixPath(n).name.endswith(RUN_MARKERS[0]) or PurePosixPath(n).name.startswith(RUN_MARKERS[1])
               or TB_EXPORT_NAME.match(PurePosixPath(n).name) for n in names)


@contextmanager
def unpacked(path: Path, confinement: Any = None) -> Iterator[Path]:
    """The archive's members under a private temporary folder, removed on exit."""
    data = read_file_bytes(path, confinement)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise UserError(f"{path}: not a readable zip archive") from None
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise UserError(f"{path}: more than {MAX_MEMBERS} members; zip only the run folders")
    if sum(i.file_size for i in infos) > MAX_UNPACKED:
        raise UserError(f"{path}: unpacks to more than {MAX_UNPACKED >> 30} GiB; zip only the run folders")
    root = Path(tempfile.mkdtemp(prefix="rlmedic-runs-"))
    try:
        for info in infos:
            name = PurePosixPath(info.filename)
            if info.is_dir() or name.is_absolute() or ".." in name.parts or not name.parts:
                continue
            if stat.S_ISLNK(info.external_attr >> 16):
                continue  # a link could point anywhere: left out
            target = root.joinpath(*name.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            mtime = _zip_time(info)
            if mtime is not None:
                os.utime(target, (mtime, mtime))  # the run's own file times: the stopped-run check reads them
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _zip_time(info: zipfile.ZipInfo) -> float | None:
    import time

    try:
        return time.mktime((*info.date_time, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def run_root(root: Path) -> Path:
    """The folder inside an unpacked archive that holds the run(s): down through single folders."""
    here = root
    for _ in range(4):
        entries = [p for p in here.iterdir() if not p.name.startswith((".", "__MACOSX"))]
        if len(entries) == 1 and entries[0].is_dir() and not entries[0].name.startswith(("run-", "offline-run-")) \
                and entries[0].name != "wandb":
            here = entries[0]
        else:
            break
    return here
