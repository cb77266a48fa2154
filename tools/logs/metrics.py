"""Metric streams: parse per-step stats lines into series and spot training pathologies.

Formats understood (the scanner hands over only lines containing a metric keyword):

* AReaL ``StatsLogger``: ``Epoch 1/5 Step 3/233 Train step 3/1165 done.`` followed by a
  grid table of ``│ key │ value │`` cells, with or without a Ray actor prefix
  (``(trainer pid=12) │ ... │``);
* slime: ``step 3: {'train/loss': ..., 'train/grad_norm': ...}`` and
  ``rollout 3: {'rollout/raw_reward': ...}`` dictionaries;
* JSON lines: ``{"step": 3, "actor/pg_loss": 0.1, ...}``;
* generic ``key: value`` / ``key=value`` pairs (verl ``step:3 - actor/pg_loss:0.12``).

Which keys feed which series and which key names betray which framework come from the one
metric vocabulary (``tools/runs/vocabulary.yaml``, read by run folders too); the detection
rules and thresholds from the one detector file (``tools/runs/detectors.yaml``, its rules with
a ``logs:`` check).

Cost: a stats line costs one split or one compiled ``findall`` plus a dict lookup per key
(key kinds are cached), so metric-dense logs scan about as fast as sparse ones. Memory is
bounded: each series keeps at most :data:`MAX_POINTS` points.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

MAX_POINTS = 50_000
#: Series one file may hold, and all files together. The cap used to be 64 in all: a folder of
#: 16 rank logs of five series each left the last three ranks without any (a NaN there went
#: unseen), and made a scan on several processes fall back to one. 512 in all since text logs also keep the
#: series the curve rules read (KL, log-prob gap, staleness, throughput, step time, validation: one to six
#: more a file): the 66 fixture logs of tests/fixtures/logs/signatures went from ~330 series to 388.
MAX_SERIES_PER_FILE = 64
MAX_SERIES = 512
#: Series one file may hold of a kind whose keys are an open family: verl prints validation scores per data
#: source and statistic (``val-core/<source>/<var>/mean@N``, ``maj@N/mean``, ``best@N/mean``...) on its first
#: line (validation before training), which would otherwise take the file's 64 before the training keys
#: (the reward, the loss) show up. The divergence rule reads one.
MAX_SERIES_OF_KIND = {"val_score": 8}

AREAL_STEP = re.compile(r"Train step (\d+)/(\d+) done")
_SLIME_STEP = re.compile(r"(?:^|[\s\]:-])(step|rollout|perf|eval) (\d+): \{")
_VERL_STEP = re.compile(r"(?:^|\s)step:(\d+)\b")
_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|NaN|inf|Inf|-inf|-Inf)"
_DICT_PAIR = re.compile(r"'([\w/.@-]+)':\s*(?:np\.float\d+\(|tensor\()?(" + _NUM + r")")
_KV_PAIR = re.compile(r"(?<![\w/.@-])([A-Za-z_][\w/.@-]*)\s*[:=]\s*(" + _NUM + r")(?![\w.])")
_JSON_PAIR = re.compile(r'"([\w/.@-]+)":\s*(' + _NUM + r")")
_STEP_KEYS = frozenset(("step", "global_step", "_step", "train/step", "training/global_step", "iter", "iteration"))
#: A stats-table cell pair ``│ key │ value │``: what :func:`grid_pairs` finds (tests check the two agree).
_GRID_PAIR = re.compile(r"│ *([^│\s][^│\n]*?) *│ *([^│\s]+) *(?=│)")
_RAY_PREFIX = re.compile(r"^\(\w[\w:./-]*(?: pid=\d+)?[^)]*\)\s?")


def grid_pairs(text: str) -> list[tuple[str, str]]:
    """``_GRID_PAIR.findall(text)``, read off ``text.split("│")``: a 1.5 KB AReaL stats table costs ~12 us
    this way, ~35 us in the regex (its lazy key backtracks at every character of the wide cells).

    The regex's matches start only at a bar; one there takes the cell after it as the key (spaces around
    it dropped; it starts with no whitespace and holds no newline) and the next as the value (one word,
    with a bar after it), then goes on from that bar; where it fails, the search goes on from the next bar.
    """
    segs = text.split("│")
    out = []
    last = len(segs) - 1
    j = 1
    while j < last:
        cell = segs[j]
        key = cell.strip(" ")
        if key and "\n" not in cell and not key[0].isspace():
            value = segs[j + 1].strip(" ")
            if j + 1 < last and value and value.split() == [value]:
                out.append((key, value))
                j += 2
                continue
        j += 1
    return out


@dataclass(slots=True)
class Point:
    step: int
    value: float
    line: int


@dataclass
class Series:
    """One metric key in one file."""

    key: str
    kind: str
    file_index: int
    points: list[Point] = field(default_factory=list)
    dropped: int = 0

    def add(self, point: Point) -> None:
        if len(self.points) >= MAX_POINTS:
            del self.points[: MAX_POINTS // 10]
            self.dropped += MAX_POINTS // 10
        self.points.append(point)


@dataclass
class MetricEvent:
    """An anomaly found in a series, ready to become a Finding."""

    rule: str
    kind: str
    key: str
    file_index: int
    line: int
    step: int
    severity: str
    category: str
    card: str
    summary: str
    numbers: dict[str, Any]
    values: list[tuple[int, float]]
    #: a curve rule of detectors.yaml run on the series by the run folders' own check
    #: (:func:`~rlmedic.tools.runs.detectors.check_series`): its Detection, whose rule carries the fixes
    detection: Any = None


def _points(s: Series) -> Any:
    """A series as the curve checks read it (``detectors.Points``), point for point (the text-log checks count
    printed points: a zero streak of 10 is 10 printed zeros)."""
    from rlmedic.tools.runs.detectors import Points

    pts = s.points
    return Points(s.key, [p.step for p in pts], [p.value for p in pts], lines=[p.line for p in pts])


def _per_step(s: Series) -> Any:
    """A series as the curve checks read it (``detectors.Points``): one point a step, as a run logs it. Points
    of one step in a row (several rollout workers' lines, a step printed twice) are averaged, as a metrics
    logger reduces them (a NaN stays NaN); each keeps the line of its step's first point."""
    from rlmedic.tools.runs.detectors import Points

    steps: list[int] = []
    values: list[float] = []
    lines: list[int] = []
    count = 0
    for p in s.points:
        if steps and steps[-1] == p.step:
            count += 1
            values[-1] += (p.value - values[-1]) / count
            continue
        steps.append(p.step)
        values.append(p.value)
        lines.append(p.line)
        count = 1
    return Points(s.key, steps, values, lines=lines)


class MetricCollector:
    """Feed it candidate lines (``feed``); read series and per-file progress after the scan."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self._kind_cache: dict[str, str | None] = {}
        self._fw_cache: dict[str, str | None] = {}
        self._keys_seen: set[tuple[int, str]] = set()
        self._file_keys: dict[int, set[str]] = {}
        #: file -> framework -> distinct metric keys naming it (``grpo_actor/...`` is AReaL's)
        self.frameworks: dict[int, dict[str, int]] = {}
        self.series: dict[tuple[int, str], Series] = {}
        self.current_step: dict[int, int] = {}
        self.last_step: dict[int, tuple[int, int]] = {}  # file -> (step, line)
        self.total_steps: dict[int, int] = {}
        self.step_lines: dict[int, list[tuple[int, int]]] = {}  # file -> [(line, step)] (bounded)
        self._counters: dict[tuple[int, str], int] = {}
        self._series_per_file: dict[int, int] = {}
        self._series_of_kind: dict[tuple[int, str], int] = {}  # (file, kind) -> series (MAX_SERIES_OF_KIND)

    @functools.cached_property
    def _kinds(self) -> list[tuple[str, list[re.Pattern[str]]]]:
        """Series kind -> key patterns, from the one metric vocabulary (``tools/runs/vocabulary.yaml``, its
        ``log_series``), compiled when the first metric key shows up (most logs have none). A catalog that
        still carries its own ``series`` (a team's override) is read as before."""
        if self.config.get("series"):
            return [(kind, [re.compile(p) for p in patterns]) for kind, patterns in self.config["series"].items()]
        from rlmedic.tools.runs.vocabulary import builtin_vocabulary

        return builtin_vocabulary().log_kinds()

    @functools.cached_property
    def _fw_rules(self) -> list[tuple[str, list[re.Pattern[str]]]]:
        if self.config.get("frameworks"):
            return [(fw, [re.compile(p) for p in patterns]) for fw, patterns in self.config["frameworks"].items()]
        from rlmedic.tools.runs.vocabulary import builtin_vocabulary

        return builtin_vocabulary().log_frameworks()

    def kind_of(self, key: str) -> str | None:
        if key not in self._kind_cache:
            self._kind_cache[key] = next(
                (kind for kind, rxs in self._kinds if any(rx.search(key) for rx in rxs)), None
            )
        return self._kind_cache[key]

    def framework_of(self, key: str) -> str | None:
        if key not in self._fw_cache:
            self._fw_cache[key] = next(
                (fw for fw, rxs in self._fw_rules if any(rx.search(key) for rx in rxs)), None
            )
        return self._fw_cache[key]

    def _note_key(self, file_index: int, key: str) -> None:
        seen = (file_index, key)
        if seen in self._keys_seen or len(self._keys_seen) > self.KEYS_CAP:
            return
        self._keys_seen.add(seen)
        fw = self.framework_of(key)
        if fw:
            counts = self.frameworks.setdefault(file_index, {})
            counts[fw] = counts.get(fw, 0) + 1

    # -- parsing -------------------------------------------------------------------

    def feed(self, file_index: int, line_no: int, text: str) -> None:
        if "│" in text:  # a stats-table row (the common case in metric-dense logs): no step marker on it
            self._pairs(file_index, line_no, self._grid_pairs(text), None)
            return
        if text.startswith("("):  # a Ray actor prefix: "(trainer pid=12) ..."
            text = _RAY_PREFIX.sub("", text, count=1)
        if "Train step" in text:
            m = AREAL_STEP.search(text)
            if m:
                self.step_line(file_index, line_no, int(m.group(1)), int(m.group(2)))
                return
        step: int | None = None
        m2 = _SLIME_STEP.search(text) if ": {" in text else None
        if m2:
            if m2.group(1) == "eval":
                # evaluation numbers are no training curves: only a validation score is kept (its own series,
                # for the reward/validation divergence rule), at the rollout the line names; the step is not moved
                keep = [(k, v) for k, v in _DICT_PAIR.findall(text) if self.kind_of(k) == "val_score"]
                if keep:
                    self._pairs(file_index, line_no, keep, int(m2.group(2)))
                return
            step = int(m2.group(2))
        elif "step:" in text:
            m3 = _VERL_STEP.search(text)
            if m3:
                step = int(m3.group(1))
        if step is not None:
            self._set_step(file_index, step, line_no)
        if "': " in text:
            pairs = _DICT_PAIR.findall(text)
        else:
            pairs = _JSON_PAIR.findall(text) if '":' in text else _KV_PAIR.findall(text)
            if step is None:
                for key, raw in pairs:
                    if key in _STEP_KEYS:
                        try:
                            step = int(float(raw))
                        except ValueError:
                            continue
                        self._set_step(file_index, step, line_no)
                        break
        self._pairs(file_index, line_no, pairs, step)

    def feed_table(self, file_index: int, line_no: int, text: str) -> None:
        """A run of stats-table rows starting at ``line_no``: every cell pair in one compiled pass.

        The per-row work of :meth:`feed` (a call, a decode, a split per row) is what made
        metric-dense logs slow; here a table costs one ``findall`` plus a dict lookup per cell.
        Its points carry the table's first line (one step's stats are one table).
        """
        kinds = self._kind_cache
        seen = self._file_keys.get(file_index)
        if seen is None:
            seen = self._file_keys[file_index] = set()
        step = self.current_step.get(file_index)
        for key, raw in grid_pairs(text):
            kind = kinds[key] if key in kinds else self.kind_of(key)
            if key not in seen:
                seen.add(key)
                self._note_key(file_index, key)
            if kind is None:
                continue
            try:
                value = float(raw)
            except ValueError:
                continue
            series = self.series.get((file_index, key))
            if series is None or step is None or len(series.points) >= MAX_POINTS:
                self._add(file_index, key, kind, value, line_no, step)
                continue
            points = series.points
            if points and points[-1].step == step:
                continue  # the same step printed twice (the table's other half, a repeated table)
            points.append(Point(step, value, line_no))
        if step is not None:
            prev = self.last_step.get(file_index)
            if prev is None or line_no >= prev[1]:
                self.last_step[file_index] = (step, line_no)

    def _pairs(self, file_index: int, line_no: int, pairs: list[tuple[str, str]], step: int | None) -> None:
        """Add the pairs whose key feeds a series (the per-cell hot path: dict lookups, one float())."""
        kinds = self._kind_cache
        seen = self._file_keys.get(file_index)
        if seen is None:
            seen = self._file_keys[file_index] = set()
        at = step if step is not None else self.current_step.get(file_index)
        get_series = self.series.get
        added = False
        for key, raw in pairs:
            if key not in seen:
                seen.add(key)
                self._note_key(file_index, key)
            kind = kinds[key] if key in kinds else self.kind_of(key)
            if kind is None:
                continue
            try:
                value = float(raw)
            except ValueError:
                continue
            series = get_series((file_index, key))
            if series is None or at is None:  # a new series, or points counted per series: the general path
                self._add(file_index, key, kind, value, line_no, step)
                continue
            # what _add does for a series that exists at a known step, without its lookups
            points = series.points
            if points and points[-1].step == at and points[-1].line == line_no:
                continue
            if len(points) >= MAX_POINTS:
                series.add(Point(at, value, line_no))
            else:
                points.append(Point(at, value, line_no))
            added = True
        if added:
            prev = self.last_step.get(file_index)
            if prev is None or line_no >= prev[1]:
                self.last_step[file_index] = (at, line_no)

    @staticmethod
    def _grid_pairs(text: str) -> list[tuple[str, str]]:
        """``│ key │ value │ key │ value │`` -> pairs; whatever precedes the first bar (a Ray prefix) is dropped."""
        return grid_pairs(text)

    def step_line(self, file_index: int, line_no: int, step: int, total: int) -> None:
        """AReaL's ``Train step N/M done`` line, its numbers read by the scanner (as :meth:`feed` would).

        :meth:`_set_step` written out: a long AReaL log has one such line a training step."""
        self.current_step[file_index] = step
        prev = self.last_step.get(file_index)
        if prev is None or line_no >= prev[1]:
            self.last_step[file_index] = (step, line_no)
        lines = self.step_lines.get(file_index)
        if lines is None:
            lines = self.step_lines[file_index] = []
        if not lines or lines[-1][1] != step:
            if len(lines) >= MAX_POINTS:
                del lines[: MAX_POINTS // 10]
            lines.append((line_no, step))
        self.total_steps[file_index] = total

    def _set_step(self, file_index: int, step: int, line_no: int) -> None:
        self.current_step[file_index] = step
        self._progress(file_index, step, line_no)
        lines = self.step_lines.setdefault(file_index, [])
        if not lines or lines[-1][1] != step:
            if len(lines) >= MAX_POINTS:
                del lines[: MAX_POINTS // 10]
            lines.append((line_no, step))

    def _add(self, file_index: int, key: str, kind: str, value: float, line_no: int, step: int | None) -> None:
        skey = (file_index, key)
        series = self.series.get(skey)
        if series is None:
            per_file = self._series_per_file.get(file_index, 0)
            if per_file >= MAX_SERIES_PER_FILE or len(self.series) >= MAX_SERIES:
                return
            if kind in MAX_SERIES_OF_KIND:
                of_kind = self._series_of_kind.get((file_index, kind), 0)
                if of_kind >= MAX_SERIES_OF_KIND[kind]:
                    return
                self._series_of_kind[(file_index, kind)] = of_kind + 1
            self._series_per_file[file_index] = per_file + 1
            series = self.series[skey] = Series(key=key, kind=kind, file_index=file_index)
        if step is None:
            step = self.current_step.get(file_index)
        if step is None:
            step = self._counters.get(skey, 0) + 1
            self._counters[skey] = step
        points = series.points
        if points and points[-1].step == step and points[-1].line == line_no:
            return
        if len(points) >= MAX_POINTS:
            series.add(Point(step, value, line_no))
        else:
            points.append(Point(step, value, line_no))
        prev = self.last_step.get(file_index)
        if prev is None or line_no >= prev[1]:
            self.last_step[file_index] = (step, line_no)

    def _progress(self, file_index: int, step: int, line_no: int) -> None:
        prev = self.last_step.get(file_index)
        if prev is None or line_no >= prev[1]:
            self.last_step[file_index] = (step, line_no)

    # -- one file scanned elsewhere (a worker process) -------------------------------

    #: Keys noted per collector at most (see :meth:`_note_key`).
    KEYS_CAP = 4096

    def file_state(self, file_index: int) -> dict[str, Any]:
        """What this collector learned from one file, as plain data (returned by a scan worker)."""
        return {
            "series": [(s.key, s) for (i, _k), s in self.series.items() if i == file_index],
            "current_step": self.current_step.get(file_index),
            "last_step": self.last_step.get(file_index),
            "total_steps": self.total_steps.get(file_index),
            "step_lines": self.step_lines.get(file_index),
            "counters": {k: n for (i, k), n in self._counters.items() if i == file_index},
            "file_keys": self._file_keys.get(file_index),
            "keys_seen": [k for i, k in self._keys_seen if i == file_index],
            "frameworks": self.frameworks.get(file_index),
        }

    def fits(self, states: list[dict[str, Any]]) -> bool:
        """Whether absorbing ``states`` stays under the collector-wide caps.

        :meth:`_add` stops creating series at :data:`MAX_SERIES` (a worker's own file stops at
        :data:`MAX_SERIES_PER_FILE` as here) and :meth:`_note_key`
        stops noting keys past :attr:`KEYS_CAP`, across all files: files scanned apart
        would each get the whole allowance. Past the caps the caller scans in one process.
        """
        series = len(self.series) + sum(len(st["series"]) for st in states)
        keys = len(self._keys_seen) + sum(len(st["keys_seen"]) for st in states)
        return series < MAX_SERIES and keys < self.KEYS_CAP

    def absorb(self, state: dict[str, Any], file_index: int) -> None:
        """Take one file's :meth:`file_state` as file ``file_index`` (as if this collector had scanned it)."""
        for key, series in state["series"]:
            series.file_index = file_index
            self.series[(file_index, key)] = series
        self._series_per_file[file_index] = len(state["series"])
        for _key, series in state["series"]:
            if series.kind in MAX_SERIES_OF_KIND:
                self._series_of_kind[(file_index, series.kind)] = self._series_of_kind.get((file_index, series.kind), 0) + 1
        for name, target in (("current_step", self.current_step), ("last_step", self.last_step),
                             ("total_steps", self.total_steps), ("step_lines", self.step_lines),
                             ("file_keys", self._file_keys), ("frameworks", self.frameworks)):
            if state[name] is not None:
                target[file_index] = state[name]
        for key, n in state["counters"].items():
            self._counters[(file_index, key)] = n
        self._keys_seen.update((file_index, k) for k in state["keys_seen"])

    # -- queries -------------------------------------------------------------------

    def step_before(self, file_index: int, line_no: int) -> int | None:
        """The last step logged in ``file_index`` before ``line_no``."""
        best = None
        for line, step in self.step_lines.get(file_index, []):
            if line > line_no:
                break
            best = step
        if best is None:
            for s in self.series.values():
                if s.file_index == file_index:
                    for p in s.points:
                        if p.line > line_no:
                            break
                        best = p.step if best is None else max(best, p.step)
        return best

    def steps_logged_after(self, file_index: int, line_no: int) -> int:
        """How many training steps that file logged after ``line_no``: the step lines read after it, or where
        the step numbers rose, their rise (a big file's stats past its budget are read in part, so counting
        the lines read would say 287 steps where 180,000 followed)."""
        read = sum(1 for line, _step in self.step_lines.get(file_index, []) if line > line_no)
        last, at = self.steps_after(file_index, line_no), self.step_before(file_index, line_no)
        return max(read, last - at) if last is not None and at is not None else read

    def steps_after(self, file_index: int, line_no: int) -> int | None:
        """The last step logged after ``line_no`` in that file (training went on), if any."""
        last = self.last_step.get(file_index)
        if last and last[1] > line_no:
            return last[0]
        return None

    def primary(self, kind: str) -> list[Series]:
        """Per file, the series of ``kind`` whose key matches the highest-priority pattern."""
        patterns = [rx for k, rxs in self._kinds if k == kind for rx in rxs]
        best: dict[int, tuple[int, Series]] = {}
        for s in self.series.values():
            if s.kind != kind or not s.points:
                continue
            prio = next((i for i, rx in enumerate(patterns) if rx.search(s.key)), len(patterns))
            cur = best.get(s.file_index)
            if cur is None or prio < cur[0] or (prio == cur[0] and len(s.points) > len(cur[1].points)):
                best[s.file_index] = (prio, s)
        return [s for _p, s in sorted(best.values(), key=lambda t: t[1].file_index)]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for s in self.series.values():
            if s.points:
                finite = [p for p in s.points if math.isfinite(p.value)]
                top = max(finite, key=lambda p: p.value, default=None)
                out.setdefault(s.kind, {})[s.key] = {
                    "points": len(s.points) + s.dropped,
                    "last_step": s.points[-1].step,
                    "last": s.points[-1].value if math.isfinite(s.points[-1].value) else str(s.points[-1].value),
                    "first_step": finite[0].step if finite else s.points[0].step,
                    "first": finite[0].value if finite else None,
                    "max": top.value if top else None,
                    "max_step": top.step if top else None,
                }
        return out

    # -- detection -----------------------------------------------------------------

    def detect(self) -> list[MetricEvent]:
        """The rules of ``tools/runs/detectors.yaml`` that name a text-log check (``logs:``), with the
        catalog's ``rules`` laid over them (``watch --zero-reward-steps`` changes one threshold so)."""
        from rlmedic.tools.runs.detectors import log_rules

        rules = log_rules(self.config.get("rules"))
        events: list[MetricEvent] = []
        for s in self.primary("reward"):
            streak = self._zero_streak(s, rules.get("zero_reward"))
            if streak:
                events.append(streak)
            else:
                collapse = self._collapse(s, rules.get("reward_collapse"))
                if collapse:
                    events.append(collapse)
        if rules.get("nonfinite"):
            for kind in rules["nonfinite"].get("kinds") or ("grad_norm", "loss", "reward", "entropy"):
                for s in self.primary(kind):
                    ev = self._nonfinite(s, rules["nonfinite"])
                    if ev:
                        events.append(ev)
        if rules.get("spike"):
            for kind in rules["spike"].get("kinds") or ("grad_norm", "loss"):
                for s in self.primary(kind):
                    ev = self._spike(s, rules["spike"])
                    if ev:
                        events.append(ev)
        if rules.get("length_cap"):
            for s in self.primary("response_length"):
                ev = self._length_cap(s, rules["length_cap"])
                if ev:
                    events.append(ev)
        if rules.get("no_eos"):
            for s in self.primary("no_eos"):
                ev = self._no_eos(s, rules["no_eos"])
                if ev:
                    events.append(ev)
        events += self._curve_rule_events({ev.file_index for ev in events if ev.rule == "zero_reward"},
                                          {ev.file_index for ev in events if ev.rule in ("no_eos", "length_cap")})
        return events

    def _curve_rule_events(self, zero_files: set[int], length_files: set[int]) -> list[MetricEvent]:
        """The curve rules of detectors.yaml with no text-log check of their own (entropy collapse, KL blow-up,
        log-prob gap, staleness, throughput, step time, flat reward, reward/validation divergence, length cap),
        run per file on its series by the very checks run folders use (``detectors.check_series``: plain lists,
        no numpy). A rule's concept reads the series its ``log_series`` entry names. Not a finding: a flat reward
        where the reward sat at 0 (the zero-reward streak is one), a length cap (a truncation ratio of 0.2 or
        more) where a text log's own length check fired (generations that never stop, a length plateau: the
        same cause, already said)."""
        from rlmedic.tools.runs.detectors import Points, check_series, series_rules
        from rlmedic.tools.runs.vocabulary import builtin_vocabulary

        rules = series_rules()
        if not rules or not self.series:
            return []
        kind_for: dict[str, str] = {}
        for kind, concept in builtin_vocabulary().log_series.items():
            kind_for.setdefault(concept, kind)
        primaries: dict[str, dict[int, Series]] = {}
        points: dict[int, Points] = {}

        def series_of(kind: str, file_index: int) -> Series | None:
            if kind not in primaries:
                primaries[kind] = {s.file_index: s for s in self.primary(kind)}
            return primaries[kind].get(file_index)

        events: list[MetricEvent] = []
        for file_index in sorted({s.file_index for s in self.series.values()}):
            by_key: dict[str, Series] = {}

            def get(concept: str) -> Points | None:
                s = series_of(kind_for.get(concept, concept), file_index)  # noqa: B023 - used in this iteration
                if s is None:
                    return None
                if id(s) not in points:
                    points[id(s)] = _per_step(s)
                    by_key[s.key] = s  # noqa: B023
                return points[id(s)]

            for rule in rules:
                if rule["check"] == "length_cap" and file_index in length_files:
                    continue
                det = check_series(rule, get, zero_fired=file_index in zero_files)
                if det is None or det.index is None:
                    continue
                s, pts, i = by_key[det.key], points[id(by_key[det.key])], det.index
                events.append(MetricEvent(
                    rule=str(rule["id"]), kind=s.kind, key=s.key, file_index=file_index, line=pts.lines[i],
                    step=pts.steps[i], severity=rule["severity"], category=rule["category"],
                    card=str(rule.get("card") or ""), summary=f"{rule['title']} ({s.key} from step {det.step})",
                    numbers={"step": det.step, "before": det.before, "after": det.after, **det.numbers},
                    values=list(zip(pts.steps[max(0, i - 3):i + 4], pts.values[max(0, i - 3):i + 4])),
                    detection=det))
        return events

    @staticmethod
    def _window(s: Series, index: int, before: int = 3, after: int = 3) -> list[tuple[int, float]]:
        lo, hi = max(0, index - before), min(len(s.points), index + after + 1)
        return [(p.step, p.value) for p in s.points[lo:hi]]

    @staticmethod
    def _event(name: str, s: Series, index: int, rule: dict[str, Any], *, kind: str, severity: str, category: str,
               card: str, summary: str, numbers: dict[str, Any]) -> MetricEvent:
        """The event of rule ``name`` at point ``index`` of ``s`` (the rule's table entry may override severity
        and category)."""
        p = s.points[index]
        return MetricEvent(
            rule=name,
            kind=kind,
            key=s.key,
            file_index=s.file_index,
            line=p.line,
            step=p.step,
            severity=rule.get("severity", severity),
            category=rule.get("category", category),
            card=card,
            summary=summary,
            numbers=numbers,
            values=MetricCollector._window(s, index),
        )

    def _zero_streak(self, s: Series, rule: dict[str, Any] | None) -> MetricEvent | None:
        """The run folders' ``detectors.zero_streak`` on the series' points, with the longest streak
        (``pick: longest`` under the rule's ``logs:``)."""
        if not rule:
            return None
        from rlmedic.tools.runs.detectors import zero_streak

        det = zero_streak(rule, _points(s))
        if det is None or det.index is None:
            return None
        need = int(rule.get("min_steps", 10))
        start, length = det.index, int(det.numbers["zero_points"])
        first, last = s.points[start], s.points[start + length - 1]
        prior = [p.value for p in s.points[:start] if math.isfinite(p.value)]
        ongoing = bool(det.numbers["ongoing"])
        if prior:
            how = f"dropped to 0 at step {first.step} (it was {prior[-1]:.3g} just before)"
        else:
            how = f"was 0 from the first logged step ({first.step})"
        summary = (
            f"{s.key} {how} and stayed 0 for {length} consecutive steps"
            f"{' until the log ends' if ongoing else f' (to step {last.step})'}: every rollout is failing "
            f"(a dead or disconnected inference server, or a broken reward function / labels); "
            f"a circuit breaker stops after {need}"
        )
        return self._event(
            "zero_reward", s, start, rule, kind="reward", severity="error", category="reward_collapse",
            card=rule.get("card", "zero-reward-circuit-breaker"), summary=summary,
            numbers={"first_zero_step": first.step, "zero_steps": length, "last_zero_step": last.step,
                     "reward_before": prior[-1] if prior else None},
        )

    def _collapse(self, s: Series, rule: dict[str, Any] | None) -> MetricEvent | None:
        if not rule:
            return None
        window, drop_to = int(rule.get("window", 5)), float(rule.get("drop_to", 0.2))
        min_peak, sustain = float(rule.get("min_peak", 0.05)), int(rule.get("sustain", 5))
        vals = [p.value for p in s.points]
        if len(vals) < window + sustain or any(not math.isfinite(v) for v in vals):
            return None
        avgs = [sum(vals[i - window + 1 : i + 1]) / window for i in range(window - 1, len(vals))]
        peak = -math.inf
        peak_i = 0
        below = 0
        for j, a in enumerate(avgs):
            if a > peak:
                peak, peak_i = a, j
            if peak >= min_peak and a < peak * drop_to:
                below += 1
                if below >= sustain and j == len(avgs) - 1:
                    start = j - below + 1 + window - 1
                    return self._event(
                        "reward_collapse", s, start, rule, kind="reward", severity="error", category="reward_collapse",
                        card=rule.get("card", "reward-collapse"),
                        summary=(
                            f"{s.key} collapsed: its {window}-step average fell from {peak:.3g} "
                            f"(step {s.points[peak_i + window - 1].step}) to {a:.3g} and stayed low for {below} steps"
                        ),
                        numbers={"peak_avg": round(peak, 4), "current_avg": round(a, 4), "collapse_step": s.points[start].step},
                    )
            else:
                below = 0
        return None

    @staticmethod
    def _nonfinite(s: Series, rule: dict[str, Any]) -> MetricEvent | None:
        """The run folders' ``detectors.first_nonfinite`` on the series' points."""
        from rlmedic.tools.runs.detectors import first_nonfinite

        det = first_nonfinite(rule, _points(s))
        if det is None or det.index is None:
            return None
        p = s.points[det.index]
        count = sum(1 for q in s.points if not math.isfinite(q.value))
        return MetricCollector._event(
            "nonfinite", s, det.index, rule, kind=s.kind, severity="error", category="nan_loss",
            card=(rule.get("cards") or {}).get(s.kind, "nan-loss-explosion"),
            summary=f"{s.key} became {p.value} at step {p.step} ({count} non-finite value(s) in total)",
            numbers={"step": p.step, "nonfinite_count": count},
        )

    @staticmethod
    def _spike(s: Series, rule: dict[str, Any]) -> MetricEvent | None:
        """The run folders' ``detectors.spike`` on the series' points (those before its first NaN/Inf)."""
        from rlmedic.tools.runs.detectors import spike

        det = spike({**rule, "window": int(rule.get("window", 20)), "factor": float(rule.get("factor", 10)),
                     "min_points": int(rule.get("min_points", 5))}, _points(s))
        if det is None or det.index is None:
            return None
        p, base = s.points[det.index], float(det.numbers["median_before"])
        return MetricCollector._event(
            "spike", s, det.index, rule, kind=s.kind, severity="warning", category="nan_loss",
            card=(rule.get("cards") or {}).get(s.kind, "high-gradient-norm"),
            summary=(
                f"{s.key} spiked to {p.value:.4g} at step {p.step}, "
                f"{abs(p.value) / base:.0f}x the recent median ({base:.3g})"
            ),
            numbers={"step": p.step, "value": p.value, "median_before": round(base, 6)},
        )

    @staticmethod
    def _length_cap(s: Series, rule: dict[str, Any]) -> MetricEvent | None:
        """The response length rose to a ceiling and stayed there: the generation limit is cutting responses."""
        values = [p for p in s.points if math.isfinite(p.value)]
        need = int(rule.get("min_steps", 3))
        if len(values) < need + 1:
            return None
        top = max(p.value for p in values)
        start = values[0].value
        if top <= 0 or start <= 0 or top < float(rule.get("rise", 1.5)) * start:
            return None
        floor = float(rule.get("plateau", 0.97)) * top
        run = 0
        for i, p in enumerate(values):
            run = run + 1 if p.value >= floor else 0
            if run >= need:
                first = i - run + 1
                q = values[first]
                index = s.points.index(q)
                return MetricCollector._event(
                    "length_cap", s, index, rule, kind="response_length", severity="warning",
                    category="reward_collapse", card=rule.get("card", "response-length-cap"),
                    summary=(f"{s.key} rose from {start:g} to {q.value:g} at step {q.step} and stayed at its "
                             f"ceiling (max {top:g}): responses are running into the generation length limit"),
                    numbers={"step": q.step, "value": q.value, "first": start, "max": top},
                )
        return None

    @staticmethod
    def _no_eos(s: Series, rule: dict[str, Any]) -> MetricEvent | None:
        threshold, need = float(rule.get("threshold", 0.9)), int(rule.get("min_steps", 3))
        run = 0
        for i, p in enumerate(s.points):
            run = run + 1 if p.value >= threshold else 0
            if run >= need:
                start = i - run + 1
                q = s.points[start]
                return MetricCollector._event(
                    "no_eos", s, start, rule, kind="no_eos", severity="warning", category="sglang_crash",
                    card=rule.get("card", "generation-never-stops"),
                    summary=(
                        f"{s.key} is >= {threshold:g} from step {q.step}: generations hit the length limit "
                        f"instead of stopping (stop tokens not set for this model?)"
                    ),
                    numbers={"step": q.step, "value": q.value},
                )
        return None
