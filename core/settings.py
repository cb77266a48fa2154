"""Where rlmedic keeps its data (the index), and how to override it.

Order: an explicit ``--index-dir`` > ``RLMEDIC_HOME`` > the per-user data dir.

The data dir holds saved conversations, received files and caches: it is private (0700).
:func:`data_dir` creates it so, and tightens the per-user default when an older version
left it 0755; a ``RLMEDIC_HOME`` that already exists keeps its mode (the user chose it,
it may be their home), but every folder rlmedic creates in it is 0700 and the files it
writes itself are 0600 (:func:`private_file`).
"""

from __future__ import annotations

import os
from pathlib import Path


#: Data dirs made private in this process (one stat per path, not one per call).
_PRIVATE: set[str] = set()


def data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The data dir, created private (0700) on first use in a process."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get("RLMEDIC_HOME")
    if env:
        path = Path(env).expanduser()
        default = False
    else:
        import platformdirs

        path = Path(platformdirs.user_data_dir("rlmedic", appauthor=False))
        default = True
    key = str(path)
    if key not in _PRIVATE:
        _make_private(path, tighten=default)
        _PRIVATE.add(key)
    return path


def _make_private(path: Path, *, tighten: bool) -> None:
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir(mode=0o700, exist_ok=True)
            tighten = True  # ours: whatever the umask did
        if tighten:
            st = path.stat()
            if st.st_mode & 0o077 and st.st_uid == os.getuid():
                os.chmod(path, st.st_mode & 0o700 | 0o700)
    except OSError:
        pass  # a read-only home: the writers report their own errors


def private_dir(path: Path) -> Path:
    """``path`` (and missing parents) created 0700, whatever the umask; returned."""
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    for made in missing:
        try:
            os.chmod(made, 0o700)
        except OSError:
            pass
    return path


def private_file(path: Path, mode: str = "w", **kwargs: object):  # noqa: ANN201 - a file object
    """Open ``path`` for writing, created 0600 (an existing file is made 0600 too)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        pass
    return os.fdopen(fd, mode, **kwargs)


def index_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The index lives in ``<data dir>/index`` unless ``--index-dir`` names it."""
    if override:
        return Path(override).expanduser()
    return data_dir() / "index"


def history_path(index_dir_override: str | os.PathLike[str] | None = None) -> Path:
    """``history.sqlite`` in the knowledge index folder (``--index-dir`` or the default): the frameworks'
    synced git history (``rlmedic sync-code``). Here, not in :mod:`rlmedic.knowledge.history`, so that
    a diagnosis can see there is none without importing that module."""
    return index_dir(index_dir_override) / "history.sqlite"


def chroma_url() -> str:
    """A Chroma server (``chroma run``) to hold the dense index instead of the embedded store.

    ``RLMEDIC_CHROMA_URL``, e.g. ``http://127.0.0.1:8000``; "" means the embedded store in
    the index dir. The manifest and the BM25 index stay in the index dir either way.
    """
    return os.environ.get("RLMEDIC_CHROMA_URL", "").strip()


def ray_address(override: str | None = None) -> str | None:
    """The Ray cluster the web app and the Slack bot read logs from (``--ray-address`` >
    ``RLMEDIC_RAY_ADDRESS``); None: no cluster, only uploaded files."""
    return override or os.environ.get("RLMEDIC_RAY_ADDRESS") or None
