"""Confinement in one place: which paths tools may read, how much, and redaction.

Every tool and every front door reads user files through :class:`Confinement` and
passes text through :func:`redact` before it reaches an LLM, Slack or a log. Tools
never write to user files.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, NamedTuple

from rlmedic.errors import AccessDenied, UserError

# redaction lives in rlmedic.redact (the table of secret kinds); re-exported here because
# tools and front doors import it together with the confinement
from rlmedic.redact import REDACTED, redact, redact_value, secret_kinds

#: Default cap on bytes a single read returns (text handed to a model or a UI).
DEFAULT_MAX_BYTES = 8 * 1024 * 1024

#: Default cap on directory entries one :meth:`Confinement.walk_files` visits.
DEFAULT_MAX_ENTRIES = 200_000

__all__ = ["REDACTED", "Confinement", "FileEntry", "WalkResult", "looks_binary", "redact", "redact_value",
           "secret_kinds", "walk_tree", "write_new_text"]


def walk_tree(top: str | os.PathLike[str], onerror: Callable[[OSError], None] | None = None
              ) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(top, followlinks=False)`` (top-down, ``dirs`` may be pruned in place), without recursion.

    Python 3.11's ``os.walk`` (and ``Path.rglob``) recurse once per folder level, so a tree
    3,000 folders deep raised ``RecursionError``; this one keeps an explicit stack, and a
    folder too deep for the OS to name (``ENAMETOOLONG``) goes to ``onerror`` like any
    folder that cannot be listed.
    """
    stack = [os.fspath(top)]
    while stack:
        root = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        links: set[str] = set()  # listed among the dirs (as os.walk does), never entered
        try:
            with os.scandir(root) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                        if is_dir and entry.is_symlink():
                            links.add(entry.name)
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        yield root, dirs, files
        stack.extend(os.path.join(root, d) for d in reversed(dirs) if d not in links)


def write_new_text(
    path: str | os.PathLike[str],
    text: str,
    *,
    force: bool = False,
    force_option: str = "",
    inputs: Confinement | None = None,
) -> Path:
    """Write ``text`` to the output file the user named: a new regular file unless ``force``.

    Tools never write to user files; this is only for outputs (a corrected config, a
    snapshot). A directory, a symlink, a FIFO or device, a missing parent or an unwritable
    place is a :class:`UserError`, never a traceback or a hang. ``inputs`` is the
    confinement the command read through: a path that is, resolves to, or hard-links to a
    file read through it is refused, ``force`` or not (an output never replaces an input).
    """
    target = Path(path).expanduser()
    try:
        if target.is_symlink():
            raise UserError(f"{path}: is a symlink; write to a regular path")
        if target.is_dir():
            raise UserError(f"{path}: is a directory; name a file")
        if inputs is not None and inputs.was_read(target):
            raise UserError(f"{path}: is a file this command reads; rlmedic never overwrites its input, choose another path")
        if target.exists():
            if not stat.S_ISREG(target.stat().st_mode):
                raise UserError(f"{path}: {_kind(target.stat().st_mode)}, not a regular file; name a new file")
            if not force:
                hint = f" or pass {force_option}" if force_option else ""
                raise UserError(f"{path}: already exists; choose a new file name{hint}")
        if not target.parent.is_dir():
            raise UserError(f"{target.parent}: no such directory")
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(target, flags | (0 if force else os.O_EXCL), 0o666)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # swapped for a FIFO or device since the checks above
                raise UserError(f"{path}: {_kind(st.st_mode)}, not a regular file; name a new file")
            if inputs is not None and (st.st_dev, st.st_ino) in inputs.read_ids:
                raise UserError(f"{path}: is a file this command reads; rlmedic never overwrites its input")
            os.ftruncate(fd, 0)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError as exc:  # created in the meantime
        raise UserError(f"{path}: already exists; choose a new file name") from exc
    except OSError as exc:  # permissions, read-only or full disk, a name too long...
        raise UserError(f"{path}: cannot write ({_why(exc)})") from exc
    return target


@dataclass
class Confinement:
    """The allowed roots and read caps for one request.

    A path is allowed when, after resolving symlinks and ``..``, it lies under one of
    the roots. Front doors build one from the paths the user named (plus any
    configured allowlist, ``RLMEDIC_ALLOWED_ROOTS`` separated by ``os.pathsep``).
    """

    roots: list[Path] = field(default_factory=list)
    max_bytes: int = DEFAULT_MAX_BYTES
    #: (st_dev, st_ino) and resolved path of every file opened through this confinement:
    #: what :func:`write_new_text` refuses to replace.
    read_ids: set[tuple[int, int]] = field(default_factory=set, repr=False, compare=False)
    read_paths: set[Path] = field(default_factory=set, repr=False, compare=False)
    #: resolved folder -> the name its files are shown under, for a folder a front door made itself (a Ray
    #: job's logs synced into a temporary folder show as ``ray/...``, not as a path gone after the command)
    names: dict[Path, str] = field(default_factory=dict, compare=False)

    def shown(self, given: str | os.PathLike[str]) -> str:
        """How a path the caller gave is shown in findings: its name in :attr:`names`, else as given."""
        if self.names:
            name = self.names.get(_resolve(given))
            if name is not None:
                return name
        return str(given)

    @classmethod
    def for_paths(cls, paths: Iterable[str | os.PathLike[str]], max_bytes: int = DEFAULT_MAX_BYTES) -> Confinement:
        """Allow exactly the paths the user passed (a file allows just that file)."""
        roots = [_resolve(p) for p in paths]
        env = os.environ.get("RLMEDIC_ALLOWED_ROOTS", "")
        roots += [_resolve(p) for p in env.split(os.pathsep) if p]
        return cls(roots=roots, max_bytes=max_bytes)

    @classmethod
    def exactly(cls, paths: Iterable[str | os.PathLike[str]], max_bytes: int = DEFAULT_MAX_BYTES) -> Confinement:
        """Allow exactly ``paths``, ignoring ``RLMEDIC_ALLOWED_ROOTS`` (a web or Slack session's own folder)."""
        return cls(roots=[_resolve(p) for p in paths], max_bytes=max_bytes)

    def check(self, path: str | os.PathLike[str]) -> Path:
        """Resolve ``path`` and return it if allowed; raise :class:`AccessDenied` if not."""
        resolved = _resolve(path)
        for root in self.roots:
            if resolved == root or resolved.is_relative_to(root):
                return resolved
        raise AccessDenied(f"{path}: outside the allowed roots ({', '.join(map(str, self.roots)) or 'none'})")

    def existing(self, path: str | os.PathLike[str]) -> Path:
        if str(path) == "":
            raise UserError("'': an empty path; name a file or directory")
        resolved = self.check(path)
        try:
            found = resolved.exists()
        except OSError as exc:  # e.g. a parent directory without search permission
            raise UserError(f"{path}: cannot access ({_why(exc)})") from exc
        if not found:
            raise UserError(f"{path}: no such file or directory")
        return resolved

    def regular_file(self, path: str | os.PathLike[str]) -> Path:
        """The resolved path of an allowed *regular* file; a directory, FIFO, socket or device is a :class:`UserError`.

        This is the one place that decides what a command may open: a FIFO would block the
        read forever, ``/dev/zero`` never ends. (A caller that deliberately reads stdin does
        so explicitly, with its own cap, and does not come through here.)
        """
        resolved = self.existing(path)
        try:
            mode = resolved.stat().st_mode
        except OSError as exc:
            raise UserError(f"{path}: cannot access ({_why(exc)})") from exc
        if stat.S_ISDIR(mode):
            raise UserError(f"{path}: is a directory, expected a file")
        if not stat.S_ISREG(mode):
            raise UserError(f"{path}: {_kind(mode)}, not a regular file; refusing to read it")
        return resolved

    def open_binary(self, path: str | os.PathLike[str]) -> BinaryIO:
        """Open an allowed regular file for streaming reads (the caller caps how much it reads).

        Checked before opening (:meth:`regular_file`) and again on the open descriptor, which
        is opened non-blocking so a FIFO swapped in between cannot hang the open.
        """
        resolved = self.regular_file(path)
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(resolved, flags)
        except OSError as exc:
            raise UserError(f"{path}: cannot read ({_why(exc)})") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UserError(f"{path}: {_kind(st.st_mode)}, not a regular file; refusing to read it")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        self.read_ids.add((st.st_dev, st.st_ino))
        self.read_paths.add(resolved)
        return open(fd, "rb")  # noqa: SIM115 - the caller closes it

    def read_bytes(self, path: str | os.PathLike[str], max_bytes: int | None = None, *, whole: bool = False) -> bytes:
        """Read at most ``max_bytes`` (default: the cap) from an allowed regular file.

        With ``whole`` a file larger than the limit is a :class:`UserError` instead of being
        cut short (a config or a JSON file read in part would be misread, not partly read).
        """
        limit = self.max_bytes if max_bytes is None else min(max_bytes, self.max_bytes)
        with self.open_binary(path) as fh:
            try:
                data = fh.read(limit)
                more = whole and fh.read(1)
            except OSError as exc:
                raise UserError(f"{path}: cannot read ({_why(exc)})") from exc
        if more:
            raise UserError(f"{path}: larger than {limit} bytes, the most rlmedic reads from a file of this kind")
        return data

    def was_read(self, path: str | os.PathLike[str]) -> bool:
        """True when ``path`` is, resolves to, or hard-links to a file opened through this confinement."""
        try:
            if _resolve(path) in self.read_paths:
                return True
            st = Path(path).expanduser().stat()
        except (OSError, UserError):
            return False  # nothing there (yet): it cannot be a file that was read
        return (st.st_dev, st.st_ino) in self.read_ids

    def read_text(self, path: str | os.PathLike[str], max_bytes: int | None = None, *, whole: bool = False) -> str:
        """Read an allowed text file: binary is refused, undecodable bytes are replaced."""
        data = self.read_bytes(path, max_bytes, whole=whole)
        if looks_binary(data):
            raise UserError(f"{path}: looks like a binary file, not text")
        return data.decode("utf-8", errors="replace")

    def list_dir(self, path: str | os.PathLike[str]) -> list[Path]:
        """Sorted entries of an allowed directory; entries whose target escapes the roots are left out."""
        resolved = self.existing(path)
        if not resolved.is_dir():
            raise UserError(f"{path}: is not a directory")
        try:
            names = sorted(os.listdir(resolved))
        except OSError as exc:
            raise UserError(f"{path}: cannot list ({_why(exc)})") from exc
        return [resolved / name for name in names if self.allows(resolved / name)]

    def allows(self, path: str | os.PathLike[str]) -> bool:
        """True when ``path`` (after resolving symlinks) lies under an allowed root."""
        try:
            self.check(path)
        except UserError:  # outside the roots, or not resolvable at all
            return False
        return True

    def walk_files(self, path: str | os.PathLike[str], max_entries: int = DEFAULT_MAX_ENTRIES) -> WalkResult:
        """Files (with size and mtime) and directories under an allowed directory, without following symlinks.

        Stops after ``max_entries`` entries and says so in :attr:`WalkResult.truncated`,
        so a huge tree cannot stall a request.
        """
        resolved = self.existing(path)
        result = WalkResult()
        if resolved.is_file():
            st = resolved.stat()
            result.files.append(FileEntry(resolved, st.st_size, st.st_mtime))
            return result
        result.dirs.append(resolved)
        stack = [resolved]
        seen = 0
        while stack:
            directory = stack.pop()
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                result.unreadable.append(Path(directory))
                continue
            for entry in entries:
                seen += 1
                if seen > max_entries:
                    result.truncated = True
                    return result
                try:
                    if entry.is_symlink():
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        result.dirs.append(Path(entry.path))
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        result.files.append(FileEntry(Path(entry.path), st.st_size, st.st_mtime))
                except OSError:
                    result.unreadable.append(Path(entry.path))
        return result


class FileEntry(NamedTuple):
    path: Path
    size: int
    mtime: float


@dataclass
class WalkResult:
    """What :meth:`Confinement.walk_files` saw: files, directories, and whether it stopped early."""

    files: list[FileEntry] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)
    truncated: bool = False
    unreadable: list[Path] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)


def _resolve(path: str | os.PathLike[str]) -> Path:
    """The absolute path with symlinks and ``..`` resolved; a symlink loop or bad name is a :class:`UserError`."""
    if "\x00" in os.fspath(path):  # no file name holds one; the OS calls would raise ValueError
        raise UserError(f"{os.fspath(path)!r}: a path with a NUL byte is not a file name")
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: "Symlink loop" (Python < 3.13)
        raise UserError(f"{path}: cannot resolve ({_why(exc)})") from exc


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return "is " + name
    return "is a special file"


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def looks_binary(data: bytes) -> bool:
    """NUL bytes in the first 8 KiB mean binary (the rule git and grep use)."""
    return b"\x00" in data[:8192]
