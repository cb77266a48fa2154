"""``rlmedic index``, ``search`` and ``ask``: the knowledge base from the terminal."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass
