"""Attachments: the files a question comes with, which become its only allowed roots.

``-`` reads standard input (``kubectl logs ... | rlmedic ask "why" --attach -``) into a
file in a private temporary folder (mode 0700, capped in size), so stdin is a file like
any other. Nothing of the user's is modified; the temporary folder goes away on close.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Sequence

from rlmedic.errors import UserError

#: The most of stdin kept (the tail is what matters in a log, so the head is dropped).
STDIN_CAP_BYTES = 64 * 1024 * 1024


class Attachments:
    """Resolved attachment paths plus the private temp folder behind ``-`` (if any)."""

    def __init__(self, names: Sequence[str], *, stdin: BinaryIO | None = None, cap: int = STDIN_CAP_BYTES) -> None:
        self.paths: list[Path] = []
        self.notices: list[str] = []
        self._tmp: str | None = None
        for name in names:
            if name == "-":
                self.paths.append(self._read_stdin(stdin or sys.stdin.buffer, cap))
                continue
            path = Path(name).expanduser()
            if not path.exists():
                raise UserError(f"--attach {name}: no such file or directory")
            self.paths.append(path.resolve())

    def _read_stdin(self, stream: BinaryIO, cap: int) -> Path:
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="rlmedic-stdin-")
            os.chmod(self._tmp, 0o700)
        data = bytearray()
        dropped = False
        while chunk := stream.read(1024 * 1024):
            data += chunk
            if len(data) > cap:  # keep the end: the end of a log holds the failure
                del data[: len(data) - cap]
                dropped = True
        if dropped:
            self.notices.append(f"stdin was longer than {cap // (1024 * 1024)} MiB: only its end was kept")
        if not data:
            raise UserError("--attach -: standard input is empty")
        path = Path(self._tmp) / "stdin.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return path

    def context(self, *, deadline_s: float | None = None, index_dir: str | os.PathLike[str] | None = None) -> Any:
        """The registry ``ToolContext`` whose roots are these attachments (plus ``RLMEDIC_ALLOWED_ROOTS``)."""
        from rlmedic.registry import ToolContext

        return ToolContext.for_roots([str(p) for p in self.paths], deadline_s=deadline_s, index_dir=index_dir)

    def close(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Attachments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
