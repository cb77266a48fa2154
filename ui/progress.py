"""A progress bar for long CLI jobs (indexing) on a terminal; elsewhere (a pipe, CI, ``--json``) the
job still says on stderr when it runs past a few seconds, and how long it took (rlmedic.notices)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from rlmedic.knowledge.ingest import Progress


@contextlib.contextmanager
def progress_bar(label: str, *, enabled: bool = True, after: float = 3.0) -> Iterator[Progress | None]:
    if not enabled or not sys.stderr.isatty():
        from rlmedic.notices import step

        with step(label.lower(), after=after):
            yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

    with RichProgress(
        TextColumn(f"{label} [dim]{{task.fields[name]}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        console=None,
    ) as bar:
        task = bar.add_task(label, total=None, name="")

        def update(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, name=name)

        yield update
