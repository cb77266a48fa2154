"""Process memory: fewer malloc arenas for a threaded server, freed heap handed back before a peak, and
no garbage collection while a command starts.

glibc keeps memory that Python and native libraries freed inside its heaps and arenas, so a
process's RSS stays at its high-water mark. Two places in rlmedic feel it: the web server, whose
threads each get arenas of their own, and bulk indexing, whose read-side rebuild starts on top of
what embedding freed. Both helpers do nothing where glibc is absent.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


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


def pause_gc_for_startup() -> None:
    """Stop the cyclic garbage collector while the process imports and parses its command line.

    Start-up creates hundreds of thousands of objects that live as long as the process (modules,
    classes, pydantic schemas); the collector keeps traversing them as they accumulate, which cost
    ~10-15% of a cold ``diagnose`` and of importing langchain. Call :func:`resume_gc` when the
    command's own work begins.
    """
    import gc

    global _gc_paused
    if gc.isenabled():
        gc.disable()
        _gc_paused = True


_gc_paused = False


def resume_gc() -> None:
    """Move everything alive now to the collector's permanent generation, then collect as usual again.

    What start-up built is module state; frozen, later collections no longer walk it. Does
    nothing if :func:`pause_gc_for_startup` was not called (a test or a library caller keeps its
    own collector settings).
    """
    import gc

    global _gc_paused
    if not _gc_paused:
        return
    _gc_paused = False
    gc.freeze()
    gc.enable()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection while a heavy library is imported (langchain, chromadb, llama-index,
    torch, gradio); what the import built is frozen afterwards, as :func:`resume_gc` does.

    Importing langchain's agent stack builds ~200,000 objects; the collector walking them as they
    pile up was ~0.2 s of its ~2 s on a 2-core machine. Where the collector is already off,
    nothing changes.
    """
    import gc

    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
