"""Health checks on training curves: the rules of ``detectors.yaml`` run on a :class:`~.curves.Run`.

Each rule names a ``check`` below (the shape of curve it looks for) and the concept it reads;
a check returns a :class:`Detection` (the metric, the first step, the values before and after)
or None. Checks are pure functions of arrays, vectorised with numpy, so a bucketed
100,000-step curve costs well under a millisecond each.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable

from rlmedic.errors import UserError
from rlmedic.tools.runs.curves import Curve, Run
from rlmedic.tools.runs.vocabulary import FRAMEWORKS, Vocabulary

SEVERITIES = ("critical", "error", "warning", "info")


@dataclass
class Detection:
    """One rule that fired: where (metric, first step) and how (before -> after)."""

    rule: dict[str, Any]
    key: str
    step: int
    before: float | None
    after: float | None
    numbers: dict[str, Any] = field(default_factory=dict)
    #: other curves worth showing beside the metric (the reward under a length cap)
    related: list[str] = field(default_factory=list)
    extra: str = ""

    @property
    def id(self) -> str:
        return str(self.rule["id"])


# ------------------------------------------------------------------ helpers --


def _baseline(c: Curve, frac: float) -> tuple[float, int]:
    """The median of the curve's first ``frac`` (at least 3 points), and how many points that was."""
    import numpy as np

    nb = max(3, int(len(c) * frac))
    head = c.values[:nb]
    head = head[np.isfinite(head)]
    return (float(np.median(head)) if len(head) else math.nan), nb


def _first_run(mask: Any, length: int, start: int = 0) -> int | None:
    """The first index >= ``start`` where ``mask`` holds for ``length`` points in a row."""
    import numpy as np

    m = np.asarray(mask[start:], dtype=np.int32)
    if length <= 1:
        idx = np.flatnonzero(m)
        return int(idx[0]) + start if len(idx) else None
    if len(m) < length:
        return None
    runs = np.convolve(m, np.ones(length, dtype=np.int32), "valid")
    idx = np.flatnonzero(runs == length)
    return int(idx[0]) + start if len(idx) else None


def _run_end(mask: Any, i: int) -> int:
    """One past the last index of the run of ``mask`` starting at ``i``."""
    import numpy as np

    rest = np.flatnonzero(~np.asarray(mask[i:], dtype=bool))
    return i + int(rest[0]) if len(rest) else len(mask)


def _median(values: Any) -> float | None:
    import numpy as np

    v = values[np.isfinite(values)]
    return float(np.median(v)) if len(v) else None


def _around(c: Curve | None, step: int, width: int = 5) -> tuple[float | None, float | None]:
    """A curve's median over ``width`` points before ``step`` and over its points from ``step`` on."""
    if c is None or not len(c):
        return None, None
    import numpy as np

    i = int(np.searchsorted(c.steps, step))
    return _median(c.values[max(0, i - width):i]), _median(c.values[i:])


# ------------------------------------------------------------------ checks ---


def falls_below(rule: dict[str, Any], c: Curve) -> Detection | None:
    if len(c) < rule.get("min_points", 10):
        return None
    base, nb = _baseline(c, rule.get("baseline_frac", 0.1))
    if not base > 0:
        return None
    below = c.values < base * rule["ratio"]
    i = _first_run(below, rule.get("sustain", 5), nb)
    if i is None:
        return None
    end = _run_end(below, i)
    return Detection(rule, c.key, int(c.steps[i]), base, _median(c.values[i:end]),
                     {"baseline": base, "threshold": base * rule["ratio"], "low_points": end - i})


def rises_above(rule: dict[str, Any], c: Curve) -> Detection | None:
    if len(c) < rule.get("min_points", 10):
        return None
    base, nb = _baseline(c, rule.get("baseline_frac", 0.1))
    if not math.isfinite(base):
        return None
    threshold = max(abs(base) * rule["factor"], float(rule.get("min_value", 0.0)))
    if threshold <= 0:
        return None
    above = c.values > threshold
    i = _first_run(above, rule.get("sustain", 3), nb)
    if i is None:
        return None
    end = _run_end(above, i)
    return Detection(rule, c.key, int(c.steps[i]), base, _median(c.values[i:end]),
                     {"baseline": base, "threshold": threshold, "high_points": end - i})


