"""Parsers for command-line values that click/typer accept too readily.

``Path("")`` is ``Path(".")``: without this, ``rlmedic diagnose ''`` (an unset shell
variable) would diagnose the current directory. Every path argument and option goes
through :func:`path`, which refuses the empty string as a :class:`UserError` (one line,
exit 2).
"""

from __future__ import annotations

from pathlib import Path

from rlmedic.errors import UserError


def path(value: str | Path) -> Path:
    """A path from the command line; ``''`` is refused (it would mean the current directory)."""
    if isinstance(value, Path):
        return value
    if value == "":
        raise UserError("an empty path ('') was given; name a file or directory (is a shell variable unset?)")
    if "\x00" in value:
        raise UserError(f"{value!r}: a path cannot contain a NUL byte")
    return Path(value)
