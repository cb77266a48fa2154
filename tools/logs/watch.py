"""Watch live training logs and raise one alert per incident.

:class:`Watcher` turns the lines :class:`~rlmedic.tools.logs.follow.Follower` delivers into
alerts. It keeps a bounded window of each file's recent lines and, on a tick where new
lines arrived, diagnoses the windows of the whole run together with the same signature
catalog and metric rules as ``rlmedic diagnose`` (the zero-reward threshold can be
changed). So a failure signature (OOM, NCCL timeout, a dead SGLang server...), the
zero-reward circuit breaker, a NaN loss and a gradient-norm spike are found exactly as
the offline diagnosis finds them, and a stall (no new training step for M minutes) is
found from the clock.

One alert per incident: a failure is keyed by its finding id and the file and absolute
line of its first occurrence (re-diagnosing a sliding window finds it again, never
re-alerts it); a metric incident (a zero-reward streak, a spike) stays one incident
while it is still in the window; a stall is one incident until training moves again.
Nothing is read when nothing was written, so an idle watch costs a ``stat`` per file
per tick. Alerts carry the diagnosis, the evidence line, the fix and, when the run's
checkpoint root is known, the checkpoints tool's recovery plan; their text is redacted.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rlmedic.redact import redact, redact_value
from rlmedic.tools.logs.follow import Follower

#: Lines and characters of each file's window that is diagnosed (the streak thresholds
#: must fit in it: 10 steps of AReaL stats tables are ~600 lines).
WINDOW_LINES = 3000
WINDOW_CHARS = 512 << 10
#: Most characters diagnosed per tick over all files with new lines (many busy rank logs
#: share it, each keeping at least :data:`MIN_SHARE`): bounds the CPU of a busy tick.
TICK_CHARS = 4 << 20
MIN_SHARE = 64 << 10
#: Diagnosis findings that describe a finished log, not a live one (the stall check replaces them).
_NOT_LIVE = {"probable-interruption", "no-recover-checkpoint"}
#: Remembered incident keys (oldest forgotten first): memory stays bounded on an endless log.
MAX_KEYS = 4096


@dataclass
class WatchOptions:
    interval: float = 10.0
    stall_minutes: float = 30.0
    zero_reward_steps: int = 10
    checkpoints: str | None = None
    from_start: bool = True


@dataclass
class Alert:
    """One incident, ready to post: ``text`` (plain, redacted) and structured fields."""

    key: str
    kind: str  # failure | zero_reward | nan | grad_spike | stall | ...
    title: str
    summary: str
    file: str = ""
    line: int | None = None
    evidence: str = ""
    fixes: list[str] = field(default_factory=list)
    recovery: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    severity: str = "error"
    #: "Known issue owner/repo#N, fixed in ...: upgrade ..." when a known-issue record matches the window
    known: str = ""
    #: "Fixed upstream after your verl 0.7.0: owner/repo#N ..." when a synced commit matches the traceback
    upstream: str = ""

    def text(self, *, slack: bool = True) -> str:
        """The alert as text; ``slack=False`` leaves out Slack's emoji shortcode (a terminal shows it raw)."""
        lines = [f"{':rotating_light: ' if slack else ''}rlmedic watch: {self.title}", self.summary]
        if self.known:
            lines.append(self.known)
        if self.upstream:
            lines.append(self.upstream)
        if self.evidence:
            lines.append(f"Evidence: {self.evidence}")
        if self.fixes:
            lines.append("Fix: " + self.fixes[0])
            lines += [f"  also: {f}" for f in self.fixes[1:3]]
        if self.recovery:
            lines.append("Recovery plan:")
            lines += [f"  {r}" for r in self.recovery]
        if self.sources:
            lines.append("Sources: " + "; ".join(self.sources[:4]))
        return redact("\n".join(lines))

    def to_dict(self) -> dict[str, Any]:
        return redact_value({**dataclasses.asdict(self), "text": self.text()})


