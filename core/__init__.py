"""rlmedic: a troubleshooting agent for RL training of LLMs.

``rlmedic.__version__`` is read from the installed package metadata on first use:
importing ``importlib.metadata`` (and the ``email`` package it pulls in) costs about 20 ms,
which every command would otherwise pay at start-up.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("rlmedic")
        except PackageNotFoundError:  # pragma: no cover - running from a tree without install
            value = "0.0.0"
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module 'rlmedic' has no attribute {name!r}")
