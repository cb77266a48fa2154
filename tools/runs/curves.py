"""What a reader hands over: a run's metric curves, bounded in memory, and what is known of its end.

Readers (``wandb.py``, ``tensorboard.py``, ``dumps.py``) collect ``key -> (steps, values)`` and
call :func:`make_curve`; detectors read :class:`Curve` only, whatever the source was. A curve
keeps at most :data:`MAX_POINTS` points: longer ones are averaged in equal buckets (a NaN
stays NaN in its bucket's mean), and the bucket's largest magnitude is kept beside the mean
so a one-step spike survives. The first non-finite value is noted before bucketing, and the raw
points are kept beside the buckets (only the curves the checks may read are made: ~20 of a run's
keys), so a finding's first step is the exact step, not its bucket's (``detectors.exact_step``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

#: Points a curve keeps (a 100,000-step run is averaged in buckets of 50).
MAX_POINTS = 2000


@dataclass
class Curve:
    """One metric key over steps (numpy arrays; ``peaks`` only when bucketed)."""

    key: str
    steps: Any
    values: Any
    total: int
    peaks: Any = None
    first_nonfinite: tuple[int, float] | None = None
    #: the last step logged (a bucketed curve's last point carries its bucket's first step)
    end: int | None = None
    #: a bucketed curve's raw (steps, values): a finding's first step is made exact from them
    raw: Any = None

    def __len__(self) -> int:
        return len(self.values)

    @property
    def last_step(self) -> int:
        if self.end is not None:
            return self.end
        return int(self.steps[-1]) if len(self.steps) else 0


@dataclass
class Run:
    """One run: its curves, its framework, and what is known of how it ended."""

    path: str
    source: str  # wandb | tensorboard | jsonl | csv
    name: str
    curves: dict[str, Curve] = field(default_factory=dict)
    #: True: an exit record says it finished; False: it says it failed; None: no record (unknown)
    finished: bool | None = None
    exit_code: int | None = None
    #: wall-clock time of the last logged step, and of the newest write to its files
    last_wall: float | None = None
    files_mtime: float | None = None
    #: median seconds between logged steps, when wall times are known
    step_interval: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    framework: str = ""
    #: a text log the run folder holds (W&B files/output.log), diagnosed beside the curves
    log_file: str = ""
    #: every metric key the run logged (``curves`` may hold only those the checks read)
    keys: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def last_step(self) -> int | None:
        steps = [c.last_step for c in self.curves.values() if len(c)]
        return max(steps) if steps else None


def make_curve(key: str, steps: Any, values: Any) -> Curve:
    """A bounded curve from raw steps and values (lists or arrays), sorted by step."""
    import numpy as np

    s = np.asarray(steps, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if len(s) > 1 and np.any(np.diff(s) < 0):
        order = np.argsort(s, kind="stable")
        s, v = s[order], v[order]
    first_bad = None
    finite = np.isfinite(v)
    if not finite.all():
        i = int(np.argmin(finite))
        first_bad = (int(s[i]), float(v[i]))
    n = len(v)
    if n <= MAX_POINTS:
        return Curve(key, s.astype(np.int64), v, n, None, first_bad)
    k = math.ceil(n / MAX_POINTS)
    full = (n // k) * k
    vb = v[:full].reshape(-1, k)
    means = vb.mean(axis=1)
    with np.errstate(invalid="ignore"):
        peaks = np.abs(vb).max(axis=1)
    bsteps = s[:full:k]
    if full < n:
        means = np.append(means, v[full:].mean())
        peaks = np.append(peaks, np.abs(v[full:]).max())
        bsteps = np.append(bsteps, s[full])
    return Curve(key, bsteps.astype(np.int64), means, n, peaks, first_bad, int(s[-1]), (s, v))


def median_interval(walls: Any) -> float | None:
    """The median time between consecutive logged steps (seconds), from their wall times."""
    import numpy as np

    w = np.asarray(walls, dtype=np.float64)
    w = w[np.isfinite(w)]
    if len(w) < 3:
        return None
    d = np.diff(np.sort(w))
    d = d[d > 0]
    return float(np.median(d)) if len(d) else None


#: The most rlmedic reads of one metrics file (a 100,000-step TensorBoard file of 50 scalars is ~250 MB).
MAX_FILE_BYTES = 1 << 30


def read_file_bytes(path: Any, confinement: Any = None) -> bytes:
    """A metrics file's bytes, through the confinement when there is one (its own cap is sized for logs)."""
    from rlmedic.errors import UserError

    if confinement is None:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    else:
        with confinement.open_binary(path) as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB, the most rlmedic reads of a metrics file")
    return data


def map_file_bytes(path: Any, confinement: Any = None) -> Any:
    """A metrics file's bytes mapped read-only (``mmap``), through the confinement when there is one: a
    400 MB log is not copied (``read`` of one cost ~0.3 s of CPU; the mapping's page faults ~0.06 s).
    The result slices, ``find``-s and exports buffers (``memoryview``, ``numpy.frombuffer``) as ``bytes``
    do. Meant for append-only files (a W&B transaction log): a file cut shorter while mapped would
    fault its reader. An empty file, or one that cannot be mapped, is read (:func:`read_file_bytes`)."""
    import mmap

    from rlmedic.errors import UserError

    fh = confinement.open_binary(path) if confinement is not None else open(path, "rb")  # noqa: SIM115
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_FILE_BYTES:
            raise UserError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB, the most rlmedic reads of a metrics file")
        if size:
            try:
                return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)  # it keeps its own descriptor
            except (OSError, ValueError):
                pass
    return read_file_bytes(path, confinement)
