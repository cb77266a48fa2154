"""Standard input as an attachment: ``kubectl logs ... | rlmedic ask "why" --attach -``.

The stream is copied into a private folder the session owns (mode 0700, the file 0600),
capped in size (the end of a log holds the failure, so the head is dropped), so stdin is
a file like any other and is read through the confinement and the registry. Nothing of
the user's is modified.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from rlmedic.errors import UserError

#: The most of stdin kept (the tail is what matters in a log, so the head is dropped).
STDIN_CAP_BYTES = 64 * 1024 * 1024


def save_stream(stream: BinaryIO, folder: Path, cap: int = STDIN_CAP_BYTES) -> tuple[Path, str]:
    """Copy ``stream`` (its last ``cap`` bytes) to a new file in ``folder``; the path and a note ("" if whole)."""
    data = bytearray()
    dropped = False
    while chunk := stream.read(1024 * 1024):
        data += chunk
        if len(data) > cap:  # keep the end: the end of a log holds the failure
            del data[: len(data) - cap]
            dropped = True
    if not data:
        raise UserError("--attach -: standard input is empty")
    path = folder / "stdin.log"
    n = 1
    while path.exists():
        path = folder / f"stdin-{n}.log"
        n += 1
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    note = f"stdin was longer than {cap // (1024 * 1024)} MiB: only its end was kept" if dropped else ""
    return path, note
