"""What the front doors call: a Ray job's logs as a folder, for as long as the command (or request) runs.

``diagnose``, ``ask`` and ``chat`` take ``--ray-address ADDR [--job ID] [--since MINUTES]`` and hand the
folder to the same diagnosis and investigation as a folder the user typed; ``watch`` keeps a
:class:`~.mirror.Mirror` syncing into the folder it follows; the web app and the Slack bot sync per
question when a Ray address is set. The folder is private and removed when the command ends (a CLI
process) or the block ends (a request), unless the caller names where to keep it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlmedic.errors import UserError
from rlmedic.notices import notice
from rlmedic.tools.cluster.mirror import Limits, SyncResult, collect


def check_options(ray_address: str | None, job: str | None, since: float | None) -> None:
    if ray_address is None and (job is not None or since is not None):
        raise UserError("--job and --since go with --ray-address ADDR")


def announce(result: SyncResult) -> None:
    """One line on stderr: what was read from the cluster; a line per node that could not be read."""
    notice(result.summary())
    for s in result.skipped:
        if s["file"].startswith("node-") and "/" not in s["file"]:
            notice(f"{s['file']}: {s['reason']}")


@contextmanager
def cluster_folder(address: str, *, job: str | None = None, since_minutes: float | None = None,
                   into: str | os.PathLike[str] | None = None, limits: Limits | None = None,
                   quiet: bool = False) -> Iterator[SyncResult]:
    """Sync the job's logs into ``into`` (kept) or a private temp folder (removed when the block ends)."""
    temp = None if into else tempfile.mkdtemp(prefix="rlmedic-ray-")
    try:
        result = collect(address, folder=into or temp, job=job, since_minutes=since_minutes, limits=limits)
        if not quiet:
            announce(result)
        yield result
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


def session_folder(session: object) -> Path | None:
    """Where a conversation that is kept (``--thread``, chat) keeps the cluster's logs: beside its other
    files, so a follow-up question still reads them; None for one that is not kept (a temp folder)."""
    if not getattr(session, "persist", False):
        return None
    import time

    return Path(session.files_dir()) / time.strftime("ray-%Y%m%d-%H%M%S")  # type: ignore[attr-defined]


def cli_folder(address: str, *, job: str | None = None, since_minutes: float | None = None,
               into: str | os.PathLike[str] | None = None) -> Path:
    """For a CLI command: the synced folder, removed when the process exits (unless ``into`` keeps it)."""
    manager = cluster_folder(address, job=job, since_minutes=since_minutes, into=into)
    result = manager.__enter__()
    atexit.register(manager.__exit__, None, None, None)
    return result.folder
