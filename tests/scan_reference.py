"""The metric feeding path of the log scanner as it was before issue 30's bulk work (commit 49b0f3a): the oracle
of ``tests/test_scan_equivalence.py``.

Kept verbatim (the two classes below override only the functions that changed): the region loop that
built every candidate line's ids and fed every stats line through one call each, and the collector's
feeding functions. Everything else (the engines, signatures, the collector's vocabulary and detectors)
is the current code, so the comparison sees only what the fast path changed. Below the metric budget
(:data:`~rlmedic.tools.logs.scan.METRIC_LINES_FULL` stats lines of one file) the two must agree exactly.
"""

from __future__ import annotations

import re
from typing import Any

from rlmedic.tools.logs.metrics import MAX_POINTS, MAX_SERIES, MAX_SERIES_OF_KIND, MAX_SERIES_PER_FILE, MetricCollector, Point, Series
from rlmedic.tools.logs.metrics import AREAL_STEP as _AREAL_STEP, _DICT_PAIR, _GRID_PAIR, _JSON_PAIR, _KV_PAIR, _RAY_PREFIX, _SLIME_STEP
from rlmedic.tools.logs.metrics import _STEP_KEYS, _VERL_STEP
from rlmedic.tools.logs.scan import _BAR, _METRIC_ONLY, _NON_FINITE_ONLY, FileInfo, Scanner, clean_line

_NAN_OR_INF = re.compile(rb"(?i)nan|inf")
METRIC_LINES_FULL = 50_000  # the budget of 49b0f3a


class ReferenceScanner(Scanner):
    """The scanner with its region loop of commit 49b0f3a (one line at a time, every stats line fed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the engine of 49b0f3a reported literals only: leave out the reports of non-finite values
        scan, extra = self.engine.scan, {i for i, owners in enumerate(self.engine.owners) if owners == _NON_FINITE_ONLY}
        self.engine.scan = lambda buf, start, end: [m for m in scan(buf, start, end) if m[1] not in extra]  # type: ignore[method-assign]

    def _scan_region(self, buf: bytearray, start: int, end: int, filled: int, line_no: int, info: FileInfo,
                     eof: bool = False) -> int:
        matches = self.engine.scan(buf, start, end)
        counted = start
        owners = self._owners
        on_metric = self.on_metric
        on_table = self.on_table
        i = 0
        n = len(matches)
        while i < n:
            pos = matches[i][0]
            ls = buf.rfind(b"\n", start, pos) + 1
            if ls < start:
                ls = start
            le = buf.find(b"\n", pos, end)
            if le < 0:
                le = end
            ids: set[str] = set()
            while i < n and matches[i][0] < le:
                ids |= owners[matches[i][1]]
                i += 1
            line_no += buf.count(b"\n", counted, ls)
            counted = ls
            if on_table is not None and "#metric" in ids and buf.find(_BAR, ls, min(le, ls + 200)) >= 0:
                # a stats-table row: hand the whole table to the collector at once (one decode, one
                # compiled findall), then go on after it; other signatures' hits inside it still count
                block_end = self._table_end(buf, ls, end)
                if block_end > le:
                    text = buf[ls:block_end].decode("utf-8", errors="replace")
                    if "\x1b" not in text and "\r" not in text:
                        on_table(info.index, line_no, text)
                        ids.discard("#metric")
                        if ids:
                            self._handle_line(buf, ls, le, filled, line_no, ids, info)
                        while i < n and matches[i][0] < block_end:
                            pos = matches[i][0]
                            mids = owners[matches[i][1]] - _METRIC_ONLY
                            if mids:  # rare: a signature literal inside the table
                                ls2 = buf.rfind(b"\n", start, pos) + 1
                                le2 = buf.find(b"\n", pos, end)
                                le2 = end if le2 < 0 else le2
                                line_no += buf.count(b"\n", counted, ls2)
                                counted = ls2
                                self._handle_line(buf, ls2, le2, filled, line_no, set(mids), info)
                            i += 1
                        continue
            if on_metric is not None and len(ids) == 1 and "#metric" in ids:
                if self._metric_due(info.index, buf, ls, le):
                    on_metric(info.index, line_no, clean_line(buf[ls:le]))  # a stats line only: the hot path
            else:
                self._handle_line(buf, ls, le, filled, line_no, ids, info)
        line_no += buf.count(b"\n", counted, end)
        return line_no

    def _metric_due(self, file_index: int, buf: bytearray, ls: int, le: int) -> bool:
        """Whether this stats line goes to the collector (all of a file's first METRIC_LINES_FULL, then a
        thinning share, and every line with a nan or an inf in it)."""
        seen = self._metric_lines.get(file_index, 0) + 1
        self._metric_lines[file_index] = seen
        if seen <= METRIC_LINES_FULL:
            return True
        stride = 1 << min(20, (seen // METRIC_LINES_FULL).bit_length())
        if seen % stride == 0:
            return True
        return _NAN_OR_INF.search(buf, ls, le) is not None


class ReferenceCollector(MetricCollector):
    """The collector with its feeding functions of commit 49b0f3a."""

    def feed(self, file_index: int, line_no: int, text: str) -> None:
        if "│" in text:  # a stats-table row (the common case in metric-dense logs): no step marker on it
            self._pairs(file_index, line_no, self._grid_pairs(text), None)
            return
        if text.startswith("("):  # a Ray actor prefix: "(trainer pid=12) ..."
            text = _RAY_PREFIX.sub("", text, count=1)
        if "Train step" in text:
            m = _AREAL_STEP.search(text)
            if m:
                self._set_step(file_index, int(m.group(1)), line_no)
                self.total_steps[file_index] = int(m.group(2))
                return
        step: int | None = None
        m2 = _SLIME_STEP.search(text) if ": {" in text else None
        if m2:
            if m2.group(1) == "eval":
                return  # evaluation numbers are not training curves
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
        for key, raw in _GRID_PAIR.findall(text):
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
            self._add(file_index, key, kind, value, line_no, step)

    @staticmethod
    def _grid_pairs(text: str) -> list[tuple[str, str]]:
        """``│ key │ value │ key │ value │`` -> pairs; whatever precedes the first bar (a Ray prefix) is dropped."""
        return _GRID_PAIR.findall(text)

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
            if kind in MAX_SERIES_OF_KIND:  # a cap added with the curve rules' series (not the fast path's work)
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

