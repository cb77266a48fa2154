"""Health checks on training curves: the rules of ``detectors.yaml`` run on a :class:`~.curves.Run`.

Each rule names a ``check`` below (the shape of curve it looks for) and the concept it reads;
a check returns a :class:`Detection` (the metric, the first step, the values before and after)
or None. Checks are pure functions of plain Python lists (:class:`Points`: a run's curve is converted
once, a text log's series is one): one implementation for run folders and text logs, no numpy import
on a text log's path. A curve holds at most 2,000 points (longer runs are bucketed), so a check costs
at most a few milliseconds; only :func:`exact_step` reads a bucketed curve's raw numpy arrays.
"""

from __future__ import annotations

import bisect
import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rlmedic.datafiles import builtin, read_yaml
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
    #: the index of the point it starts at in the checked curve (a text log's finding names its line)
    index: int | None = None

    @property
    def id(self) -> str:
        return str(self.rule["id"])


# ------------------------------------------------------------------ helpers --


@dataclass
class Points:
    """A curve as plain Python lists: what every check reads, whatever it came from.

    A run's :class:`Curve` (numpy arrays, at most ``curves.MAX_POINTS`` points: bucketed) becomes one
    with :meth:`of` (``tolist``: ~20 us a curve); a text log's series (``tools/logs/metrics.py``) is one
    already, with the log line of each point in ``lines``. So the checks are one implementation for both
    and a text log's diagnosis never imports numpy (0.15 s of CPU, more than a small log's whole scan)."""

    key: str
    steps: list[int]
    values: list[float]
    peaks: list[float] | None = None
    first_nonfinite: tuple[int, float] | None = None
    #: a text log's line number of each point (its finding's evidence)
    lines: list[int] | None = None

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def of(cls, c: Any) -> Points:
        if isinstance(c, Points):
            return c
        return cls(c.key, _plain(c.steps), _plain(c.values), None if c.peaks is None else _plain(c.peaks),
                   c.first_nonfinite)


def _plain(x: Any) -> list[Any]:
    """A list of Python numbers from a list, a numpy array (``tolist``, no numpy import here) or any sequence."""
    if isinstance(x, list):
        return x
    return x.tolist() if hasattr(x, "tolist") else list(x)


def _median(values: Any) -> float | None:
    """The median of the finite values (numpy's: the mean of the two middle ones for an even count)."""
    v = sorted(x for x in values if math.isfinite(x))
    n = len(v)
    if not n:
        return None
    h = n // 2
    return float(v[h]) if n % 2 else (v[h - 1] + v[h]) / 2


def _baseline(c: Points, frac: float) -> tuple[float, int]:
    """The median of the curve's first ``frac`` (at least 3 points), and how many points that was."""
    nb = max(3, int(len(c) * frac))
    base = _median(c.values[:nb])
    return (math.nan if base is None else base), nb


def _first_run(mask: list[bool], length: int, start: int = 0) -> int | None:
    """The first index >= ``start`` where ``mask`` holds for ``length`` points in a row."""
    length = max(1, length)
    run = 0
    for i in range(start, len(mask)):
        if mask[i]:
            run += 1
            if run >= length:
                return i - length + 1
        else:
            run = 0
    return None


def _run_end(mask: list[bool], i: int) -> int:
    """One past the last index of the run of ``mask`` starting at ``i``."""
    for j in range(i, len(mask)):
        if not mask[j]:
            return j
    return len(mask)


def _around(c: Points | None, step: int, width: int = 5) -> tuple[float | None, float | None]:
    """A curve's median over ``width`` points before ``step`` and over its points from ``step`` on."""
    if c is None or not len(c):
        return None, None
    i = bisect.bisect_left(c.steps, step)
    return _median(c.values[max(0, i - width):i]), _median(c.values[i:])


# ------------------------------------------------------------------ checks ---
# Each takes a rule and :class:`Points` (a Curve is converted), returns a Detection whose ``index`` is the
# point where it starts (a text log's finding names that point's line).


def falls_below(rule: dict[str, Any], c: Any) -> Detection | None:
    c = Points.of(c)
    if len(c) < rule.get("min_points", 10):
        return None
    base, nb = _baseline(c, rule.get("baseline_frac", 0.1))
    if not base > 0:
        return None
    threshold = base * rule["ratio"]
    below = [v < threshold for v in c.values]
    i = _first_run(below, rule.get("sustain", 5), nb)
    if i is None:
        return None
    end = _run_end(below, i)
    return Detection(rule, c.key, int(c.steps[i]), base, _median(c.values[i:end]),
                     {"baseline": base, "threshold": threshold, "low_points": end - i}, index=i)


