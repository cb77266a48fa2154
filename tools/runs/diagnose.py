"""Diagnose run folders: W&B runs, TensorBoard log folders, JSONL/CSV metric dumps.

:func:`diagnose_runs` reads each run (``wandb.py``, ``tensorboard.py``, ``dumps.py``), runs the
health checks of ``detectors.yaml`` on its curves and returns the same
:class:`~rlmedic.tools.logs.diagnose.Diagnosis` a text log gets, so the CLI, the agent, the
web app and Slack show it without knowing where it came from. A W&B run's console output
(``files/output.log``) is diagnosed as a log beside its curves. :func:`run_kind` tells a run
path from a log path (``tools/logs/diagnose.py`` asks it first).
"""

from __future__ import annotations

import math
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError
from rlmedic.tools.runs.curves import Curve, Run, read_file_bytes
from rlmedic.tools.runs.detectors import Detection, builtin_rules, detect
from rlmedic.tools.runs.locate import expand, run_kind, split_run_paths, every_run  # noqa: F401 - re-exported
from rlmedic.tools.runs.vocabulary import builtin_vocabulary
from rlmedic.types import Citation, Finding, Fix, severity_rank

#: Points of each curve an answer carries for a plot (the web app, Slack's PNG)
PLOT_POINTS = 300
_ROLE = {"critical": "cause", "error": "cause", "warning": "symptom", "info": "symptom"}


# ------------------------------------------------------------------ what a path is --


def load_run(kind: str, path: Path, confinement: Any = None) -> Run:
    from rlmedic.tools.runs import dumps, tensorboard, wandb

    vocab = builtin_vocabulary()

    # only the numbers some concept may read are parsed (most of a long run's cost); every key is still listed
    if kind == "wandb-run":
        run = wandb.read_run(path, confinement, keep=vocab.known)
    elif kind == "tensorboard":
        run = tensorboard.read_logdir(path, confinement, keep=vocab.known)
    elif kind == "dump":
        run = dumps.read_dump(path, vocab.step_keys, confinement,
                              keep=None if dumps.TB_EXPORT_NAME.match(path.name) else vocab.known)
    elif kind == "tb-csv":
        run = dumps.read_tb_exports(path, vocab.step_keys, confinement)
    else:
        raise UserError(f"{path}: not a W&B run, TensorBoard log folder or metric dump")
    for k in vocab.step_keys:
        run.curves.pop(k, None)
    if kind == "tb-csv" or (kind == "dump" and dumps.TB_EXPORT_NAME.match(path.name)):
        # a TensorBoard CSV download's tag comes from its file name, where "/" became "_"
        run.curves = {vocab.export_key(k): c for k, c in run.curves.items()}
        for c in run.curves.values():
            c.key = vocab.export_key(c.key)
        run.keys = [vocab.export_key(k) for k in run.keys]
    run.framework = vocab.framework_of(run.keys or list(run.curves))
    return run


# ------------------------------------------------------------------ findings -------


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == int(v) and abs(v) < 1e6:
            return str(int(v))
        return f"{v:.3g}"
    return str(v)


def _fixes(rule: dict[str, Any], framework: str) -> list[Fix]:
    cites = builtin_rules().get("citations") or {}
    table = rule.get("fixes") or {}
    chosen = table.get(framework) or table.get("generic") or []
    out = []
    for f in chosen:
        c = cites[f["cite"]]
        citation = Citation.doc(c["ref"], c.get("section", ""), url=c.get("url", ""))
        key = str(f.get("key") or "")
        out.append(Fix(action=f"{f['action']}: {key}" + (f" = {f['value']}" if "value" in f else "") if key else f["action"],
                       op="set" if key and "value" in f else "action", key=key, new=f.get("value"),
                       framework=framework if framework in table else "", rule=rule["id"], citations=(citation,)))
    return out