@dataclass
class _FileWindow:
    path: Path
    file_id: str
    lines: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=WINDOW_LINES))
    chars: int = 0

    def add(self, first: int, new: list[str]) -> None:
        for n, text in enumerate(new, first):
            if len(self.lines) == self.lines.maxlen:
                self.chars -= len(self.lines[0][1]) + 1
            self.lines.append((n, text))
            self.chars += len(text) + 1
        while self.chars > WINDOW_CHARS and len(self.lines) > 1:
            self.chars -= len(self.lines.popleft()[1]) + 1

    def clear(self) -> None:
        self.lines.clear()
        self.chars = 0

    def text(self, limit: int = WINDOW_CHARS) -> tuple[str, int]:
        """The newest lines, at most ``limit`` characters, and how many lines were left out before them."""
        kept, size = 0, 0
        for _n, t in reversed(self.lines):
            if size + len(t) + 1 > limit and kept:
                break
            size += len(t) + 1
            kept += 1
        skip = len(self.lines) - kept
        return "\n".join(t for _n, t in list(self.lines)[skip:]) + "\n", skip

    def absolute(self, rel_line: int) -> tuple[int, str]:
        """The file's own line number and text for line ``rel_line`` (1-based) of :meth:`text`."""
        if not self.lines:
            return rel_line, ""
        idx = min(max(rel_line - 1, 0), len(self.lines) - 1)
        return self.lines[idx]


def _known_issue(window: _FileWindow) -> Any:
    """The known-issue record the window's lines match for certain (exact string, regex, exception), or None."""
    from rlmedic.knowledge.known import leading, match

    try:
        found = leading(match([window.text(KNOWN_CHARS)[0]], k=3))
    except Exception:  # noqa: BLE001 - an alert must go out even if the records cannot be read
        return None
    return found[0] if found else None


#: Characters of a failed file's window matched against the known-issue records.
KNOWN_CHARS = 256 << 10


def _kind(finding: Any) -> str:
    fid = finding.id
    if fid == "zero-reward-streak":
        return "zero_reward"
    if fid.startswith("nonfinite-"):
        return "nan"
    if fid.endswith("-spike"):
        return "grad_spike" if "grad" in fid else "loss_spike"
    if fid == "reward-collapse":
        return "reward_collapse"
    return "failure"