def length_cap(rule: dict[str, Any], run: Run, keys: dict[str, str]) -> Detection | None:
    """Responses cut at the cap: the truncation ratio above its threshold, or (without one) the mean
    length pressed against the longest length seen (or the configured cap)."""
    import numpy as np

    sustain = rule.get("sustain", 3)
    reward = run.curves.get(keys.get("reward", ""))
    det = None
    ratio = run.curves.get(keys.get("truncation_ratio", ""))
    if ratio is not None and len(ratio) >= rule.get("min_points", 5):
        high = ratio.values >= rule["threshold"]
        i = _first_run(high, sustain)
        if i is not None:
            end = _run_end(high, i)
            det = Detection(rule, ratio.key, int(ratio.steps[i]), _median(ratio.values[:max(1, i)]),
                            _median(ratio.values[i:end]), {"truncation_ratio": _median(ratio.values[i:end])})
    else:
        mean = run.curves.get(keys.get("response_length", ""))
        longest = run.curves.get(keys.get("response_length_max", ""))
        cap = run.config.get("max_response_length")
        if mean is not None and len(mean) >= rule.get("min_points", 5):
            if not cap and longest is not None and len(longest):
                cap = float(np.nanmax(longest.values))
            if cap:
                near = mean.values >= rule["near_cap"] * float(cap)
                i = _first_run(near, sustain)
                if i is not None:
                    det = Detection(rule, mean.key, int(mean.steps[i]), _median(mean.values[:max(1, i)]),
                                    _median(mean.values[i:]), {"cap": float(cap)})
    if det is None:
        return None
    det.numbers["cap"] = det.numbers.get("cap") or run.config.get("max_response_length")
    length = run.curves.get(keys.get("response_length", ""))
    if length is not None and det.key != length.key:
        det.related.append(length.key)
    if reward is not None:
        r0, r1 = _around(reward, det.step)
        if r0 is not None and r1 is not None:
            det.extra = f"{reward.key} {r0:.3g} -> {r1:.3g}"
            det.numbers.update(reward_before=r0, reward_after=r1)
        det.related.append(reward.key)
    return det


def zero_streak(rule: dict[str, Any], c: Curve) -> Detection | None:
    import numpy as np

    zero = c.values == 0.0
    i = _first_run(zero, rule.get("min_steps", 10))
    if i is None:
        return None
    end = _run_end(zero, i)
    before = _median(c.values[max(0, i - 5):i])
    return Detection(rule, c.key, int(c.steps[i]), before, 0.0,
                     {"zero_points": end - i, "until_step": int(c.steps[end - 1]),
                      "ongoing": bool(end == len(c)), "nonzero_before": bool(np.any(c.values[:i] != 0))})


def flat(rule: dict[str, Any], c: Curve) -> Detection | None:
    import numpy as np

    need = rule.get("min_steps", 20)
    if len(c) < need:
        return None
    same = np.concatenate([[False], np.diff(c.values) == 0]) & (c.values != 0) & np.isfinite(c.values)
    i = _first_run(same, need - 1)
    if i is None:
        return None
    i -= 1  # the run starts at the point the next ones repeat
    return Detection(rule, c.key, int(c.steps[i]), _median(c.values[max(0, i - 5):i]) if i > 0 else None,
                     float(c.values[i]), {"flat_points": _run_end(same, i + 1) - i})