def _summary(det: Detection, run: Run) -> str:
    r = det.rule
    n = det.numbers
    if r["check"] == "stopped":
        when = datetime.fromtimestamp(n["last_write"], tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        gap = f", {n['silent_s'] / n['step_interval_s']:.0f}x the usual {n['step_interval_s']:.3g} s between steps" \
            if n.get("step_interval_s") else ""
        if run.source == "wandb":
            return (f"{r['title']} (no exit record; last step {n['last_step']}, last write {when}, silent for "
                    f"{n['silent_s'] / 3600:.1f} h{gap}): W&B still shows it running")
        return (f"the run stopped at step {n['last_step']} ({run.source} keeps no exit record; last write {when}, "
                f"silent for {n['silent_s'] / 3600:.1f} h{gap}): if it was meant to go further, it stopped without finishing")
    if r["check"] == "nonfinite":
        return f"{r['title']} ({det.key} became {n['value']} at step {det.step}; before {_fmt(det.before)})"
    if r["check"] == "zero_streak":
        tail = "until the end" if n["ongoing"] else f"to step {n['until_step']}"
        return (f"{r['title']} ({det.key} {_fmt(det.before)} -> 0 from step {det.step}, {n['zero_points']} points {tail}; "
                f"every rollout scores 0: a dead inference server or a broken reward function; a circuit breaker stops after "
                f"{r.get('min_steps', 10)})")
    if r["check"] == "spike":
        return f"{r['title']} ({det.key} {_fmt(det.after)} at step {det.step}, {n['ratio']:.0f}x the median {_fmt(det.before)} before it)"
    text = f"{r['title']} ({det.key} {_fmt(det.after)} from step {det.step}; it was {_fmt(det.before)} before"
    if r["check"] == "length_cap" and n.get("cap"):
        text += f"; cap {_fmt(float(n['cap']))} tokens"
    if det.extra:
        text += f"; {det.extra}"
    return text + ")"


def _plot(c: Curve) -> list[list[float]]:
    n = len(c)
    stride = max(1, math.ceil(n / PLOT_POINTS))
    return [[int(c.steps[i]), float(c.values[i]) if math.isfinite(float(c.values[i])) else str(float(c.values[i]))]
            for i in range(0, n, stride)]


def finding_for(det: Detection, run: Run, *, label: str = "") -> Finding:
    from rlmedic.tools.runs.spark import marked

    rule = det.rule
    keys = [det.key, *[k for k in det.related if k != det.key]]
    curves = [run.curves[k] for k in keys if k in run.curves]
    excerpt = "\n".join(marked(c.key, c.steps, c.values, det.step) for c in curves)
    numbers = {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in det.numbers.items()
               if v is not None and k != "last_write"}
    evidence: dict[str, Any] = {
        "metric": det.key,
        "step": det.step,
        "before": det.before,
        "after": det.after,
        "numbers": numbers,
        "excerpt": excerpt,
        "series": det.key,
        "signature": f"curve:{rule['id']}",
        "role": _ROLE[rule["severity"]],
        "count": 1,
        "occurrences": [f"{run.path} step {det.step}"],
        "run": run.path,
        "source": run.source,
        "plot": {"step": det.step, "curves": {c.key: _plot(c) for c in curves}},
    }
    if run.framework:
        evidence["framework"] = run.framework
    summary = _summary(det, run)
    if label:  # one of several runs (a wandb/ folder with --all, a zip): its findings and pictures say which
        summary = f"{label}: {summary}"
        evidence["label"] = label
    card = str(rule.get("card") or "")
    citations = [Citation.card(card)] if card else []
    severity = rule["severity"]
    if rule["check"] == "stopped" and run.source != "wandb":
        # TensorBoard and dumps keep no exit record: a finished run looks the same, so it is only a warning
        severity = "warning"
        evidence["role"] = "symptom"
    return Finding(id=rule["id"], category=rule["category"], severity=severity, summary=summary,
                   file=run.path, line=None, key=det.key, rule=rule["id"], evidence=evidence,
                   fixes=_fixes(rule, run.framework), citations=citations, card=card)


def _no_curves(run: Run) -> Finding:
    """A run folder with no number in it is no healthy run: say so (an empty, damaged or foreign file)."""
    what = {"wandb": "transaction log", "tensorboard": "event files"}.get(run.source, "dump")
    return Finding(id="no-curves", category="other", severity="warning", file=run.path,
                   summary=(f"No metric could be read from this {run.source} run's {what}: it is empty, damaged, or "
                            "holds no scalars (images, histograms, text only). Check the path and that the run logged"),
                   evidence={"excerpt": "", "numbers": {}, "signature": "curve:no-curves", "role": "symptom", "count": 1,
                             "occurrences": [run.path], "run": run.path, "source": run.source})


def _checked(run: Run, keys: dict[str, str]) -> list[str]:
    vocab = builtin_vocabulary()
    rules = builtin_rules()["rules"]
    done, missing = [], []
    for rule in rules:
        concept = rule.get("concept")
        if "check" not in rule:
            continue  # a text-log rule
        if rule["check"] == "stopped":
            done.append("stopped run (exit record, age of the files)")
        elif rule["check"] == "nonfinite":
            present = [keys[c] for c in rule["concepts"] if c in keys]
            (done if present else missing).append(f"NaN/Inf ({', '.join(present)})" if present else "NaN/Inf")
        elif concept in keys:
            done.append(f"{rule['id']} ({keys[concept]})")
        else:
            missing.append(f"{rule['id']} (no {vocab.concepts[concept].label} metric)")
    steps = run.last_step
    out = [f"{run.source} run {run.name}: {len(run.keys or run.curves)} metrics, "
           + (f"last step {steps}" if steps is not None else "no steps")
           + (f", framework {run.framework}" if run.framework else "")]
    out.append("checks: " + "; ".join(done))
    if missing:
        out.append("not checked: " + "; ".join(missing))
    end = {True: f"an exit record (code {run.exit_code})", False: f"an exit record with code {run.exit_code}",
           None: "no exit record"}[run.finished]
    out.append(f"end of the run: {end}")
    return out


def diagnose_runs(paths: list[str | os.PathLike[str]], *, confinement: Any = None, all_runs: bool = False,
                  now: float | None = None) -> Any:
    """Diagnose run folders, zips of them and metric dumps; a :class:`~rlmedic.tools.logs.diagnose.Diagnosis`."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        return _diagnose_runs(paths, confinement, all_runs, now, stack)


def _diagnose_runs(paths: list[Any], confinement: Any, all_runs: bool, now: float | None, stack: Any) -> Any:
    from rlmedic.tools.logs.diagnosis import Diagnosis
    from rlmedic.tools.runs.archive import run_root, unpacked

    started = time.perf_counter()
    targets: list[tuple[str, Path]] = []
    #: an unpacked archive's private folder -> the archive's name, for what is shown
    shown_as: dict[str, str] = {}
    for raw in paths:
        path = confinement.existing(raw) if confinement is not None else Path(raw)
        kind = run_kind(path)
        if kind is None:
            raise UserError(f"{raw}: not a W&B run, TensorBoard log folder or JSONL/CSV metric dump")
        if kind == "zip":
            tmp = stack.enter_context(unpacked(path, confinement))
            shown_as[str(tmp)] = str(raw)
            path = run_root(tmp)
            kind = run_kind(path)
            if kind is None or kind == "zip":
                raise UserError(f"{raw}: no W&B or TensorBoard run in this archive")
        # a zip holds the runs its sender picked (the web app and Slack take no --all): every one is read
        found = expand(kind, path, all_runs or str(raw) in shown_as.values())
        if not found:
            raise UserError(f"{raw}: no runs in this folder")
        targets += found
    findings: list[Finding] = []
    checked: list[str] = []
    runs: list[dict[str, Any]] = []
    log_results: list[Any] = []
    finished_all = True
    last_step = None
    frameworks: set[str] = set()
    vocab = builtin_vocabulary()
    for kind, path in targets:
        inside = next((tmp for tmp in shown_as if str(path).startswith(tmp)), None)
        # an unpacked archive is rlmedic's own private folder, outside the user's roots
        run = load_run(kind, path, None if inside else confinement)
        if inside:
            run.path = shown_as[inside] + ":" + (str(path)[len(inside):] or "/")
        dets, keys = detect(run, vocab, now=now)
        label = run.name if len(targets) > 1 else ""
        findings += [finding_for(d, run, label=label) for d in dets]
        if not run.curves:
            findings.append(_no_curves(run))
        checked += _checked(run, keys)
        finished_all = finished_all and run.finished is True
        if run.last_step is not None:
            last_step = max(last_step or 0, run.last_step)
        if run.framework:
            frameworks.add(run.framework)
        runs.append({"path": run.path, "source": run.source, "name": run.name, "curves": len(run.keys or run.curves),
                     "points": sum(c.total for c in run.curves.values()), "last_step": run.last_step,
                     "finished": run.finished, "exit_code": run.exit_code, "framework": run.framework,
                     "concepts": keys, "notes": run.notes})
        log = _console_diagnosis(run, None if inside else confinement,
                                 run.log_file.replace(inside, shown_as[inside] + ":") if inside else "")
        if log is not None:
            log_results.append(log)
    findings.sort(key=lambda f: (severity_rank(f.severity), f.evidence.get("step") or 0))
    root = 0 if findings and severity_rank(findings[0].severity) <= severity_rank("error") else None
    if root is not None:  # the earliest serious finding is the root: what went wrong first explains the rest
        serious = [f for f in findings if severity_rank(f.severity) <= severity_rank("error")]
        first = min(serious, key=lambda f: (f.evidence.get("step") or 0, severity_rank(f.severity)))
        findings.remove(first)
        findings.insert(0, first)
    verdict = "failed" if root is not None else ("finished" if finished_all else ("healthy" if last_step is not None else "no-errors"))
    warnings = [f.id for f in findings if f.severity == "warning"]
    health: dict[str, Any] = {"verdict": verdict, "checked": checked}
    if warnings:
        health["warnings"] = warnings
    stats: dict[str, Any] = {
        "files": len(targets), "lines": 0, "bytes": 0, "last_step": last_step, "clean_shutdown": finished_all,
        "frameworks": sorted(frameworks), "runs": runs, "health": health,
        "signatures_matched": sorted({f.id for f in findings}),
    }
    diagnosis = Diagnosis(findings=findings, root=root, stats=stats)
    for log in log_results:
        diagnosis = merge(diagnosis, log)
    diagnosis.stats["seconds"] = round(time.perf_counter() - started, 3)
    return diagnosis


def _console_diagnosis(run: Run, confinement: Any, name: str = "") -> Any:
    """The run's console output diagnosed as a log (crashes the curves cannot show), or None. The log
    scanner is imported only for a run that has console output (~0.16 s)."""
    lines = run.config.get("_output_lines")
    if not run.log_file and not lines:
        return None
    from rlmedic.tools.logs.diagnose import diagnose, diagnose_texts

    try:
        if run.log_file:
            if confinement is not None:
                return diagnose([run.log_file], confinement=confinement)
            text = read_file_bytes(run.log_file).decode("utf-8", errors="replace")
            return diagnose_texts([(name or run.log_file, text)])
        if lines:
            return diagnose_texts([(f"{run.path}/output (transaction log)", "\n".join(lines))])
    except UserError:
        return None
    return None


def merge(curves: Any, log: Any) -> Any:
    """One diagnosis from a run's curves and its console log: the worse root leads, the rest follow."""
    from rlmedic.tools.logs.diagnosis import Diagnosis

    log_root = log.root_finding
    # the log's interruption guess is the curves' stopped-run check, which knows the files' age: keep one
    log_findings = [f for f in log.findings if f.id != "probable-interruption"]
    if log_root is not None and log_root.id == "probable-interruption":
        log_root = None
    cur_root = curves.root_finding
    if log_root is not None and (cur_root is None or severity_rank(log_root.severity) < severity_rank(cur_root.severity)):
        first, rest = [log_root, *[f for f in log_findings if f is not log_root]], curves.findings
        for f in rest:
            f.root = None
    else:
        first, rest = curves.findings, log_findings
        for f in rest:
            f.root = None
    findings = [*first, *rest]
    root = 0 if (log_root is not None or cur_root is not None) and findings else None
    stats = dict(curves.stats)
    stats["files"] = stats.get("files", 0) + log.stats.get("files", 0)
    stats["lines"] = stats.get("lines", 0) + log.stats.get("lines", 0)
    stats["bytes"] = stats.get("bytes", 0) + log.stats.get("bytes", 0)
    stats["frameworks"] = sorted(set(stats.get("frameworks") or []) | set(log.stats.get("frameworks") or []))
    stats["signatures_matched"] = sorted(set(stats.get("signatures_matched") or []) | {f.id for f in log_findings})
    health = dict(stats.get("health") or {})
    log_health = log.stats.get("health") or {}
    health["checked"] = [*(health.get("checked") or []), *[f"console log: {c}" for c in log_health.get("checked") or []]]
    if root is not None:
        health["verdict"] = "failed"
    stats["health"] = health
    return Diagnosis(findings=findings, root=root, stats=stats, hits=log.hits, files=log.files)
