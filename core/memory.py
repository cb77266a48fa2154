"""Process memory on glibc: fewer malloc arenas for a threaded server, freed heap handed back before a peak.

glibc keeps memory that Python and native libraries freed inside its heaps and arenas, so a
process's RSS stays at its high-water mark. Two places in rlmedic feel it: the web server, whose
threads each get arenas of their own, and bulk indexing, whose read-side rebuild starts on top of
what embedding freed. Both helpers do nothing where glibc is absent.
"""

from __future__ import annotations

import os
import sys


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None)
    except OSError:
        return None


def few_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas for this process (call before its worker threads start).

    glibc gives threads that allocate at the same time arenas of their own (up to 8 per core) and
    keeps what is freed in them: under 20 sessions with 5 MB uploads the web server grew ~175 MB in
    the first round and ~15 MB each round after; with two arenas, ~50 MB and then ~8 MB
    (``benchmarks/web.py --rounds 3``). ``MALLOC_ARENA_MAX`` set by the user wins. Returns whether
    the cap was set.
    """
    libc = _libc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        return bool(libc.mallopt(-8, arenas))  # -8: M_ARENA_MAX
    except AttributeError:
        return False


def release_free_memory() -> bool:
    """Collect garbage and hand freed heap pages back to the OS (``malloc_trim``); returns whether it ran.

    Before the read-side rebuild of a 10,000-thread sync this lowered the peak RSS by ~80 MB
    (453 against 532 MB in-process): the rebuild no longer grows on top of what embedding freed.
    """
    import gc

    gc.collect()
    libc = _libc()
    if libc is None:
        return False
    try:
        libc.malloc_trim(0)
    except AttributeError:
        return False
    return True
