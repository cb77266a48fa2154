"""Diagnose training logs: findings with evidence, the root cause first, cascades under it.

This is the public entry point the CLI, the agent, Gradio and Slack call:

* :func:`diagnose` for log files and directories (plain or gzip), read through
  :class:`~rlmedic.confine.Confinement`;
* :func:`diagnose_text` for pasted log text.

Both return a :class:`Diagnosis` whose :meth:`~Diagnosis.to_dict` is the JSON contract of
``rlmedic diagnose --json``. Everything that leaves here is redacted.

The root is the failure that explains the others: a failure another one elsewhere explains
by time and causality (``causality.yaml``: a peer lost after a rank timed out) is its
cascade; among the rest, the best role (cause, crash, cascade...), then the earliest. An
exception no signature knows is classified in :func:`_classify_unknown`. ``stats.health``
says whether the run looks healthy and what that rests on.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rlmedic.confine import Confinement, redact
from rlmedic.errors import UserError
from rlmedic.tools.logs.scan import (
    FileInfo,
    Hit,
    HitGroup,
    Scanner,
    ScanResult,
    NO_YEAR,
    Source,
    expand_paths,
    parse_timestamp,
    process_key,
)
from rlmedic.tools.logs.causality import Event, builtin_table as causal_table, describe_after, link
from rlmedic.tools.logs.diagnosis import Diagnosis
from rlmedic.tools.logs.metrics import MetricCollector, MetricEvent
from rlmedic.tools.logs.nearest import nearest
from rlmedic.tools.logs.tracebacks import Traceback, classify, quote, read_traceback
from rlmedic.tools.logs.signatures import (
    ROLE_RANK,
    Catalog,
    Signature,
    builtin_catalog,
)
from rlmedic.types import Citation, Finding, Fix, severity_rank

#: A log written to within this many seconds may still be running (not interrupted).
RECENT_WRITE_S = 120
MAX_OCCURRENCES = 10
#: An error followed by this many logged training steps in the same file did not end the run.
SURVIVED_STEPS = 3
#: A traceback-classified error this close to a literal signature's hit is the same error.
SHADOW_LINES = 10
EXCERPT_BEFORE = 3
EXCERPT_AFTER = 2

_PHASE_TEXT = {
    "initialization": "during initialization",
    "generation": "during SGLang generation",
    "training": "during training (actor forward/backward)",
    "weight_update": "during the weight update to the inference servers",
    "data_transfer": "during data transfer between workers",
    "resume": "while resuming",
}
_METRIC_IDS = {
    "zero_reward": ("zero-reward-streak", "symptom"),
    "reward_collapse": ("reward-collapse", "symptom"),
    "no_eos": ("generation-never-stops", "symptom"),
    "length_cap": ("response-length-cap", "symptom"),
}
#: A per-rank log file's name: ``rank3.log``, ``worker_rank-12.err``, ``node1_rank_3.txt``.
_FILE_RANK = re.compile(r"(?i)rank[_-]?(\d+)")
_WHEN = re.compile(r"^\s*(\w+)\s*(>=|<=|==|>|<)\s*([-\d.]+|\w+)\s*$")


# ------------------------------------------------------------------ entry points --


#: Lines of each file's head a :class:`Diagnosis` keeps (the excerpt's fallback shows the first 10).
#: The scan reads 64 KiB of head (frameworks, the run's year); keeping all of it made every result
#: carry 64 KiB per file through the registry's redaction: 0.18 s for a folder of 16 rank logs.
HEAD_LINES_KEPT = 20


def diagnose(
    paths: list[str | os.PathLike[str]] | tuple[str | os.PathLike[str], ...],
    *,
    confinement: Confinement,
    engine: str | None = None,
    streams: Sequence[Source] = (),
    catalog: Catalog | None = None,
    all_runs: bool = False,
) -> Diagnosis:
    """Diagnose log files or directories of per-rank logs (gzip allowed); ``catalog`` overrides the
    shipped signatures and metric thresholds (``watch`` changes the zero-reward streak).

    W&B run folders, TensorBoard log folders and JSONL/CSV metric dumps among ``paths`` are read
    by :mod:`rlmedic.tools.runs` (their curves' health checks) and merged with the logs' diagnosis;
    ``all_runs`` reads every run of a ``wandb/`` folder instead of its newest.

    ``streams`` are inputs a front door opened itself and vouches for: the CLI turns ``-``
    (stdin) and pipe paths the user typed (``/dev/stdin``, a shell's ``<(...)``) into them
    with :func:`~rlmedic.tools.logs.scan.stream_source`. A path passed here is only ever
    read through ``confinement``, which refuses pipes and devices.
    """
    paths = list(paths)
    if not paths and not streams:
        raise UserError("no log path given")
    from rlmedic.tools.runs.locate import split_run_paths

    run_paths, paths = split_run_paths(paths, confinement)
    if run_paths:
        from rlmedic.tools.runs.diagnose import diagnose_runs, merge

        runs = diagnose_runs(run_paths, confinement=confinement, all_runs=all_runs)
        if not paths and not streams:
            return runs
        return merge(runs, diagnose(paths, confinement=confinement, engine=engine, streams=streams, catalog=catalog))
    sources, skipped = expand_paths(paths, confinement) if paths else ([], [])
    sources = [*streams, *sources]
    if not sources:
        raise UserError(f"{', '.join(map(str, paths))}: no log files found")
    return _diagnose_sources(sources, confinement, skipped, engine, catalog)


def diagnose_text(text: str, name: str = "<input>", *, engine: str | None = None) -> Diagnosis:
    """Diagnose pasted log text (chat UIs, Slack, the real-case evaluation)."""
    return _diagnose_sources([Source(name=name, data=text.encode("utf-8", errors="replace"))], None, [], engine)


def diagnose_texts(texts: list[tuple[str, str]], *, catalog: Catalog | None = None) -> Diagnosis:
    """Diagnose several in-memory texts as one run (``(name, text)`` pairs, e.g. the recent lines of each
    rank log ``rlmedic watch`` follows); ``catalog`` overrides the shipped one (changed thresholds)."""
    sources = [Source(name=name, data=text.encode("utf-8", errors="replace")) for name, text in texts]
    return _diagnose_sources(sources, None, [], None, catalog)


def _diagnose_sources(
    sources: list[Source], confinement: Confinement | None, skipped: list[dict[str, str]], engine: str | None,
    catalog: Catalog | None = None,
) -> Diagnosis:
    started = time.perf_counter()
    catalog = catalog or builtin_catalog()
    metrics = MetricCollector(catalog.metrics)
    scanner = Scanner(catalog, on_metric=metrics.feed, on_table=metrics.feed_table, on_step=metrics.step_line,
                      engine=engine)
    result = scanner.scan(sources, confinement)
    skipped = skipped + result.skipped
    if not result.files:
        reasons = "; ".join(f"{s['file']}: {s['reason']}" for s in skipped) or "nothing readable"
        raise UserError(f"no text log to diagnose ({reasons})")
    diagnosis = _Builder(catalog, result, metrics).build()
    elapsed = time.perf_counter() - started
    diagnosis.stats.update(
        {
            "files": len(result.files),
            "bytes": result.bytes_read,
            "lines": sum(f.lines for f in result.files),
            "seconds": round(elapsed, 3),
            "mb_per_s": round(result.bytes_read / 1e6 / elapsed, 1) if elapsed > 0 else None,
            "engine": result.engine,
            "truncated": result.truncated,
            "partial": [{"file": f.name, "reason": f.partial} for f in result.files if f.partial],
            "skipped": skipped,
        }
    )
    return diagnosis


# ------------------------------------------------------------------ helpers -------


def _card(card_id: str) -> Any:
    """The playbook card, or None while it does not exist (loaded lazily, cached)."""
    try:
        from rlmedic.knowledge.cards import card_by_id
    except ImportError:  # pragma: no cover - knowledge package absent
        return None
    try:
        return card_by_id(card_id)
    except UserError:
        return None


def _for_framework(items: list[Any], framework: str) -> list[Any]:
    """Items (card or signature fixes, with a ``framework`` tag) that apply to this log's framework.

    An AReaL key means nothing to a slime user and vice versa: when the log says which
    framework wrote it, fixes tagged for the other one are left out (all are kept when
    that would leave none, or when the framework is unknown).
    """
    if framework not in ("areal", "slime", "verl"):
        return items
    kept = [it for it in items if getattr(it, "framework", "") in ("", "generic", framework)]
    return kept or items


def _card_fixes(card: Any, framework: str) -> list[Fix]:
    if card is None:
        return []
    return _for_framework(list(card.fixes), framework)


def _who_wrote(name: str) -> str:
    """A file as a sentence names it: the process a Ray job's synced file belongs to ("TrainWorker pid 4567
    on 10.0.0.5"), else the file's own name without its folders."""
    from rlmedic.tools.cluster.plan import describe_local

    return describe_local(name) or os.path.basename(name) or name


def _fmt_number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _fill(template: str, numbers: dict[str, Any]) -> str:
    """Keep each ``;``-separated part whose placeholders were all extracted."""
    parts = []
    for part in template.split(";"):
        names = re.findall(r"\{(\w+)\}", part)
        if all(n in numbers and numbers[n] not in (None, "") for n in names):
            parts.append(re.sub(r"\{(\w+)\}", lambda m: _fmt_number(numbers[m.group(1)]), part).strip())
    return "; ".join(p for p in parts if p)


def _when(cond: str, numbers: dict[str, Any]) -> bool:
    if not cond:
        return True
    m = _WHEN.match(cond)
    if not m or not isinstance(numbers.get(m.group(1)), (int, float)):
        return False
    raw_right = m.group(3)
    if re.fullmatch(r"[-\d.]+", raw_right):
        right = float(raw_right)
    elif isinstance(numbers.get(raw_right), (int, float)):
        right = float(numbers[raw_right])
    else:
        return False
    left, op = float(numbers[m.group(1)]), m.group(2)
    return {">": left > right, "<": left < right, ">=": left >= right, "<=": left <= right, "==": left == right}[op]


def _ranges(values: list[int]) -> str:
    values = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


def excerpt_lines(hit: Hit, before: int = EXCERPT_BEFORE, after: int = EXCERPT_AFTER) -> str:
    """A few numbered lines around a hit, the hit marked with ``>``, redacted."""
    rows = [(n, t, " ") for n, t in hit.before[-before:]] if before else []
    rows.append((hit.line, hit.text, ">"))
    rows += [(n, t, " ") for n, t in hit.after[:after]]
    width = len(str(rows[-1][0]))
    # redacted with the line above the window: a secret's name may be there and its value below it
    # (hf_token: >- / WANDB_API_KEY=\); that line is dropped after
    above = hit.before[-before - 1:-before] if before else hit.before[-1:]
    shown = redact("\n".join(f"{mark} {n:>{width}} | {t}" for n, t, mark in [(n, t, " ") for n, t in above] + rows))
    return shown.split("\n", len(above))[-1] if above else shown


def _classify_unknown(tb: Traceback, phase: str) -> tuple[Any, Any, dict[str, Any]]:
    """An exception no literal signature names: the first traceback rule that fits (type, message, frame
    packages, the phase around it), else its nearest known issues or card, else nothing ("other").

    Returns the rule, the neighbour and the finding's id, role, title, explain, card (None: the
    signature's), category and phase ("" for id, role and category when they stay the signature's). The phase the surrounding lines
    suggest is kept only when a rule used it: shown alone it is often a guess.
    """
    rule = classify(tb, phase=phase)
    if rule is not None:
        return rule, None, {"id": rule.id, "role": rule.role, "title": rule.title, "explain": rule.explain,
                            "card": rule.card, "category": rule.category, "phase": phase if rule.phases else ""}
    near = nearest(_error_words(tb))
    out: dict[str, Any] = {"id": "", "role": "", "title": tb.exc_type, "card": None, "category": "", "phase": "",
           "explain": "No signature knows this error; what it names is the place to start"}
    if near is not None and near.how == "known":
        out.update(category=near.category, card=near.card, explain=(
            f"No signature knows this error; the nearest known issues ({', '.join(near.refs[:3])}) are {near.category} problems"))
    elif near is not None:
        out.update(category=near.category, card=near.card, explain=(
            f"No signature knows this error; it is closest to the card {near.card} (shared words: {', '.join(near.shared[:5])})"))
    return None, near, out


_ERROR_LEVEL = re.compile(r"\b(?:ERROR|CRITICAL|FATAL|Error|Exception|Traceback)\b|^\S*\[?[EF]\d{4} ")


def _dated_here(hit: Hit) -> bool:
    """The hit's time is its own: printed on its line, or on the error-level line that announced it just
    above (``12:00:01 ERROR step failed`` then the traceback). A time carried over from the last
    progress line is only a lower bound."""
    if parse_timestamp(hit.text[:160], NO_YEAR) is not None:
        return True
    for _n, text in reversed(hit.before[-20:]):
        if process_key(text) != hit.process:
            continue
        if parse_timestamp(text[:160], NO_YEAR) is not None:
            return bool(_ERROR_LEVEL.search(text))
    return False


def _error_words(tb: Traceback) -> str:
    """What an error says about itself: type, message, and the packages, functions and files of its frames."""
    frames = tb.frames[-6:]
    parts = [f"{tb.exc_type}: {tb.text}" if tb.text else tb.exc_type, " ".join(tb.packages()[:4])]
    parts += [f"{f.func} {f.path.rsplit('/', 1)[-1].rsplit('.', 1)[0]} {f.code}" for f in frames]
    return "\n".join(parts)


def _sig_fixes(sig: Signature, numbers: dict[str, Any], framework: str = "") -> list[Fix]:
    keep = {id(fix) for fix in _for_framework([fix for _when_, fix in sig.fixes], framework)}
    return [fix for when, fix in sig.fixes if id(fix) in keep and _when(when, numbers)]


@dataclass
class _Draft:
    """A finding before ordering: the Finding plus what root-cause ordering needs."""

    finding: Finding
    rank: int
    when: tuple[Any, ...]
    sig: str
    role: str
    #: classified from its traceback while a literal signature matched a line of the same error
    #: (within a few lines): the literal one is the more specific name and comes first
    shadowed: bool = False
    #: what the causal rules (causality.yaml) read: texts, first time, ranks, files, processes
    event: Event | None = None


# ------------------------------------------------------------------ builder -------


class _Builder:
    def __init__(self, catalog: Catalog, result: ScanResult, metrics: MetricCollector) -> None:
        self.catalog = catalog
        self.result = result
        self.metrics = metrics
        self.files = {f.index: f for f in result.files}
        self.framework = {f.index: self._framework(f, metrics.frameworks.get(f.index, {})) for f in result.files}
        self.first_hits: dict[str, Hit] = {}
        self.events: list[MetricEvent] = metrics.detect()
        self._fill_years()

    def _fill_years(self) -> None:
        """Year-less timestamps (glog's ``E1120 10:15:02``) take the run's year, from its dated lines.

        Per-rank files often carry only glog times while the driver's lines carry full dates;
        with the current year filled in, a log from last year would order every rank's error
        after the driver's, and the root would change with the file layout.
        """
        hits = [h for g in self.result.groups.values() for h in (*g.detailed, *([g.last] if g.last else []))]
        years = Counter(h.ts.year for h in hits if h.ts and h.ts.year != NO_YEAR)
        years.update(f.last_ts.year for f in self.result.files if f.last_ts and f.last_ts.year != NO_YEAR)
        for f in self.result.files:  # the first dated line of each file's head
            for text in f.head.splitlines()[:200]:
                ts = parse_timestamp(text, NO_YEAR)
                if ts and ts.year != NO_YEAR:
                    years[ts.year] += 1
                    break
        year = years.most_common(1)[0][0] if years else datetime.now().year

        def fix(ts: datetime | None) -> datetime | None:
            if ts is None or ts.year != NO_YEAR:
                return ts
            try:
                return ts.replace(year=year)
            except ValueError:  # 29 February in a year without one
                return ts

        for h in hits:
            h.ts = fix(h.ts)
        for f in self.result.files:
            f.last_ts = fix(f.last_ts)

    @staticmethod
    def _framework(info: FileInfo, by_metrics: dict[str, int]) -> str:
        """The framework that wrote the file: markers in its text, and (weighing more) metric key names
        that only one framework writes (``grpo_actor/...``, ``rollout/raw_reward``, ``critic/score/mean``)."""
        fw = {k: v for k, v in info.frameworks.items() if k in ("areal", "slime", "verl")}
        for name, keys in by_metrics.items():
            fw[name] = fw.get(name, 0) + 5 * keys
        return max(fw.items(), key=lambda kv: kv[1])[0] if fw else ""

    def _when_key(self, file_index: int, line: int, ts: datetime | None) -> tuple[Any, ...]:
        """Dated events in time order, then undated ones in file order (an undated line cannot be
        placed against another file's lines, so it does not outrank a dated one)."""
        return (ts is None, ts or datetime.min, file_index, line)

    # -- signature hits --------------------------------------------------------

    def _merge_groups(self) -> dict[tuple[str, str, str], list[HitGroup]]:
        """One finding per signature, group value and phase, across files and ranks.

        Phase only separates causes and crashes (an OOM in generation and one in training
        need different fixes); cascades of one kind stay one finding whatever the phase.
        """
        merged: dict[tuple[str, str, str], list[HitGroup]] = {}
        for (sig_id, _file, group, phase), g in self.result.groups.items():
            key_phase = phase if self.catalog.by_id[sig_id].rank < ROLE_RANK["cascade"] else "*"
            merged.setdefault((sig_id, group, key_phase), []).append(g)
        return merged

    def _hit_findings(self) -> tuple[list[_Draft], dict[str, Any]]:
        drafts: list[_Draft] = []
        markers: dict[str, Any] = {}
        for (sig_id, group, phase), groups in self._merge_groups().items():
            sig = self.catalog.by_id[sig_id]
            hits = [h for g in groups for h in g.detailed]
            self._fill_times(hits)
            hits.sort(key=lambda h: self._when_key(h.file_index, h.line, h.ts))
            lasts = [g.last for g in groups if g.last is not None]
            last = max(lasts, key=lambda h: self._when_key(h.file_index, h.line, h.ts)) if lasts else hits[-1]
            count = sum(g.count for g in groups)
            if sig.role == "marker":
                markers[sig_id] = {"first": hits[0], "last": last, "count": count}
                if sig_id != "recover-info-dumped":
                    continue
            if phase == "*":
                phase = hits[0].phase
            drafts.append(self._draft(sig, hits, last, count, phase))
        return drafts, markers

    def _fill_times(self, hits: list[Hit]) -> None:
        """Hits without a timestamp take the nearest earlier one of the same file."""
        by_file: dict[int, list[Hit]] = {}
        for h in hits:
            by_file.setdefault(h.file_index, []).append(h)
        for file_hits in by_file.values():
            file_hits.sort(key=lambda h: h.line)
            carry = next((h.ts for h in file_hits if h.ts), None)
            for h in file_hits:
                if h.ts:
                    carry = h.ts
                elif carry:
                    h.ts = carry

    def _draft(self, sig: Signature, hits: list[Hit], last: Hit, count: int, phase: str) -> _Draft:
        first = hits[0]
        self.first_hits[f"{first.file}:{first.line}"] = first
        framework = self.framework.get(first.file_index, "")
        if isinstance(first.numbers.get("op"), str):  # the collective the NCCL watchdog names says the phase
            phase = causal_table().collective_phase(first.numbers["op"], phase, f"{first.process} {first.text}")
        card_id, category = sig.card_for(phase, framework)
        fid, role, title, explain = sig.id, sig.role, sig.title, sig.explain
        tb, rule, said, near = None, None, None, None
        if sig.role not in ("marker", "symptom"):  # an exception line: read its traceback, say what it names
            tb = read_traceback(first.text, [t for _n, t in first.before])
            said = quote(tb) if tb else None
        if sig.id == "python-exception" and tb is not None:  # no literal signature knew the line
            rule, near, c = _classify_unknown(tb, phase)
            fid, role, title, explain, category, phase = (
                c["id"] or fid, c["role"] or role, c["title"], c["explain"], c["category"] or category, c["phase"])
            card_id = card_id if c["card"] is None else c["card"]
        elif sig.id == "python-exception":
            phase = ""
        numbers = {k: v for k, v in first.numbers.items() if k not in ("repeated",)}
        ranks = sorted({h.numbers["rank"] for h in hits if isinstance(h.numbers.get("rank"), int)})
        files = sorted({h.file for h in hits})
        severity = sig.severity
        transient_note = ""
        if sig.transient:
            later = self.metrics.steps_after(last.file_index, last.line)
            if later is not None and not self._reward_failed_after(first):
                severity = "warning" if severity_rank(severity) < severity_rank("warning") else severity
                transient_note = f" (transient: training went on to step {later} afterwards)"
        elif sig.role not in ("marker", "symptom") and severity_rank(severity) <= severity_rank("error"):
            # An error the run got past (a log appended to by a restarted run, a server that died
            # and came back) did not stop it: say so, and let what did stop it be the root.
            went_on = self.metrics.steps_logged_after(last.file_index, last.line)
            if went_on >= SURVIVED_STEPS and not self._reward_failed_after(first):
                later = self.metrics.steps_after(last.file_index, last.line)
                severity = "warning"
                transient_note = f" (not what stopped the run: training went on for {went_on} more steps, to step {later})"
        where = ""
        if len(ranks) == 1:
            where = f" on rank {ranks[0]}"
        elif len(ranks) > 1:
            where = f" on ranks {_ranges(ranks)}"
        if isinstance(numbers.get("gpu"), int) and len(ranks) <= 1:
            where += f"{',' if where else ' on'} GPU {numbers['gpu']}"
        if tb is not None and rule is not None:
            title = f"{title} ({tb.short_type})"
        summary = title
        if phase and phase in _PHASE_TEXT:
            summary += f" {_PHASE_TEXT[phase]}"
        summary += where
        if count > 1:
            summary += f" (x{count}{f' in {len(files)} files' if len(files) > 1 else ''})"
        detail = _fill(sig.detail, numbers) if sig.detail else ""
        if sig.id == "python-exception":
            detail = redact(said.text if said else (tb.text if tb else first.text.strip()))[:300]
        elif said is not None and said.rule == "any-exception":
            said = None  # a literal signature's own words say more than the bare message
        elif said is not None and not detail:
            detail = redact(said.text)[:300]
        elif said is not None:
            said = None
        if sig.id == "recover-info-dumped":
            step = self.metrics.step_before(last.file_index, last.line)
            detail = f"last at {last.file}:{last.line}" + (f" ({last.ts:%Y-%m-%d %H:%M:%S})" if last.ts else "")
            detail += f" after step {step}" if step is not None else ""
            numbers["last_line"] = last.line
            if step is not None:
                numbers["last_step"] = step
        if detail:
            summary += f": {detail}"
        summary += transient_note
        if explain:
            summary = f"{summary.rstrip('. ')}. {explain}"
        card = _card(card_id)
        fixes = _sig_fixes(sig, numbers, framework) + _card_fixes(card, framework)
        if said is not None and said.fix:  # what the exception names comes first; generic debugging tips go
            fixes = [Fix(action=redact(said.fix), rule=f"quote:{said.rule}")] + [
                f for f in fixes if not (card is not None and card.category == "other" and rule is None)
            ]
        citations = ([card.citation] if card else []) + [Citation.log(first.file, first.line)]
        if near is not None and near.citations:
            citations += near.citations
        occurrences = [f"{h.file}:{h.line}" for h in hits[:MAX_OCCURRENCES]]
        evidence: dict[str, Any] = {
            "excerpt": excerpt_lines(first),
            "line_text": redact(first.text),
            "numbers": numbers,
            "count": count,
            "occurrences": occurrences,
            "signature": f"traceback:{rule.id}" if rule else sig.id,
            "role": role,
        }
        if tb is not None:
            evidence["exception"] = tb.exc_type
            if tb.text:
                evidence["message"] = redact(tb.text)[:500]
            if said is not None:
                evidence["names"] = {k: redact(v) for k, v in said.names.items()}
            if tb.frames and tb.frames[-1].code:
                evidence["code"] = redact(tb.frames[-1].code)
            if sig.id == "python-exception":
                evidence["classified_by"] = (f"rule:{rule.id}" if rule else f"{near.how}:{near.card or ','.join(near.refs[:3])}"
                                             if near else "none")
            else:
                evidence["classified_by"] = f"signature:{sig.id}"
            if tb.frames:
                deepest = tb.frames[-1]
                evidence["deepest_frame"] = redact(f"{deepest.path}:{deepest.line} in {deepest.func}")
                evidence["frame_packages"] = tb.packages()
                # the frames nearest the exception, outermost first: what an upstream fix is matched on
                evidence["frames"] = [redact(f"{f.path}:{f.line} in {f.func}") for f in tb.frames[-8:]]
        if phase:
            evidence["phase"] = phase
        if ranks:
            evidence["ranks"] = ranks
        if len(files) > 1:
            evidence["files"] = files[:MAX_OCCURRENCES]
        if first.process:
            evidence["process"] = first.process
        if first.ts:
            evidence["first_seen"] = first.ts.isoformat(sep=" ")
        if last.ts:
            evidence["last_seen"] = last.ts.isoformat(sep=" ")
        if last is not first:
            evidence["last_occurrence"] = f"{last.file}:{last.line}"
        if framework:
            evidence["framework"] = framework
        finding = Finding(
            id=fid,
            category=category,
            severity=severity,  # type: ignore[arg-type]
            summary=summary,
            file=first.file,
            line=first.line,
            evidence=evidence,
            fixes=fixes,
            citations=citations,
            card=card_id,
        )
        event = Event(
            key=fid, sig=evidence["signature"], role=role, texts=[h.text for h in hits[:MAX_OCCURRENCES * 2]],
            ts=first.ts, files=set(files), ranks=set(ranks), processes={h.process for h in hits if h.process},
            file=first.file, line=first.line, ts_explicit=_dated_here(first),
        )
        return _Draft(finding, ROLE_RANK[role], self._when_key(first.file_index, first.line, first.ts), fid, role,
                      event=event)

    # -- metrics -----------------------------------------------------------------

    def _reward_failed_after(self, hit: Hit) -> bool:
        """Training "went on" only if rewards did not die after the hit (then it is no retry that worked)."""
        return any(
            ev.rule in ("zero_reward", "reward_collapse") and (ev.file_index != hit.file_index or ev.line >= hit.line)
            for ev in self.events
        )

    def _metric_findings(self) -> list[_Draft]:
        return [self._metric_draft(ev) for ev in self.events]

    def _metric_draft(self, ev: MetricEvent) -> _Draft:
        if ev.detection is not None:
            return self._curve_rule_draft(ev)
        if ev.rule in _METRIC_IDS:
            fid, role = _METRIC_IDS[ev.rule]
        elif ev.rule == "nonfinite":
            fid, role = f"nonfinite-{ev.kind.replace('_', '-')}", "crash"
        else:
            fid, role = f"{ev.kind.replace('_', '-')}-spike", "symptom"
        info = self.files[ev.file_index]
        card = _card(ev.card)
        values = ", ".join(f"{s}:{_fmt_number(v) if math.isfinite(v) else v}" for s, v in ev.values)
        numbers = {k: v for k, v in ev.numbers.items() if v is not None}
        evidence = {
            "excerpt": redact(f"{ev.key} by step: {values}"),
            "numbers": numbers,
            "series": ev.key,
            "count": 1,
            "occurrences": [f"{info.name}:{ev.line}"],
            "signature": f"metric:{ev.rule}",
            "role": role,
        }
        fw = self.framework.get(ev.file_index)
        if fw:
            evidence["framework"] = fw
        finding = Finding(
            id=fid,
            category=ev.category,
            severity=ev.severity,  # type: ignore[arg-type]
            summary=ev.summary,
            file=info.name,
            line=ev.line,
            evidence=evidence,
            fixes=_card_fixes(card, fw or ""),
            citations=([card.citation] if card else []) + [Citation.log(info.name, ev.line)],
            card=ev.card,
        )
        return _Draft(finding, ROLE_RANK[role], self._when_key(ev.file_index, ev.line, None), fid, role)

    def _curve_rule_draft(self, ev: MetricEvent) -> _Draft:
        """A curve rule of detectors.yaml that fired on a log's series: the finding a run folder gets (its id,
        summary, before/after, the rule's fixes for the framework), its evidence the log line of the first step."""
        from rlmedic.tools.runs.diagnose import _fixes, _summary

        det = ev.detection
        rule = det.rule
        info = self.files[ev.file_index]
        fw = self.framework.get(ev.file_index) or ""
        card = _card(ev.card) if ev.card else None
        values = ", ".join(f"{s}:{_fmt_number(v) if math.isfinite(v) else v}" for s, v in ev.values)
        numbers = {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in ev.numbers.items()
                   if v is not None}
        where = f"{info.name}:{ev.line}"
        evidence: dict[str, Any] = {
            "metric": ev.key,
            "step": det.step,
            "before": det.before,
            "after": det.after,
            "excerpt": redact(f"{ev.key} by step: {values}"),
            "numbers": numbers,
            "series": ev.key,
            "count": 1,
            "occurrences": [where],
            "signature": f"metric:{rule['id']}",
            "role": "symptom",
        }
        if det.related:
            evidence["related"] = list(det.related)
        if fw:
            evidence["framework"] = fw
        finding = Finding(
            id=str(rule["id"]),
            category=ev.category,
            severity=ev.severity,  # type: ignore[arg-type]
            summary=_summary(det, None),  # type: ignore[arg-type] - run is read by 'stopped' only; file:line below
            file=info.name,
            line=ev.line,
            key=ev.key,
            rule=str(rule["id"]),
            evidence=evidence,
            fixes=_fixes(rule, fw) or _card_fixes(card, fw),
            citations=([card.citation] if card else []) + [Citation.log(info.name, ev.line)],
            card=ev.card,
        )
        return _Draft(finding, ROLE_RANK["symptom"], self._when_key(ev.file_index, ev.line, None), finding.id, "symptom")

    # -- whole-run findings -------------------------------------------------------

    def _progress(self) -> tuple[int | None, FileInfo | None]:
        """The highest step seen and the file that got furthest."""
        best: tuple[int, FileInfo] | None = None
        for idx, (step, _line) in self.metrics.last_step.items():
            if best is None or step > best[0]:
                best = (step, self.files[idx])
        return (best[0], best[1]) if best else (None, None)

    def _finished(self, markers: dict[str, Any]) -> bool:
        if "clean-shutdown" in markers:
            return True
        for idx, total in self.metrics.total_steps.items():
            last = self.metrics.last_step.get(idx)
            if last and total and last[0] >= total:
                return True
        return False

    def _interruption(self, step: int, info: FileInfo) -> _Draft:
        recent = info.mtime is not None and time.time() - info.mtime < RECENT_WRITE_S
        # pasted text or a pipe has no age: an excerpt of a healthy run that is still going looks the same
        unknown_age = info.mtime is None
        total = self.metrics.total_steps.get(info.index)
        line = info.tail[-1][0] if info.tail else info.lines
        when = f" at {info.last_ts:%Y-%m-%d %H:%M:%S}" if info.last_ts else ""
        of_total = f"/{total}" if total else ""
        if unknown_age:
            summary = (
                f"The log ends after step {step}{of_total}{when} with no error and no completion line: nothing in it "
                "points at a failure. If the run is still going, all is well; if it has stopped, something outside "
                "stopped it (spot preemption, the OOM killer, a scheduler) - resume from the last checkpoint"
            )
        else:
            summary = (
                f"The log stops mid-training after step {step}{of_total}{when} with no error and no clean shutdown: "
                "probable interruption from outside (spot preemption, the OOM killer, a scheduler) - "
                "resume from the last checkpoint"
            )
        if recent:
            summary += f" (the file was written {time.time() - info.mtime:.0f} s ago: the run may still be going)"  # type: ignore[operator]
        card = None if unknown_age else _card("spot-interruption")  # no preemption advice for a healthy excerpt
        tail = info.tail[-6:]
        excerpt = redact("\n".join(f"  {n} | {t}" for n, t in tail))
        numbers: dict[str, Any] = {"last_step": step}
        if total:
            numbers["total_steps"] = total
        evidence: dict[str, Any] = {
            "excerpt": excerpt,
            "numbers": numbers,
            "count": 1,
            "occurrences": [f"{info.name}:{line}"],
            "signature": "log-ends-mid-training",
            "role": "cause",
        }
        if info.last_ts:
            evidence["last_seen"] = info.last_ts.isoformat(sep=" ")
        finding = Finding(
            id="probable-interruption",
            category=card.category if card else ("other" if unknown_age else "checkpoint_recovery"),
            severity="warning" if recent or unknown_age else "error",
            summary=summary,
            file=info.name,
            line=line,
            evidence=evidence,
            fixes=_card_fixes(card, self.framework.get(info.index, "")),
            citations=([card.citation] if card else []) + [Citation.log(info.name, line)],
            card="spot-interruption" if card else "",
        )
        return _Draft(finding, ROLE_RANK["cause"], self._when_key(info.index, line, info.last_ts), "probable-interruption", "cause")

    def _no_recover(self, step: int, info: FileInfo) -> _Draft:
        card = _card("recovery-checkpoint-missing")
        summary = (
            f"No recover checkpoint was written in {step} steps (no 'Dumped recover info' / 'Saved recover checkpoint' "
            "line): recover mode 'auto' will have nothing to resume from; enable recover.mode and a save frequency "
            "(recover.freq_steps / freq_secs)"
        )
        line = info.tail[-1][0] if info.tail else info.lines
        finding = Finding(
            id="no-recover-checkpoint",
            category="checkpoint_recovery",
            severity="warning",
            summary=summary,
            file=info.name,
            line=line,
            evidence={"excerpt": "", "numbers": {"last_step": step}, "count": 1, "occurrences": [], "signature": "absent:recover-info-dumped", "role": "symptom"},
            fixes=_card_fixes(card, self.framework.get(info.index, "")),
            citations=[card.citation] if card else [],
            card="recovery-checkpoint-missing",
        )
        return _Draft(finding, ROLE_RANK["symptom"], self._when_key(info.index, line, info.last_ts), "no-recover-checkpoint", "symptom")

    def _empty(self) -> _Draft | None:
        """A warning when every file is empty (or blank): there is nothing to diagnose, which is not health."""
        if any(f.head.strip() or f.bytes_read > len(f.head.encode()) for f in self.result.files):
            return None
        names = [f.name for f in self.result.files]
        what = names[0] if len(names) == 1 else f"all {len(names)} files ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
        summary = (
            f"The log is empty: {what} contain{'s' if len(names) == 1 else ''} no text. "
            "Check the path (the run may write elsewhere), that the job started, and that its output is not "
            "buffered (PYTHONUNBUFFERED=1) or still only in the scheduler's log"
        )
        finding = Finding(
            id="empty-log",
            category="other",
            severity="warning",
            summary=summary,
            file=names[0],
            line=None,
            evidence={"excerpt": "", "numbers": {"files": len(names)}, "count": len(names),
                      "occurrences": names[:MAX_OCCURRENCES], "signature": "empty-log", "role": "symptom"},
        )
        return _Draft(finding, ROLE_RANK["symptom"], self._when_key(0, 0, None), "empty-log", "symptom")

    # -- assembly ----------------------------------------------------------------

    def build(self) -> Diagnosis:
        drafts, markers = self._hit_findings()
        empty = self._empty()
        if empty is not None:
            drafts.append(empty)
        drafts += self._metric_findings()
        step, far = self._progress()
        finished = self._finished(markers)
        serious = [d for d in drafts if d.role != "marker" and severity_rank(d.finding.severity) <= severity_rank("error")]
        if not serious and step is not None and far is not None and not finished:
            drafts.append(self._interruption(step, far))
            serious = [d for d in drafts[-1:] if d.finding.severity == "error"]
        areal = any(fw == "areal" for fw in self.framework.values())
        if areal and serious and step is not None and step >= 2 and "recover-info-dumped" not in markers and far is not None:
            drafts.append(self._no_recover(step, far))
        self._shadow(drafts)
        findings, root = self._order(drafts)
        if root is not None:
            self._note_silent(findings[root], findings)
        stats: dict[str, Any] = {
            "last_step": step,
            "clean_shutdown": finished,
            "frameworks": sorted({fw for fw in self.framework.values() if fw}),
            "metrics": self.metrics.summary(),
            "signatures_matched": sorted({d.sig for d in drafts}),
            "empty_files": [f.name for f in self.result.files if not f.head.strip()],
            "health": self._health(findings, root, step, finished),
        }
        for f in self.result.files:  # the rest of each head was read above; what leaves is redacted, so keep it short
            f.head = "\n".join(f.head.splitlines()[:HEAD_LINES_KEPT])
        return Diagnosis(findings=findings, root=root, stats=stats, hits=self.first_hits, files=self.result.files)

    def _health(self, findings: list[Finding], root: int | None, step: int | None, finished: bool) -> dict[str, Any]:
        """The verdict on the run and what it rests on, so an answer can say "healthy" and what was checked.

        ``failed``: a root cause; ``finished``: no error and a clean end (a completion line or the
        last planned step); ``healthy``: no error while training went on (the log may be an excerpt
        or the run still going); ``ended-early``: no error but a file that stopped mid-run long
        ago; ``no-errors``: no error and no training progress to judge by; ``empty``: no text.
        """
        lines = sum(f.lines for f in self.result.files)
        checked = [f"{lines} lines in {len(self.result.files)} file(s) against {len(self.catalog.signatures)} error signatures"]
        series = sorted(self.metrics.summary())  # the kinds of series read (the vocabulary's log_series: a dozen)
        if series:
            checked.append(f"metrics: {', '.join(series)}")
        if step is not None:
            checked.append(f"training progress: last step {step}")
        checked.append("end of the log: " + ("a clean finish" if finished else "no completion line"))
        ids = {f.id for f in findings}
        if "empty-log" in ids:
            verdict = "empty"
        elif root is not None:
            verdict = "failed"
        elif finished:
            verdict = "finished"
        elif any(f.id == "probable-interruption" and f.severity == "error" for f in findings):
            verdict = "ended-early"
        elif step is not None:
            verdict = "healthy"
        else:
            verdict = "no-errors"
        warnings = [f.id for f in findings if f.severity == "warning"]
        out: dict[str, Any] = {"verdict": verdict, "checked": checked}
        if warnings:
            out["warnings"] = warnings[:MAX_OCCURRENCES]
        return out

    @staticmethod
    def _shadow(drafts: list[_Draft]) -> None:
        """Literal signatures take precedence over the traceback table for the same error."""
        literal = [
            (d.finding.file, d.finding.line or 0)
            for d in drafts
            if d.role != "marker" and d.sig in builtin_catalog().by_id and d.sig != "python-exception"
        ]
        for d in drafts:
            if str(d.finding.evidence.get("signature", "")).startswith("traceback:"):
                line = d.finding.line or 0
                d.shadowed = any(f == d.finding.file and abs(n - line) <= SHADOW_LINES for f, n in literal)

    @staticmethod
    def _order(drafts: list[_Draft]) -> tuple[list[Finding], int | None]:
        """Root first, its cascades, then the rest.

        A failure that an earlier one elsewhere explains (causality.yaml: a peer lost after
        another rank timed out) is that one's cascade and never the root; among the others
        the root is the lowest role rank, then the earliest.
        """
        candidates = [d for d in drafts if d.role != "marker" and severity_rank(d.finding.severity) <= severity_rank("error")]
        if not candidates:
            rest = sorted(drafts, key=lambda d: (severity_rank(d.finding.severity), d.when))
            return [d.finding for d in rest], None
        with_events = [d for d in candidates if d.event is not None]
        links = link([d.event for d in with_events])  # type: ignore[misc]
        caused_by = {id(with_events[i]): next(c for c in with_events if c.event is ln.cause) for i, ln in links.items()}
        contenders = [d for d in candidates if id(d) not in caused_by] or candidates
        root = min(contenders, key=lambda d: (d.rank, d.shadowed, d.when))
        explained = [(with_events[i], ln) for i, ln in links.items() if caused_by[id(with_events[i])] is root]
        if explained:
            _Builder._note_explained(root, explained)
        cascades = [
            d
            for d in candidates
            if d is not root and (d.rank > root.rank or d.sig == root.sig or caused_by.get(id(d)) is root)
        ]
        cascades.sort(key=lambda d: d.when)
        others = [d for d in drafts if d is not root and d not in cascades]
        others.sort(key=lambda d: (severity_rank(d.finding.severity), d.when))
        ordered = [root, *cascades, *others]
        for d in cascades:
            d.finding.root = 0
        return [d.finding for d in ordered], 0

    def _note_silent(self, root: Finding, findings: list[Finding]) -> None:
        """A timeout every rank but some reported: name the silent ranks, the ones the others waited for."""
        reported = set(root.evidence.get("ranks") or [])
        run_ranks = {int(m.group(1)) for f in self.result.files if (m := _FILE_RANK.search(os.path.basename(f.name)))}
        if len(run_ranks) < 2:  # ranks named in the lines count only in a run whose files are not per rank
            run_ranks |= {r for f in findings for r in f.evidence.get("ranks") or []}
        others: set[int] = set()  # ranks that reported a failure of their own are not silent
        for f in findings:
            if f is root or severity_rank(f.severity) > severity_rank("error"):
                continue
            others |= set(f.evidence.get("ranks") or [])
            for name in [f.file, *(f.evidence.get("files") or [])]:
                if m := _FILE_RANK.search(os.path.basename(name or "")):
                    others.add(int(m.group(1)))
        sentence = causal_table().silent_ranks(str(root.evidence.get("signature", root.id)), reported, run_ranks - others)
        if sentence:
            root.summary = f"{root.summary.rstrip('. ')}. {sentence}"
            root.evidence["silent_ranks"] = sorted(run_ranks - others - reported)

    @staticmethod
    def _note_explained(root: _Draft, explained: list[tuple[_Draft, Any]]) -> None:
        """Say in the root's summary and evidence which later failures elsewhere it explains, and when."""
        notes = []
        for d, ln in sorted(explained, key=lambda x: x[0].when):
            ranks = ln.effect.ranks or {int(m.group(1)) for f in ln.effect.files if (m := _FILE_RANK.search(os.path.basename(f)))}
            files = ln.effect.files - ln.cause.files
            names = ([_who_wrote(f) for f in sorted(files)] or sorted(ln.effect.processes - ln.cause.processes)
                     or [_who_wrote(f) for f in sorted(ln.effect.files)])
            names = list(dict.fromkeys(names))
            where = f"rank{'s' if len(ranks) > 1 else ''} {_ranges(sorted(ranks))}" if ranks else (
                ", ".join(names[:4]) + (", ..." if len(names) > 4 else ""))
            after = describe_after(ln.after_s)
            notes.append({"finding": d.finding.id, "where": where, "after_s": ln.after_s, "rule": ln.rule.id})
            if ln.rule.explain and len(notes) == 1:
                sentence = ln.rule.explain.replace("{ranks}", where).replace("{effect}", d.finding.id).replace("{after}", after)
                root.finding.summary = f"{root.finding.summary.rstrip('. ')}. {sentence}"
        root.finding.evidence["explains"] = notes