class Ticking:
    """The loop both watchers share (this one of logs, ``tools/runs/watch.py``'s of run folders): tick every
    ``options.interval`` seconds, hand each alert to the sink, close what was opened on the way out."""

    options: WatchOptions

    def tick(self) -> list[Alert]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the watcher holds open (files followed)."""

    def run(self, sink: Callable[[Alert], None], *, stop: threading.Event | None = None, once: bool = False) -> int:
        """Tick every ``interval`` seconds (sleeping in between) until ``stop`` is set; returns alerts sent."""
        stop = stop or threading.Event()
        sent = 0
        try:
            while True:
                for alert in self.tick():
                    sink(alert)
                    sent += 1
                if once or stop.wait(self.options.interval):
                    return sent
        finally:
            self.close()


class Watcher(Ticking):
    """Follow ``paths`` and produce :class:`Alert` objects from :meth:`tick`."""

    def __init__(self, paths: list[str], options: WatchOptions | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options or WatchOptions()
        self.follower = Follower(paths, from_start=self.options.from_start)
        self.clock = clock
        self.windows: dict[str, _FileWindow] = {}
        self.alerted: OrderedDict[str, None] = OrderedDict()
        self.active_metric: set[str] = set()
        self.last_step: int | None = None
        self.last_progress = clock()
        self.failed_since_progress = False
        self.finished = False
        self.stalled = False

    # -- one tick ----------------------------------------------------------------

    def tick(self) -> list[Alert]:
        alerts: list[Alert] = []
        batches = self.follower.poll()
        dirty: set[str] = set()
        for batch in batches:
            dirty.add(batch.file_id)
            window = self.windows.get(batch.file_id)
            if window is None:
                window = self.windows[batch.file_id] = _FileWindow(batch.path, batch.file_id)
            window.path = batch.path
            if batch.restarted and batch.first_line == 1:
                window.clear()
                self._forget(batch.file_id)
            window.add(batch.first_line, batch.lines)
        live = self.follower.file_ids()
        for fid in [f for f in self.windows if f not in live]:
            del self.windows[fid]
        if batches:
            if self.last_step is None:
                self.last_progress = self.clock()  # no step seen yet: any output counts as progress
            alerts += self._diagnose(dirty)
        alerts += self._stall()
        return alerts

    def _forget(self, file_id: str) -> None:
        for key in [k for k in self.alerted if k.startswith(file_id + "|")]:
            del self.alerted[key]
        self.active_metric = {k for k in self.active_metric if not k.startswith(file_id + "|")}

    def _diagnose(self, dirty: set[str]) -> list[Alert]:
        """Diagnose the windows of the files that got new lines, together (one run, one root).

        Through the registry like every other caller: the windows are streams this front door
        vouches for (``ToolContext.streams``), so the result passes the one redaction step."""
        from rlmedic.tools.registry import REGISTRY, ToolContext
        from rlmedic.tools.logs.scan import Source

        windows = [w for fid, w in self.windows.items() if fid in dirty and w.lines]
        if not windows:
            return []
        share = max(MIN_SHARE, TICK_CHARS // len(windows))
        by_name: dict[str, _FileWindow] = {}
        texts, skips = [], {}
        for w in windows:
            text, skip = w.text(share)
            by_name[str(w.path)] = w
            skips[str(w.path)] = skip
            texts.append((str(w.path), text))
        ctx = ToolContext.for_roots([], env_roots=False)
        ctx.streams = {name: Source(name=name, data=text.encode("utf-8", errors="replace")) for name, text in texts}
        result = REGISTRY.call("diagnose", {"paths": list(ctx.streams),
                                            "zero_reward_steps": int(self.options.zero_reward_steps)}, ctx)
        if not result.ok:
            return []  # nothing textual in the windows (binary output)
        diagnosis = result.value
        from rlmedic.tools.upstream import root_exception

        self._upstream = diagnosis.stats.get("upstream_fixes") or []
        root = diagnosis.root_finding
        matched = root_exception(([root] if root is not None else []) + list(diagnosis.findings))
        self._upstream_frames = matched.get("frames") if matched else None
        step = diagnosis.stats.get("last_step")
        if step is not None and step != self.last_step:
            self.last_step = step
            self.last_progress = self.clock()
            self.failed_since_progress = False
            self.stalled = False
        self.finished = bool(diagnosis.stats.get("clean_shutdown"))
        alerts: list[Alert] = []
        metric_now: set[str] = set()
        for finding in diagnosis.findings:
            if not self._alertable(finding):
                continue
            window = by_name.get(finding.file)
            if window is None:
                continue
            line, text = window.absolute((finding.line or 1) + skips[finding.file])
            metric = str(finding.evidence.get("signature", "")).startswith("metric:")
            if metric:
                key = f"{window.file_id}|{finding.id}"
                metric_now.add(key)
                if key in self.active_metric:
                    continue
            else:
                key = f"{window.file_id}|{finding.id}|{line}"
                if key in self.alerted:
                    continue
            self._remember(key)
            if _kind(finding) == "failure":
                self.failed_since_progress = True
            alerts.append(self._alert(key, finding, window, line, text))
        diagnosed = {w.file_id for w in windows}
        self.active_metric = {k for k in self.active_metric if k.split("|", 1)[0] not in diagnosed} | metric_now
        return alerts

    @staticmethod
    def _alertable(finding: Any) -> bool:
        from rlmedic.types import severity_rank

        if finding.id in _NOT_LIVE or finding.root is not None:  # cascades are folded into their root
            return False
        if finding.evidence.get("role") == "marker":
            return False
        return severity_rank(finding.severity) <= severity_rank("error") or finding.id.endswith("-spike")

    def _remember(self, key: str) -> None:
        self.alerted[key] = None
        while len(self.alerted) > MAX_KEYS:
            self.alerted.popitem(last=False)

    def _alert(self, key: str, finding: Any, window: _FileWindow, line: int, text: str) -> Alert:
        kind = _kind(finding)
        titles = {"failure": "the run failed", "zero_reward": "zero-reward circuit breaker",
                  "nan": "non-finite loss / gradients", "grad_spike": "gradient-norm explosion",
                  "loss_spike": "loss spike", "reward_collapse": "reward collapse"}
        evidence = f"{window.path}:{line}: {text.strip()[:300]}" if text else f"{window.path}:{line}"
        if str(finding.evidence.get("signature", "")).startswith("metric:") and finding.evidence.get("excerpt"):
            evidence += f"\n  {finding.evidence['excerpt']}"
        fixes = [str(f) for f in finding.fixes[:3]]
        sources = [str(c) for c in finding.citations if c.kind != "log"]
        known = _known_issue(window) if kind == "failure" else None
        if known is not None:
            fixes = [str(f) for f in known.fixes[:2]] + fixes
            sources = [f"{known.record.source} <{known.record.source_url}>"] + sources
        return Alert(
            key=key, kind=kind, title=f"{titles.get(kind, kind)} ({finding.id}, {finding.category})",
            summary=finding.summary, file=str(window.path), line=line, evidence=evidence,
            fixes=fixes, recovery=self._recovery() if kind in ("failure", "nan", "zero_reward") else [],
            sources=sources, severity=finding.severity, known=known.advice if known is not None else "",
            upstream=self._upstream_line(finding) if kind == "failure" else "",
        )

    def _upstream_line(self, finding: Any) -> str:
        """The upstream fix of this failure's traceback (diagnose matched the root's; only the root gets it)."""
        from rlmedic.tools.upstream import alert_line

        if not getattr(self, "_upstream", None) or finding.evidence.get("frames") != self._upstream_frames:
            return ""
        return alert_line(self._upstream)

    def _stall(self) -> list[Alert]:
        limit = self.options.stall_minutes * 60
        if self.stalled or self.finished or self.failed_since_progress or limit <= 0 or not self.windows:
            return []
        idle = self.clock() - self.last_progress
        if idle < limit:
            return []
        self.stalled = True
        where = f"after step {self.last_step}" if self.last_step is not None else "(no training step seen)"
        last = max(self.windows.values(), key=lambda w: w.lines[-1][0] if w.lines else 0)
        evidence = ""
        if last.lines:
            n, text = last.lines[-1]
            evidence = f"{last.path}:{n}: {text.strip()[:300]}"
        minutes = idle / 60
        return [Alert(
            key=f"stall|{self.last_step}|{int(self.last_progress)}", kind="stall",
            title=f"no progress for {minutes:.0f} min",
            summary=(f"No new training step {where} for {minutes:.1f} minutes, and no error in the log: the run is "
                     "hung (a stuck collective, a dead inference server, a full disk) or was stopped from outside."),
            evidence=evidence, severity="warning",
            fixes=["Check the processes (py-spy dump / nvidia-smi) and the inference servers; restart from the "
                   "last checkpoint if they are gone"],
            recovery=self._recovery(), sources=["card:training-crash-no-error"],
        )]

    def _recovery(self) -> list[str]:
        """The checkpoints tool's recovery plan for ``--checkpoints`` (through the registry, confined to it)."""
        root = self.options.checkpoints
        if not root:
            return []
        from rlmedic.tools.registry import REGISTRY, ToolContext

        result = REGISTRY.call("list_checkpoints", {"root": root}, ToolContext.for_roots([root]))
        if not result.ok:
            return [f"(checkpoints: {result.error})"]
        plan = (result.data or {}).get("plan") or {}
        lines = []
        resume = plan.get("resume_from") or {}
        if resume:
            lines.append(f"resume from step {resume.get('step')}: {resume.get('path')}")
        if plan.get("command"):
            lines.append(f"command: {plan['command']}")
        lines += [f"set {c}" for c in plan.get("config_lines", [])[:4]]
        lines += plan.get("notes", [])[:3]
        return lines or ["no intact checkpoint to resume from"]

    # -- the loop ----------------------------------------------------------------

    def close(self) -> None:
        self.follower.close()
