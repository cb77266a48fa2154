"""Slow steps say what they are doing: one line on stderr, so a long wait does not look hung.

The first ``ask`` builds the card index (loading torch and the embedding model): a minute
of silence on a small machine reads as a hang. Library code wraps such a step in
:func:`step`; the line goes to stderr (stdout stays machine output for ``--json``), and a
step that ends before its ``after`` seconds prints nothing at all. Front doors that have no
terminal (tests, a server with its own log) swap the sink with :func:`set_sink`.

Interactive bars for counted work (files indexed) stay in ``rlmedic.ui.progress``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

Sink = Callable[[str], None]


def _stderr(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stderr must not end the step
        pass


_sink: Sink = _stderr
_lock = threading.Lock()


def set_sink(sink: Sink | None) -> Sink:
    """Send notices to ``sink`` (``None``: back to stderr). Returns the previous sink."""
    global _sink
    with _lock:
        previous, _sink = _sink, sink or _stderr
    return previous


def notice(message: str) -> None:
    """One line, prefixed ``rlmedic:``, to the current sink."""
    with _lock:
        sink = _sink
    sink(f"rlmedic: {message}")


@contextlib.contextmanager
def step(label: str, *, after: float = 2.0, clock: Callable[[], float] = time.monotonic,
         terminal_only: bool = False) -> Iterator[None]:
    """Announce ``label`` once it has run ``after`` seconds (0: at once), and its time when it ends.

    A step that finishes sooner stays silent, so fast machines and warm caches print nothing.
    ``terminal_only``: say nothing unless stderr is a terminal (a script reading stderr for the
    one error line of a failed command gets just that line).
    """
    if terminal_only and not _stderr_is_terminal():
        yield
        return
    start = clock()
    state = {"said": False, "over": False}
    guard = threading.Lock()

    def announce() -> None:
        with guard:  # held while printing, so "done" never comes before the step's first line
            if not state["over"] and not state["said"]:
                state["said"] = True
                notice(f"{label}...")

    timer = None
    if after <= 0:
        announce()
    else:
        timer = threading.Timer(after, announce)
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        with guard:
            state["over"] = True
            if state["said"]:
                notice(f"{label}: done in {clock() - start:.1f} s")


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
