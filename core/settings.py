"""Where rlmedic keeps its data (the index), and how to override it.

Order: an explicit ``--index-dir`` > ``RLMEDIC_HOME`` > the per-user data dir.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    if override:
        return Path(override).expanduser()
    env = os.environ.get("RLMEDIC_HOME")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("rlmedic", appauthor=False))


def index_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The index lives in ``<data dir>/index`` unless ``--index-dir`` names it."""
    if override:
        return Path(override).expanduser()
    return data_dir() / "index"


def chroma_url() -> str:
    """A Chroma server (``chroma run``) to hold the dense index instead of the embedded store.

    ``RLMEDIC_CHROMA_URL``, e.g. ``http://127.0.0.1:8000``; "" means the embedded store in
    the index dir. The manifest and the BM25 index stay in the index dir either way.
    """
    return os.environ.get("RLMEDIC_CHROMA_URL", "").strip()
