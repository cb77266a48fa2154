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
from rlmedic.tools.cluster.options import check_options  # noqa: F401 - the front doors' one import


def announce(result: SyncResult) -> None:
    """One line on stderr: what was read from the cluster; a line per node that could not be read."""
    notice(result.summary())
    for s in result.skipped:
        if s["file"].startswith("node-") and "__" not in s["file"]:
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


def cli_sync(address: str, *, job: str | None = None, since_minutes: float | None = None,
             into: str | os.PathLike[str] | None = None) -> SyncResult:
    """For a CLI command: what was synced (``.folder``: the folder, removed when the process exits unless
    ``into`` keeps it)."""
    manager = cluster_folder(address, job=job, since_minutes=since_minutes, into=into)
    result = manager.__enter__()
    atexit.register(manager.__exit__, None, None, None)
    return result


def cli_folder(address: str, *, job: str | None = None, since_minutes: float | None = None,
               into: str | os.PathLike[str] | None = None) -> Path:
    """:func:`cli_sync`'s folder."""
    return cli_sync(address, job=job, since_minutes=since_minutes, into=into).folder


@contextmanager
def live_folder(address: str, *, job: str | None = None, since_minutes: float | None = None,
                interval: float | None = None) -> Iterator[Path]:
    """For ``watch``: the folder synced once now, then every ``interval`` seconds in a thread (None: once),
    new lines appended at each file's end so the follower sees them as a live log grows. A failed re-sync
    (the dashboard restarting) is one line on stderr and the next one tries again."""
    import threading

    from rlmedic.tools.cluster.mirror import Mirror

    temp = tempfile.mkdtemp(prefix="rlmedic-ray-")
    stop = threading.Event()
    thread = None
    try:
        mirror = Mirror(address, folder=temp, job=job, since_minutes=since_minutes)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    try:
        announce(mirror.sync())
        if interval:
            def again() -> None:
                while not stop.wait(interval):
                    try:
                        mirror.sync()
                    except UserError as exc:
                        notice(f"the cluster did not answer this time ({exc})")

            thread = threading.Thread(target=again, name="rlmedic-ray-sync", daemon=True)
            thread.start()
        yield Path(temp)
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=30)
        mirror.close()
        shutil.rmtree(temp, ignore_errors=True)


#: Mirrors kept for the web app's sessions and the Slack bot's threads (by folder), newest last.
_MIRRORS: dict[str, object] = {}
_MIRRORS_LOCK = __import__("threading").Lock()
MAX_MIRRORS = 64


def sync_folder(folder: str | os.PathLike[str], address: str, *, job: str | None = None,
                since_minutes: float | None = None) -> SyncResult:
    """For a server (web app, Slack bot): sync the cluster into ``folder`` (a session's own subfolder),
    appending only what is new since this process last synced it. A folder this process has not synced
    yet is emptied first (a restart must not append the same tails twice); at most :data:`MAX_MIRRORS`
    mirrors are kept open, the oldest closed first."""
    from rlmedic.tools.cluster.mirror import Mirror

    key = str(Path(folder).resolve())
    with _MIRRORS_LOCK:
        mirror = _MIRRORS.pop(key, None)
        if mirror is None:
            shutil.rmtree(key, ignore_errors=True)
            mirror = Mirror(address, folder=key, job=job, since_minutes=since_minutes)
        _MIRRORS[key] = mirror
        while len(_MIRRORS) > MAX_MIRRORS:
            oldest = next(iter(_MIRRORS))
            _MIRRORS.pop(oldest).close()  # type: ignore[attr-defined]
    return mirror.sync()  # type: ignore[attr-defined]