def rises_above(rule: dict[str, Any], c: Any) -> Detection | None:
    c = Points.of(c)
    if len(c) < rule.get("min_points", 10):
        return None
    base, nb = _baseline(c, rule.get("baseline_frac", 0.1))
    if not math.isfinite(base):
        return None
    threshold = max(abs(base) * rule["factor"], float(rule.get("min_value", 0.0)))
    if threshold <= 0:
        return None
    above = [v > threshold for v in c.values]
    i = _first_run(above, rule.get("sustain", 3), nb)
    if i is None:
        return None
    end = _run_end(above, i)
    return Detection(rule, c.key, int(c.steps[i]), base, _median(c.values[i:end]),
                     {"baseline": base, "threshold": threshold, "high_points": end - i}, index=i)


def length_cap(rule: dict[str, Any], run: Run, keys: dict[str, str],
               get: Callable[[str], Points | None] | None = None) -> Detection | None:
    """Responses cut at the cap: the truncation ratio above its threshold, or (without one) the mean
    length pressed against the longest length seen (or the configured cap)."""
    if get is None:
        get = _getter(run)
    sustain = rule.get("sustain", 3)
    reward = get(keys.get("reward", ""))
    det = None
    ratio = get(keys.get("truncation_ratio", ""))
    if ratio is not None and len(ratio) >= rule.get("min_points", 5):
        high = [v >= rule["threshold"] for v in ratio.values]
        i = _first_run(high, sustain)
        if i is not None:
            end = _run_end(high, i)
            det = Detection(rule, ratio.key, int(ratio.steps[i]), _median(ratio.values[:max(1, i)]),
                            _median(ratio.values[i:end]), {"truncation_ratio": _median(ratio.values[i:end])}, index=i)
    else:
        mean = get(keys.get("response_length", ""))
        longest = get(keys.get("response_length_max", ""))
        cap = run.config.get("max_response_length")
        if mean is not None and len(mean) >= rule.get("min_points", 5):
            if not cap and longest is not None and len(longest):
                cap = max((v for v in longest.values if math.isfinite(v)), default=math.nan)
            if cap and math.isfinite(float(cap)):
                limit = rule["near_cap"] * float(cap)
                near = [v >= limit for v in mean.values]
                i = _first_run(near, sustain)
                if i is not None:
                    det = Detection(rule, mean.key, int(mean.steps[i]), _median(mean.values[:max(1, i)]),
                                    _median(mean.values[i:]), {"cap": float(cap)}, index=i)
    if det is None:
        return None
    det.numbers["cap"] = det.numbers.get("cap") or run.config.get("max_response_length")
    length = get(keys.get("response_length", ""))
    if length is not None and det.key != length.key:
        det.related.append(length.key)
    if reward is not None:
        r0, r1 = _around(reward, det.step)
        if r0 is not None and r1 is not None:
            det.extra = f"{reward.key} {r0:.3g} -> {r1:.3g}"
            det.numbers.update(reward_before=r0, reward_after=r1)
        det.related.append(reward.key)
    return det


def zero_streak(rule: dict[str, Any], c: Any) -> Detection | None:
    """A run of ``min_steps`` zeros in a row: the first one (the circuit breaker's rule: it stops there), or with
    ``pick: longest`` (text logs, ``logs:`` of the rule) the longest one, the first of equals: a log read after
    the fact names the streak that ended the run rather than an early one it recovered from."""
    c = Points.of(c)
    zero = [v == 0.0 for v in c.values]
    need = rule.get("min_steps", 10)
    if rule.get("pick") == "longest":
        i, best, j = None, 0, 0
        while j < len(zero):
            if zero[j]:
                end = _run_end(zero, j)
                if end - j > best:
                    i, best = j, end - j
                j = end
            else:
                j += 1
        if i is None or best < max(1, need):
            return None
    else:
        i = _first_run(zero, need)
        if i is None:
            return None
    end = _run_end(zero, i)
    before = _median(c.values[max(0, i - 5):i])
    return Detection(rule, c.key, int(c.steps[i]), before, 0.0,
                     {"zero_points": end - i, "until_step": int(c.steps[end - 1]),
                      "ongoing": bool(end == len(c)), "nonzero_before": any(v != 0 for v in c.values[:i])}, index=i)


