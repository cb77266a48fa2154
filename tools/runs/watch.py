"""Watch live W&B and TensorBoard run folders (and metric dumps) as ``rlmedic watch`` follows a log.

:class:`RunWatcher` is a :class:`~rlmedic.tools.logs.watch.Ticking` as the log
:class:`~rlmedic.tools.logs.watch.Watcher` is (one ``run`` loop; its own ``tick``) and sends the same alerts. On a tick it looks at the sizes and modification times of each run's
files; only a run whose files changed is read again and checked with the rules of
``detectors.yaml``. One alert per incident: an incident is its rule and its first step, so
a collapse found again on the next tick is not posted twice. A run whose files stop
changing for ``stall_minutes`` (and many step intervals) with no exit record is the
stopped-run check, alerted once. Log paths given beside the runs, and a W&B run's
``files/output.log``, are followed by the log watcher, whose alerts come through too.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any, Callable

from rlmedic.redact import redact
from rlmedic.tools.logs.watch import Alert, Ticking, WatchOptions, Watcher

_KINDS = {"zero-reward": "zero_reward", "nonfinite": "nan", "grad-norm-spike": "grad_spike", "run-stopped": "stall"}


class RunWatcher(Ticking):
    def __init__(self, paths: list[str], options: WatchOptions | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        from rlmedic.tools.runs.locate import run_kind

        self.options = options or WatchOptions()
        self.clock = clock
        self.runs: list[str] = []
        logs: list[str] = []
        for p in paths:
            (self.runs if run_kind(Path(p)) else logs).append(p)
        self.logs = logs
        self.log_watcher: Watcher | None = None
        self.seen: dict[str, tuple[Any, ...]] = {}
        self.alerted: set[str] = set()
        self.last: dict[str, Any] = {}

    # -- what changed -------------------------------------------------------------

    @staticmethod
    def _signature(path: str) -> tuple[Any, ...]:
        """Sizes and modification times of the files that make up the run (cheap: stat calls only)."""
        out = []
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d not in ("tmp", "logs", ".cache")]
            for f in files:
                try:
                    st = os.stat(os.path.join(root, f))
                except OSError:
                    continue
                out.append((f, st.st_size, st.st_mtime_ns))
            if len(out) > 2000:
                break
        if not out and os.path.isfile(path):
            st = os.stat(path)
            out.append((path, st.st_size, st.st_mtime_ns))
        return tuple(sorted(out))

    def _rules(self) -> list[dict[str, Any]]:
        from rlmedic.tools.runs.detectors import builtin_rules

        rules = copy.deepcopy(builtin_rules()["rules"])
        for r in rules:
            if r["id"] == "zero-reward":
                r["min_steps"] = int(self.options.zero_reward_steps)
            if r["id"] == "run-stopped" and self.options.stall_minutes > 0:
                r["stale_s"] = self.options.stall_minutes * 60
        return [r for r in rules if r["id"] != "run-stopped" or self.options.stall_minutes > 0]

    # -- one tick ----------------------------------------------------------------

    def tick(self) -> list[Alert]:
        from rlmedic.tools.runs.detectors import detect
        from rlmedic.tools.runs.diagnose import finding_for, load_run
        from rlmedic.tools.runs.locate import expand, run_kind
        from rlmedic.tools.runs.vocabulary import builtin_vocabulary

        alerts: list[Alert] = []
        now = self.clock()
        for path in self.runs:
            kind = run_kind(Path(path))
            if kind is None:
                continue
            for sub_kind, sub in expand(kind, Path(path), False):
                key = str(sub)
                sig = self._signature(key)
                stale_check = key in self.last  # an unchanged run is checked only for having stopped
                if sig == self.seen.get(key) and stale_check:
                    run = self.last[key]
                    rules = [r for r in self._rules() if r.get("check") == "stopped"]
                else:
                    self.seen[key] = sig
                    try:
                        run = load_run(sub_kind, sub)
                    except Exception:  # noqa: BLE001 - a half-written file: the next tick reads it again
                        continue
                    self.last[key] = run
                    rules = self._rules()
                    self._follow_console(run)
                dets, _ = detect(run, builtin_vocabulary(), rules, now=now)
                fresh = []
                for det in dets:
                    incident = f"{key}|{det.id}|{det.step if det.id != 'run-stopped' else 'stopped'}"
                    if incident not in self.alerted:
                        self.alerted.add(incident)
                        fresh.append((incident, det))
                if fresh:  # what began first leads; what followed in the same look is named in its alert
                    fresh.sort(key=lambda p: (p[1].step, p[1].id == "run-stopped"))
                    alert = self._alert(fresh[0][0], finding_for(fresh[0][1], run))
                    if len(fresh) > 1:
                        alert.summary += "; then " + "; ".join(
                            f"{d.rule['title']} ({d.key} from step {d.step})" for _i, d in fresh[1:])
                    alerts.append(alert)
                if not dets or all(d.id != "run-stopped" for d in dets):  # moving again: a later stop is new
                    self.alerted.discard(f"{key}|run-stopped|stopped")
        if self.log_watcher is None and self.logs:
            self.log_watcher = Watcher(self.logs, self.options)
        if self.log_watcher is not None:
            alerts += self.log_watcher.tick()
        return alerts

    def _follow_console(self, run: Any) -> None:
        if run.log_file and run.log_file not in self.logs:
            self.logs.append(run.log_file)
            if self.log_watcher is not None:
                self.log_watcher.close()
            self.log_watcher = None  # made again with the new file on this tick

    @staticmethod
    def _alert(key: str, finding: Any) -> Alert:
        kind = _KINDS.get(finding.id, finding.id.replace("-", "_"))
        return Alert(key=key, kind=kind, title=f"{finding.summary.split(' (', 1)[0]} ({finding.id}, {finding.category})",
                     summary=redact(finding.summary), file=finding.file, line=None,
                     evidence=redact(str(finding.evidence.get("excerpt") or "")),
                     fixes=[str(f) for f in finding.fixes[:3]],
                     sources=[str(c) for c in finding.citations] + [str(c) for f in finding.fixes[:1] for c in f.citations],
                     severity=finding.severity)

    def close(self) -> None:
        if self.log_watcher is not None:
            self.log_watcher.close()
