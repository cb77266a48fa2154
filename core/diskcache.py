"""Derived artifacts cached on disk, keyed by the hash of what they are derived from.

Cold commands pay for work whose result only changes when its sources change: parsing
and validating the signature catalog, compiling the Hyperscan literal database. This
module keeps such a result in ``<data dir>/cache/<kind>-<digest>.bin``, where the
digest covers the sources, the code that reads them and the interpreter, so an edited
catalog, a new rlmedic or another Python never sees a stale entry. One file per kind is kept
(writing a new digest removes the older ones), so the folder stays small.

The cache is an optimisation only: an unwritable data dir, a damaged entry or a
failing ``load`` mean the artifact is built fresh, never an error. Entries are written
by this user's own rlmedic into this user's data dir (pickles included: whoever can
write there can already change what this user runs).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

#: ``RLMEDIC_DISK_CACHE=0`` turns the cache off (every artifact is built fresh).
ENV_SWITCH = "RLMEDIC_DISK_CACHE"


def cache_dir() -> Path:
    from rlmedic.settings import data_dir

    return data_dir() / "cache"


def digest(parts: Iterable[bytes | str]) -> str:
    """sha256 over the parts and the interpreter version.

    Callers pass the code that builds and reads the artifact among the parts, so a new
    rlmedic invalidates it without the package version (reading that from the installed
    metadata imports ``importlib.metadata`` and ``email``: ~20 ms of every cold command).
    """
    h = hashlib.sha256(f"{sys.version}\0".encode())
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:32]


def cached(kind: str, key: str, build: Callable[[], T], dump: Callable[[T], bytes], load: Callable[[bytes], T]) -> T:
    """``load`` of the entry for (kind, key) if there is one, else ``build()``, stored with ``dump``."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return build()
    try:
        folder = cache_dir()
        path = folder / f"{kind}-{key}.bin"
        data = path.read_bytes() if path.is_file() else None
    except OSError:
        return build()
    if data is not None:
        try:
            return load(data)
        except Exception:  # noqa: BLE001 - a damaged or foreign entry is rebuilt, never fatal
            pass
    value = build()
    try:
        blob = dump(value)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{kind}-{key}.{os.getpid()}.tmp"
        from rlmedic.settings import private_file

        with private_file(tmp, "wb") as handle:  # the data dir's files are the owner's only
            handle.write(blob)
        os.replace(tmp, path)
        for old in folder.glob(f"{kind}-*.bin"):
            if old != path:
                old.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - read-only home, full disk, unpicklable value: just no cache
        pass
    return value
