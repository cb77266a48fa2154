"""Follow live logs: new lines since the last look, for a file or a folder of rank logs.

``rlmedic watch`` calls :meth:`Follower.poll` once per tick. Files are tracked by
inode, not by name, so a rotated file (``train.log`` -> ``train.log.1``) keeps its
offset and is never re-read from zero; a path whose inode changed is a new file read
from its start; a file that shrank was truncated (copytruncate) and is read again from
byte 0. Each poll reads at most ``max_read`` bytes per file (the end of a burst is what
matters), and an incomplete last line waits for the next poll. Memory does not grow
with the log: only offsets, one partial line per file and the open handles are kept.
Reads go through the caller's :class:`Confinement`; nothing is ever written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from rlmedic.confine import Confinement
from rlmedic.errors import UserError
from rlmedic.tools.logs.scan import clean_line

#: Names in a watched folder that are logs (compressed rotations are finished files: skipped).
LIVE_SUFFIXES = (".log", ".txt", ".out", ".err", ".stdout", ".stderr", ".jsonl")
#: Most bytes read from one file per poll; the older part of a larger burst is skipped.
MAX_READ = 4 << 20
#: Longest partial line kept between polls (a line without a newline is cut here).
MAX_PARTIAL = 64 << 10
#: Most files followed at once in a folder.
MAX_FILES = 512


@dataclass
class _Followed:
    path: Path
    ino: tuple[int, int]
    handle: BinaryIO
    offset: int = 0
    line_no: int = 0  # lines delivered so far (the next line is line_no + 1)
    partial: bytes = b""


@dataclass
class NewLines:
    """Lines appended to one file since the last poll; ``first_line`` numbers the first one."""

    path: Path
    file_id: str  # stable across renames: "dev:ino"
    first_line: int
    lines: list[str] = field(default_factory=list)
    restarted: bool = False  # the file is new, replaced or truncated: line numbers start over
    skipped_bytes: int = 0


def _is_live_log(name: str) -> bool:
    if name.startswith("."):
        return False
    low = name.lower()
    base = low.rstrip("0123456789").rstrip(".")  # train.log.1 -> train.log
    return low.endswith(LIVE_SUFFIXES) or base.endswith(LIVE_SUFFIXES)


class Follower:
    """Incremental reader over ``paths`` (files or folders), confined to them."""

    def __init__(self, paths: list[str | os.PathLike[str]], *, from_start: bool = True, max_read: int = MAX_READ,
                 confinement: Confinement | None = None) -> None:
        if not paths:
            raise UserError("watch: give a log file or a folder of logs")
        self.paths = [Path(p).expanduser() for p in paths]
        for p in self.paths:
            if not p.exists():
                raise UserError(f"{p}: no such file or directory")
        self.confinement = confinement or Confinement.for_paths(self.paths)
        self.max_read = max_read
        self._files: dict[tuple[int, int], _Followed] = {}
        self._by_path: dict[Path, tuple[int, int]] = {}
        self._first = True
        self._from_start = from_start

    # -- discovery ---------------------------------------------------------------

    def _candidates(self) -> list[Path]:
        found: list[Path] = []
        for root in self.paths:
            try:
                if root.is_dir():
                    names = sorted(os.listdir(root))
                    found += [root / n for n in names if _is_live_log(n) and (root / n).is_file()]
                elif root.exists():
                    found.append(root)
            except OSError:
                continue
        return found[:MAX_FILES]

    def _open(self, path: Path, ino: tuple[int, int], size: int) -> _Followed | None:
        try:
            handle = self.confinement.open_binary(path)
        except UserError:
            return None
        followed = _Followed(path=path, ino=ino, handle=handle)
        if self._first and not self._from_start:
            followed.offset = size  # --from-end: only what is written from now on
        return followed

    # -- polling -----------------------------------------------------------------

    def poll(self) -> list[NewLines]:
        """New complete lines of every followed file since the previous call."""
        out: list[NewLines] = []
        seen: set[tuple[int, int]] = set()
        for path in self._candidates():
            try:
                st = path.stat()
            except OSError:
                continue
            ino = (st.st_dev, st.st_ino)
            old = self._by_path.get(path)
            if old is not None and old != ino and old in self._files:
                # the name now points at another file (rotation): drain what the old one still had
                prev = self._files[old]
                if not any(p.exists() and _same(p, old) for p in self._candidates() if p != path):
                    out += self._drain(prev, final=True)
                    self._close(old)
            seen.add(ino)
            followed = self._files.get(ino)
            restarted = False
            if followed is None:
                followed = self._open(path, ino, st.st_size)
                if followed is None:
                    continue
                self._files[ino] = followed
                restarted = True
            followed.path = path
            self._by_path[path] = ino
            if st.st_size < followed.offset:  # truncated in place
                followed.offset, followed.line_no, followed.partial = 0, 0, b""
                restarted = True
            batch = self._drain(followed, size=st.st_size)
            for b in batch:
                b.restarted = b.restarted or restarted
            out += batch
        for ino in [i for i in self._files if i not in seen]:
            self._close(ino)  # deleted or moved out of the watched folder
        self._by_path = {p: i for p, i in self._by_path.items() if i in self._files}
        self._first = False
        return out

    def _drain(self, f: _Followed, *, size: int | None = None, final: bool = False) -> list[NewLines]:
        if size is None:
            try:
                size = os.fstat(f.handle.fileno()).st_size
            except OSError:
                return []
        if size <= f.offset:
            return []
        skipped = 0
        if size - f.offset > self.max_read:
            skipped = size - f.offset - self.max_read
            f.offset = size - self.max_read
            f.partial = b""
        try:
            f.handle.seek(f.offset)
            data = f.handle.read(size - f.offset)
        except OSError:
            return []
        f.offset += len(data)
        data = f.partial + data
        if skipped:  # the first line after a skip is cut: drop it
            cut = data.find(b"\n")
            data = data[cut + 1:] if cut >= 0 else b""
        parts = data.split(b"\n")
        f.partial = b"" if final else parts.pop()
        if len(f.partial) > MAX_PARTIAL:
            parts.append(f.partial[:MAX_PARTIAL])
            f.partial = b""
        if final and parts and parts[-1] == b"":
            parts.pop()
        if not parts:
            return []
        batch = NewLines(path=f.path, file_id=f"{f.ino[0]}:{f.ino[1]}", first_line=f.line_no + 1,
                         lines=[clean_line(p) for p in parts], skipped_bytes=skipped)
        f.line_no += len(parts)
        return [batch]

    def _close(self, ino: tuple[int, int]) -> None:
        f = self._files.pop(ino, None)
        if f is not None:
            try:
                f.handle.close()
            except OSError:
                pass

    def close(self) -> None:
        for ino in list(self._files):
            self._close(ino)

    @property
    def followed(self) -> list[Path]:
        return [f.path for f in self._files.values()]

    def file_ids(self) -> set[str]:
        """The ``file_id`` of every file followed now."""
        return {f"{f.ino[0]}:{f.ino[1]}" for f in self._files.values()}


def _same(path: Path, ino: tuple[int, int]) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == ino
