"""Two reads of one run are the same: the fast reader's and the reference's (JSONL blocks against the line
parse, the W&B bulk read against wandb's own records), curve by curve, value by value."""

from __future__ import annotations

from typing import Any

import numpy as np


def assert_same_run(a: Any, b: Any, *, curve_order: bool = True) -> None:
    """Everything a diagnosis reads of the two runs is equal; ``-0.0`` and NaN compare by their ``repr``.
    ``curve_order=False`` where a reader builds its curves from a set (a W&B run's)."""
    names_a, names_b = (list(a.curves), list(b.curves)) if curve_order else (sorted(a.curves), sorted(b.curves))
    assert a.keys == b.keys and names_a == names_b
    assert (a.last_wall, a.step_interval, a.finished, a.exit_code, a.notes, a.config) == \
        (b.last_wall, b.step_interval, b.finished, b.exit_code, b.notes, b.config)
    for key, x in a.curves.items():
        y = b.curves[key]
        assert repr((x.total, x.end, x.first_nonfinite)) == repr((y.total, y.end, y.first_nonfinite)), key
        for f in ("steps", "values", "peaks"):
            u, w = getattr(x, f), getattr(y, f)
            assert (u is None) == (w is None), (key, f)
            if u is not None:
                assert [repr(v) for v in u.tolist()] == [repr(v) for v in w.tolist()], (key, f)
        assert (x.raw is None) == (y.raw is None)
        if x.raw is not None:
            for u, w in zip(x.raw, y.raw):
                assert np.array_equal(u, w, equal_nan=True), key