def diverge(rule: dict[str, Any], val: Curve, reward: Curve | None) -> Detection | None:
    """Validation past its peak by ``min_drop`` while the training reward kept rising.

    The peak is that of a 3-point moving average (one noisy evaluation is no peak), the fall is
    the mean of the last 3 evaluations, all of which must sit below the peak; the first step
    named is the evaluation at the smoothed peak, where the fall began."""
    import numpy as np

    if reward is None or len(val) < rule.get("min_points", 6) or not np.isfinite(val.values).all():
        return None
    v = val.values
    smooth = np.convolve(v, np.ones(3) / 3, "valid")
    p = int(np.argmax(smooth))
    peak = float(smooth[p])
    last3 = v[-3:]
    last = float(last3.mean())
    if p + 3 >= len(v) or peak <= 0:
        return None
    if (peak - last) / abs(peak) < rule["min_drop"] or peak - last < rule["min_abs"] or \
            not (last3 < peak - rule["min_abs"] / 2).all():
        return None
    step = int(val.steps[p + 1])
    i = int(np.searchsorted(reward.steps, step, side="right"))
    width = max(3, len(reward) // 10)
    r0 = _median(reward.values[max(0, i - width):i])
    r1 = _median(reward.values[-width:])
    if r0 is None or r1 is None or r1 - r0 < rule["min_rise"]:
        return None
    det = Detection(rule, val.key, step, peak, last, {"peak_step": step, "reward_before": r0, "reward_after": r1},
                    [reward.key])
    det.extra = f"{reward.key} {r0:.3g} -> {r1:.3g}"
    return det


def spike(rule: dict[str, Any], c: Curve) -> Detection | None:
    import numpy as np

    window, factor = rule.get("window", 20), rule["factor"]
    mags = np.abs(c.peaks if c.peaks is not None else c.values)
    n = len(mags)
    start = rule.get("min_points", 5)
    if n <= start or not np.isfinite(mags).all():
        return None  # the non-finite rule reports a curve with NaN
    for i in range(start, n):
        lo = max(0, i - window)
        base = float(np.median(mags[lo:i]))
        if base > 0 and mags[i] > factor * base:
            return Detection(rule, c.key, int(c.steps[i]), base, float(mags[i]),
                             {"median_before": base, "value": float(mags[i]), "ratio": float(mags[i] / base)})
    return None


def _spike_fast(rule: dict[str, Any], c: Curve) -> Detection | None:
    """:func:`spike` with the rolling medians computed at once (a long curve)."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    window, factor, start = rule.get("window", 20), rule["factor"], rule.get("min_points", 5)
    mags = np.abs(c.peaks if c.peaks is not None else c.values)
    if len(mags) <= window + 1 or not np.isfinite(mags).all():
        return spike(rule, c)
    head = spike(dict(rule, min_points=start), Curve(c.key, c.steps[: window + 1], mags[: window + 1], window + 1))
    if head is not None:
        return head
    med = np.median(sliding_window_view(mags[:-1], window), axis=1)  # med[j] = median(mags[j:j+window])
    hit = np.flatnonzero((med > 0) & (mags[window:] > factor * med))
    if not len(hit):
        return None
    i = int(hit[0]) + window
    base = float(med[i - window])
    return Detection(rule, c.key, int(c.steps[i]), base, float(mags[i]),
                     {"median_before": base, "value": float(mags[i]), "ratio": float(mags[i] / base)})


def nonfinite(rule: dict[str, Any], run: Run, keys: dict[str, str]) -> Detection | None:
    """The earliest NaN/Inf among the rule's concepts' curves."""
    best: tuple[int, str, float] | None = None
    for concept in rule["concepts"]:
        c = run.curves.get(keys.get(concept, ""))
        if c is not None and c.first_nonfinite is not None:
            step, value = c.first_nonfinite
            if best is None or step < best[0]:
                best = (step, c.key, value)
    if best is None:
        return None
    c = run.curves[best[1]]
    import numpy as np

    i = int(np.searchsorted(c.steps, best[0]))
    return Detection(rule, best[1], best[0], _median(c.values[max(0, i - 5):i]), best[2], {"value": str(best[2])})


def stopped(rule: dict[str, Any], run: Run, now: float | None = None) -> Detection | None:
    """No exit record, and the files silent for longer than ``stale_s`` and ``step_gaps`` step intervals."""
    if run.finished is not None or run.last_step is None:
        return None
    now = time.time() if now is None else now
    last = max(t for t in (run.files_mtime, run.last_wall) if t is not None) if (run.files_mtime or run.last_wall) else None
    if last is None:
        return None
    age = now - last
    wait = max(float(rule.get("stale_s", 1800)), float(rule.get("step_gaps", 20)) * (run.step_interval or 0.0))
    if age < wait:
        return None
    key = max(run.curves.values(), key=lambda c: c.last_step).key
    return Detection(rule, key, int(run.last_step), None, None,
                     {"last_step": run.last_step, "silent_s": round(age), "step_interval_s": run.step_interval,
                      "last_write": last})


def exact_step(c: Curve, det: Detection) -> None:
    """On a bucketed curve, move ``det.step`` from its bucket's first step to the exact one, from the raw
    points: a spike to its largest point in the bucket; a run of points past a threshold to where the raw
    points last crossed it, in the bucket before or in the finding's own. A curve that was not bucketed is
    left alone."""
    import numpy as np

    if c.raw is None or det.key != c.key:
        return
    rs, rv = c.raw
    k = math.ceil(len(rv) / max(1, len(c)))  # the bucket size
    i = int(np.searchsorted(rs, det.step))
    check, n = det.rule["check"], det.numbers
    if check == "spike":
        j = i + int(np.argmax(np.abs(rv[i:i + k])))
        det.step = int(rs[j])
        return
    lo, hi = max(0, i - k), min(len(rv), i + k)  # the bucket before the finding's and its own
    vals = rv[lo:hi]
    if check in ("falls_below", "rises_above") and "threshold" in n:
        holds = vals < n["threshold"] if check == "falls_below" else vals > n["threshold"]
    elif check == "zero_streak":
        holds = vals == 0.0
    elif check == "length_cap" and "truncation_ratio" in n:
        holds = vals >= det.rule["threshold"]
    else:
        return
    if not len(holds) or not holds[-1]:
        return  # noise at the bucket's end: its first step stands
    misses = np.flatnonzero(~holds)
    det.step = int(rs[lo + (int(misses[-1]) + 1 if len(misses) else 0)])


_CURVE_CHECKS: dict[str, Callable[[dict[str, Any], Curve], Detection | None]] = {
    "falls_below": falls_below, "rises_above": rises_above, "zero_streak": zero_streak, "flat": flat,
    "spike": _spike_fast,
}
CHECKS = (*_CURVE_CHECKS, "length_cap", "diverge", "nonfinite", "stopped")
#: the text-log checks (``tools/logs/metrics.py``) a rule's ``logs:`` may name
LOG_CHECKS = ("zero_reward", "reward_collapse", "nonfinite", "spike", "length_cap", "no_eos")
_NOT_THRESHOLDS = frozenset(("id", "check", "concept", "concepts", "other", "title", "fixes", "logs"))


def detect(run: Run, vocab: Vocabulary, rules: list[dict[str, Any]] | None = None,
           now: float | None = None) -> tuple[list[Detection], dict[str, str]]:
    """Every rule on ``run``: the detections (in rule order) and the concept -> key map it used."""
    rules = builtin_rules()["rules"] if rules is None else rules
    keys = vocab.assign(list(run.curves), run.framework)
    out: list[Detection] = []
    zero_fired = False
    for rule in rules:
        check = rule.get("check")
        if check is None:
            continue  # a text-log rule (``logs:`` only)
        det: Detection | None = None
        if check in _CURVE_CHECKS:
            c = run.curves.get(keys.get(rule["concept"], ""))
            if c is None or (check == "flat" and zero_fired):
                continue
            det = _CURVE_CHECKS[check](rule, c)
            zero_fired = zero_fired or (check == "zero_streak" and det is not None)
        elif check == "length_cap":
            det = length_cap(rule, run, keys)
        elif check == "diverge":
            val = run.curves.get(keys.get(rule["concept"], ""))
            if val is not None:
                det = diverge(rule, val, run.curves.get(keys.get(rule["other"], "")))
        elif check == "nonfinite":
            det = nonfinite(rule, run, keys)
        elif check == "stopped":
            det = stopped(rule, run, now)
        if det is not None:
            c = run.curves.get(det.key)
            if c is not None and c.raw is not None:
                exact_step(c, det)
            out.append(det)
    return out, keys


# ------------------------------------------------------------------ the rule file --


def validate(data: Any) -> None:
    """One clear error for a malformed rule file."""
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise UserError("detectors: a mapping with a 'rules' list is required")
    cites = data.get("citations") or {}
    seen: set[str] = set()
    for rule in data["rules"]:
        rid = rule.get("id") if isinstance(rule, dict) else None
        if not rid or rid in seen:
            raise UserError(f"detectors: every rule needs a unique id (got {rid!r})")
        seen.add(rid)
        logs = rule.get("logs")
        if logs is not None and (not isinstance(logs, dict) or logs.get("check") not in LOG_CHECKS):
            raise UserError(f"detectors: {rid}: logs: needs a check, one of {', '.join(LOG_CHECKS)}")
        if rule.get("check") not in CHECKS and not (logs and "check" not in rule):
            raise UserError(f"detectors: {rid}: unknown check {rule.get('check')!r} (one of {', '.join(CHECKS)})")
        if rule.get("severity") not in SEVERITIES or not rule.get("title"):
            raise UserError(f"detectors: {rid}: needs a title and a severity")
        for fw, fixes in (rule.get("fixes") or {}).items():
            if fw not in (*FRAMEWORKS, "generic"):
                raise UserError(f"detectors: {rid}: fixes for unknown framework {fw!r}")
            for fix in fixes:
                if not fix.get("action") or fix.get("cite") not in cites:
                    raise UserError(f"detectors: {rid}/{fw}: every fix needs an action and a known cite")
        if "check" in rule and not (rule.get("fixes") or {}).get("generic") and rule["check"] != "stopped":
            raise UserError(f"detectors: {rid}: needs a generic fix (a run whose framework is unknown)")


def log_rules(overrides: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Text-log check name -> its thresholds, card, category and severity (and ``kinds``/``cards``), from the
    rules with ``logs:``; ``overrides`` (a catalog's ``metrics.rules``) laid over them key by key."""
    out: dict[str, dict[str, Any]] = {}
    for rule in builtin_rules()["rules"]:
        logs = rule.get("logs")
        if logs:
            params = {k: v for k, v in rule.items() if k not in _NOT_THRESHOLDS}
            params.update({k: v for k, v in logs.items() if k != "check"})
            out[logs["check"]] = params
    for name, extra in (overrides or {}).items():
        if isinstance(extra, dict):
            out[name] = {**out.get(name, {}), **extra}
    return out


@functools.lru_cache(maxsize=1)
def builtin_rules() -> dict[str, Any]:
    import yaml

    text = resources.files("rlmedic.tools.runs").joinpath("detectors.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe; libyaml ~5x faster
    validate(data)
    return data
