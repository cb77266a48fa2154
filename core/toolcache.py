"""Tool results cached by the content of the files they read (in-process, bounded).

A web or Slack follow-up question about the same upload runs ``diagnose`` on the same
bytes again; so does the agent when a model calls a tool twice. A tool registered with
``cache_paths="paths"`` has its result kept under (tool, arguments, a content hash of
every file those paths name), so the repeat costs a few stat calls and a copy.

Why content and not just the path: an upload replaced in place, a log that grew, a
rank folder with a new file must all miss. Hashing is paid once per file state: the
digest of a file is remembered under (device, inode, size, mtime), so a follow-up on an
unchanged upload hashes nothing. Inputs past :data:`MAX_HASH_BYTES` in all are not
cached (hashing them would cost a good part of a scan).

Only results of successful calls are kept, already redacted, and handed out as deep
copies (a caller may annotate what it gets). The paths are checked against the caller's
own confinement before any lookup, so a context that may not read a file never gets its
cached result. ``RLMEDIC_TOOL_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

MAX_ENTRIES = 32
MAX_HASH_BYTES = 64 << 20
MAX_FILES = 5000
_PIECE = 1 << 20


class ToolCache:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[Any, Any, str]] = OrderedDict()
        self._digests: dict[tuple[int, int, int, int], str] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def enabled() -> bool:
        return os.environ.get("RLMEDIC_TOOL_CACHE", "1") != "0"

    def key(self, tool: str, arguments: dict[str, Any], paths: list[str], confinement: Any) -> str | None:
        """The cache key, or None when the inputs cannot be fingerprinted (refused, missing, too big, a pipe)."""
        try:
            files = self._files(paths, confinement)
        except Exception:  # noqa: BLE001 - the tool itself will say what is wrong with the paths
            return None
        if files is None:
            return None
        h = hashlib.blake2b(digest_size=20)
        h.update(json.dumps([tool, arguments], sort_keys=True, default=str).encode())
        total = 0
        for path in files:
            try:
                st = path.stat()
            except OSError:
                return None
            total += st.st_size
            if total > MAX_HASH_BYTES:
                return None
            h.update(f"\0{path}\0".encode("utf-8", "surrogateescape") + self._digest(path, st).encode())
        return h.hexdigest()

    def get(self, key: str) -> tuple[Any, Any, str] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
        value, data, text = entry
        return copy.deepcopy(value), copy.deepcopy(data), text

    def put(self, key: str, value: Any, data: Any, text: str) -> None:
        entry = (copy.deepcopy(value), copy.deepcopy(data), text)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            if len(self._digests) > 64 * self.max_entries:
                self._digests.clear()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._digests.clear()

    # -- fingerprints --------------------------------------------------------------
    @staticmethod
    def _files(paths: list[str], confinement: Any) -> list[Path] | None:
        """Every regular file the paths name (folders walked, sorted), each allowed by ``confinement``."""
        from rlmedic.confine import walk_tree

        out: list[Path] = []
        for given in paths:
            resolved = confinement.existing(given)
            if resolved.is_file():
                out.append(resolved)
                continue
            if not resolved.is_dir():
                return None  # a pipe or a device: read once, never the same twice
            for root, dirs, names in walk_tree(resolved):  # not os.walk: it recursed, a deep tree crashed
                dirs.sort()
                for name in sorted(names):
                    full = Path(root) / name
                    if full.is_symlink():
                        full = confinement.check(full)  # the tool would refuse it: so must we
                    if full.is_file():
                        out.append(full)
                    if len(out) > MAX_FILES:
                        return None
        return out

    def _digest(self, path: Path, st: os.stat_result) -> str:
        state = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            known = self._digests.get(state)
        if known is not None:
            return known
        h = hashlib.blake2b(digest_size=20)
        with open(path, "rb") as fh:
            while piece := fh.read(_PIECE):
                h.update(piece)
        digest = h.hexdigest()
        with self._lock:
            self._digests[state] = digest
        return digest


#: The process-wide cache :meth:`rlmedic.tools.registry.Registry.call` uses.
TOOL_CACHE = ToolCache()