def flat(rule: dict[str, Any], c: Any) -> Detection | None:
    c = Points.of(c)
    need = rule.get("min_steps", 20)
    if len(c) < need:
        return None
    v = c.values
    same = [False] + [v[j] == v[j - 1] and v[j] != 0 and math.isfinite(v[j]) for j in range(1, len(v))]
    i = _first_run(same, need - 1)
    if i is None:
        return None
    i -= 1  # the run starts at the point the next ones repeat
    return Detection(rule, c.key, int(c.steps[i]), _median(v[max(0, i - 5):i]) if i > 0 else None,
                     float(v[i]), {"flat_points": _run_end(same, i + 1) - i}, index=i)


def diverge(rule: dict[str, Any], val: Any, reward: Any) -> Detection | None:
    """Validation past its peak by ``min_drop`` while the training reward kept rising.

    The peak is that of a 3-point moving average (one noisy evaluation is no peak), the fall is
    the mean of the last 3 evaluations, all of which must sit below the peak; the first step
    named is the evaluation at the smoothed peak, where the fall began."""
    if reward is None or len(val) < rule.get("min_points", 6):
        return None
    val, reward = Points.of(val), Points.of(reward)
    v = val.values
    if not all(math.isfinite(x) for x in v):
        return None
    smooth = [(v[j] + v[j + 1] + v[j + 2]) / 3 for j in range(len(v) - 2)]
    p = max(range(len(smooth)), key=smooth.__getitem__)  # the first of equal peaks
    peak = smooth[p]
    last3 = v[-3:]
    last = sum(last3) / 3
    if p + 3 >= len(v) or peak <= 0:
        return None
    if (peak - last) / abs(peak) < rule["min_drop"] or peak - last < rule["min_abs"] or \
            not all(x < peak - rule["min_abs"] / 2 for x in last3):
        return None
    step = int(val.steps[p + 1])
    i = bisect.bisect_right(reward.steps, step)
    width = max(3, len(reward) // 10)
    r0 = _median(reward.values[max(0, i - width):i])
    r1 = _median(reward.values[-width:])
    if r0 is None or r1 is None or r1 - r0 < rule["min_rise"]:
        return None
    det = Detection(rule, val.key, step, peak, last, {"peak_step": step, "reward_before": r0, "reward_after": r1},
                    [reward.key], index=p + 1)
    det.extra = f"{reward.key} {r0:.3g} -> {r1:.3g}"
    return det


def spike(rule: dict[str, Any], c: Any) -> Detection | None:
    """The first point ``factor`` times the median magnitude of the ``window`` points before it (a bucketed
    curve's bucket peaks). The window is kept sorted (one insert and one removal a point), so a 2,000-point
    curve costs a few milliseconds in pure Python."""
    c = Points.of(c)
    window, factor = rule.get("window", 20), rule["factor"]
    mags = [abs(x) for x in (c.peaks if c.peaks is not None else c.values)]
    # the points before the first NaN/Inf (the non-finite rule reports that one): a spike just before it is
    # its usual prelude, worth naming
    n = next((j for j, m in enumerate(mags) if not math.isfinite(m)), len(mags))
    start = rule.get("min_points", 5)
    if n <= start:
        return None
    recent = sorted(mags[max(0, start - window):start])
    for i in range(start, n):
        k = len(recent)
        h = k // 2
        base = recent[h] if k % 2 else (recent[h - 1] + recent[h]) / 2
        if base > 0 and mags[i] > factor * base:
            return Detection(rule, c.key, int(c.steps[i]), float(base), float(mags[i]),
                             {"median_before": float(base), "value": float(mags[i]), "ratio": float(mags[i] / base)},
                             index=i)
        bisect.insort(recent, mags[i])
        if i >= window:
            del recent[bisect.bisect_left(recent, mags[i - window])]
    return None


def first_nonfinite(rule: dict[str, Any], c: Any) -> Detection | None:
    """A curve's first NaN/Inf (a run's curve noted it before bucketing: its exact step)."""
    c = Points.of(c)
    if c.first_nonfinite is not None:
        step, value = c.first_nonfinite
        i = bisect.bisect_left(c.steps, step)
    else:
        i = next((j for j, v in enumerate(c.values) if not math.isfinite(v)), -1)
        if i < 0:
            return None
        step, value = int(c.steps[i]), c.values[i]
    return Detection(rule, c.key, int(step), _median(c.values[max(0, i - 5):i]), value, {"value": str(value)}, index=i)


def nonfinite(rule: dict[str, Any], run: Run, keys: dict[str, str],
              get: Callable[[str], Points | None] | None = None) -> Detection | None:
    """The earliest NaN/Inf among the rule's concepts' curves."""
    if get is None:
        get = _getter(run)
    best: Detection | None = None
    for concept in rule["concepts"]:
        c = get(keys.get(concept, ""))
        det = None if c is None else first_nonfinite(rule, c)
        if det is not None and (best is None or det.step < best.step):
            best = det
    return best


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


def _getter(run: Run) -> Callable[[str], Points | None]:
    """key -> the run's curve as :class:`Points`, each converted once."""
    cache: dict[str, Points | None] = {}

    def get(key: str) -> Points | None:
        if key not in cache:
            c = run.curves.get(key)
            cache[key] = None if c is None else Points.of(c)
        return cache[key]

    return get


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


_CURVE_CHECKS: dict[str, Callable[[dict[str, Any], Any], Detection | None]] = {
    "falls_below": falls_below, "rises_above": rises_above, "zero_streak": zero_streak, "flat": flat,
    "spike": spike,
}
#: the checks that read curves by concept: text logs run these too (length_cap there from a truncation ratio
#: alone: a log has no configured cap, and no longest-response series)
SERIES_CHECKS = (*_CURVE_CHECKS, "diverge", "length_cap")
_LENGTH_CONCEPTS = ("reward", "truncation_ratio", "response_length", "response_length_max")
CHECKS = (*_CURVE_CHECKS, "length_cap", "diverge", "nonfinite", "stopped")
#: the text-log checks (``tools/logs/metrics.py``) a rule's ``logs:`` may name
LOG_CHECKS = ("zero_reward", "reward_collapse", "nonfinite", "spike", "length_cap", "no_eos")
_NOT_THRESHOLDS = frozenset(("id", "check", "concept", "concepts", "other", "title", "fixes", "logs"))


def check_series(rule: dict[str, Any], get: Callable[[str], Points | None], zero_fired: bool = False) -> Detection | None:
    """A rule whose check reads curves by concept (:data:`SERIES_CHECKS`), ``get`` giving a concept's curve:
    the one dispatch run folders and text logs share. ``flat`` is skipped where a zero streak fired (a curve
    stuck at 0 is that finding, not a flat one)."""
    check = rule["check"]
    if check == "length_cap":
        return length_cap(rule, Run(path="", source="log", name=""), {c: c for c in _LENGTH_CONCEPTS}, get)
    if check == "diverge":
        val = get(rule["concept"])
        return None if val is None else diverge(rule, val, get(rule["other"]))
    c = get(rule["concept"])
    if c is None or (check == "flat" and zero_fired):
        return None
    return _CURVE_CHECKS[check](rule, c)


def series_rules(rules: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The rules text logs run through :func:`check_series`: a curve check (:data:`SERIES_CHECKS`) and no
    text-log check of their own under ``logs:`` (those keep theirs: the zero-reward streak, the spike)."""
    rules = builtin_rules()["rules"] if rules is None else rules
    return [r for r in rules if r.get("check") in SERIES_CHECKS and not r.get("logs")]


def detect(run: Run, vocab: Vocabulary, rules: list[dict[str, Any]] | None = None,
           now: float | None = None) -> tuple[list[Detection], dict[str, str]]:
    """Every rule on ``run``: the detections (in rule order) and the concept -> key map it used."""
    rules = builtin_rules()["rules"] if rules is None else rules
    keys = vocab.assign(list(run.curves), run.framework)
    by_key = _getter(run)

    def by_concept(concept: str) -> Points | None:
        return by_key(keys.get(concept, ""))

    out: list[Detection] = []
    zero_fired = False
    for rule in rules:
        check = rule.get("check")
        if check is None:
            continue  # a text-log rule (``logs:`` only)
        det: Detection | None = None
        if check == "length_cap":  # a run's configured cap too
            det = length_cap(rule, run, keys, by_key)
        elif check in SERIES_CHECKS:
            det = check_series(rule, by_concept, zero_fired)
            zero_fired = zero_fired or (check == "zero_streak" and det is not None)
        elif check == "nonfinite":
            det = nonfinite(rule, run, keys, by_key)
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
    """The shipped rules, validated once per edit (:func:`rlmedic.datafiles.builtin`)."""
    path = Path(__file__).with_name("detectors.yaml")

    def build() -> dict[str, Any]:
        data = read_yaml(path)
        validate(data)
        return data

    return builtin("detectors", [path], [__file__], build)
