"""Errors that mean "the user asked for something we cannot do".

Front doors catch :class:`UserError` and print its message as one line (exit code 2
in the CLI); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input: missing path, unreadable file, empty index..."""


class AccessDenied(UserError):
    """A path lies outside the allowed roots (after resolving symlinks)."""
