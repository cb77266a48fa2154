"""The answer's sections, one pure function each: ``(Inquiry, Case, ...) -> Section``.

Every line carries the citations it rests on (an evidence line ``file:line``, a value read from
an attached file, a known record, a card or a doc); :func:`rlmedic.agent.compose.compose` numbers
them in order of appearance and joins the sections. A section's ``lines`` are the short answer
(about 40 lines for one root); its ``more`` lines are shown with ``--verbose``, in a collapsible
block on the web page and as a second message in Slack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from rlmedic.agent.case import Case
from rlmedic.agent.inquiry import Inquiry
from rlmedic.types import Citation, Finding, Fix, severity_rank

#: Lines of evidence under the root: the marked line and at most two lines of its context.
CONTEXT_LINES = 2
MAX_EVIDENCE_LINES = 5
#: Numbered fixes in the short answer; the rest go to the verbose part.
SHORT_FIXES = 5
#: Characters of one evidence line shown.
LINE_CHARS = 220


@dataclass(frozen=True)
class Line:
    """One line of the answer and the sources it rests on (numbered where ``{cite}`` stands, else at its end)."""

    text: str
    cites: tuple[Citation, ...] = ()


@dataclass(frozen=True)
class Section:
    name: str
    lines: tuple[Line, ...] = ()
    more: tuple[Line, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.lines or self.more)


def _line(text: str, *cites: Citation | None) -> Line:
    return Line(text, tuple(c for c in cites if c is not None))


def log_citation(file: str, line: int | None) -> Citation | None:
    return Citation.log(file, line) if file and line else None


# ---------------------------------------------------------------------- what failed


def evidence_lines(f: Finding) -> list[str]:
    """The finding's own line first (``>``), then at most :data:`CONTEXT_LINES` lines before it, nearest first.

    A metric finding's evidence is its values by step (one line)."""
    excerpt = str(f.evidence.get("excerpt") or "")
    rows = excerpt.splitlines()
    marked = [r for r in rows if r.lstrip().startswith(">")]
    where = (f.file.rsplit("/", 1)[-1] if f.file else "").replace("<question>", "your text")
    if not marked:  # a metric's values by step, or a finding with only its line's text
        text = str(f.evidence.get("line_text") or (rows[0] if rows else "")).strip()
        label = f"{where}:{f.line}  " if where and f.line else ""
        return [f"> {label}{text[:LINE_CHARS]}"] if text else []
    out = []
    mark_at = rows.index(marked[0])
    before = [r for r in rows[:mark_at] if r.partition(" | ")[2].strip()]  # blank lines are no context
    for r in [rows[mark_at]] + before[-CONTEXT_LINES:][::-1]:
        num, _, text = r.lstrip("> ").partition(" | ")
        head = ">" if r.lstrip().startswith(">") else " "
        label = f"{where}:{num.strip()}" if where and num.strip().isdigit() else num.strip()
        out.append(f"{head} {label}  {text.strip()[:LINE_CHARS]}")
    return out


def failed(inq: Inquiry, case: Case) -> Section:
    """What failed, in 1-3 lines, with its evidence; or the verdict on a run with no failure."""
    root = case.root
    if root is None:
        return status(inq, case)
    label = {"config": "config", "gpus": "GPUs", "checkpoints": "checkpoints"}.get(
        case.root_ev.subject if case.root_ev else "", "log")
    if case.root_ev is not None and case.root_ev.subject == "question":
        label = "log you pasted" if severity_rank(root.severity) < severity_rank("warning") else "problem you describe"
    lines = [_line(f"From the {label}: {root.summary.rstrip('.')} {{cite}}.", log_citation(root.file, root.line))]
    for f in case.before_root[:2]:
        lines.append(_line(f"  Before it: {f.summary.rstrip('.')} {{cite}}.", log_citation(f.file, f.line)))
    in_play = settings_in_play(case, [root, *case.before_root])
    if in_play:
        lines.append(_line("  Your config: " + ", ".join(f"{k} = {v}" for k, v in in_play[:3]) + "."))
    more: list[Line] = []
    if case.cascades:
        c = case.cascades[0]
        more.append(_line(f"{len(case.cascades)} later error(s) on other ranks or files follow from it "
                          f"(e.g. {c.summary.split('. ')[0]}) {{cite}}.", log_citation(c.file, c.line)))
    shown = [*evidence_lines(root)]
    for f in case.before_root[:1]:
        shown += evidence_lines(f)[:1]
    body = [Line("Evidence:")] + [Line("  " + text) for text in shown[:MAX_EVIDENCE_LINES]] if shown else []
    return Section("cause", tuple(lines + body), tuple(more))


def settings_in_play(case: Case, findings: Sequence[Finding]) -> list[tuple[str, Any]]:
    """The attached config's values of the keys these findings' fixes act on."""
    out: list[tuple[str, Any]] = []
    for f in findings:
        for fix in f.fixes:
            key = fix.key.strip()
            if key and key in case.settings and all(key != k for k, _ in out):
                out.append((key, case.settings[key]))
    return out


def status(inq: Inquiry, case: Case) -> Section:
    """Healthy, finished, nothing to diagnose, or no progress to judge: with what was checked."""
    checked = "; ".join(e.checked for e in case.evidence if e.checked and e.subject != "question")
    if case.nothing:
        what = []
        for e in case.looked:
            empty = [f.file for f in e.findings if f.id == "empty-log" and f.file]
            if empty:
                what.append(", ".join(empty) + (" is" if len(empty) == 1 else " are") + " empty")
            else:
                read = (e.checked or "").split(";")[0].strip()
                what.append("no error, no training step and no metric in what was attached" + (f" ({read})" if read else ""))
        lines = [Line("Nothing to diagnose here: " + "; ".join(what) + "."),
                 Line("No cause is guessed from the playbook without evidence.")]
        if checked:
            lines.append(Line(f"What was checked: {checked}."))
        return Section("status", tuple(lines))
    logs = case.subject("logs")
    if case.healthy and logs:
        head = "The run finished cleanly" if case.finished else "The run looks healthy"
        lines = [Line(f"{head}: no error and no failure signature in the logs.")]
    elif case.healthy:
        lines = [Line("No problem found in what was checked (" + ", ".join(sorted({e.subject for e in case.looked})) + ").")]
    elif logs and not [f for e in logs for f in e.findings if f.severity != "info"]:
        lines = [Line("No error was found in the logs, but they show no training progress to judge the run by.")]
    else:
        lines = []
    if case.evidence and checked and (case.healthy or "status" in case.leads or lines):
        lines.append(Line(f"What was checked: {checked}."))
    warnings = [fact for e in logs for fact in e.facts]
    more = [Line("Worth a look (warnings, not failures): " + "; ".join(warnings[:3]))] if case.healthy and warnings else []
    flagged = [f for e in logs for f in e.findings if f.severity == "warning" and f.id != "empty-log"]
    if case.healthy and case.asks_problem and "status" not in case.leads and flagged:
        # the question is about a problem: the warnings are what the logs show about it, not a footnote
        lines = [Line("No failure in the logs; these warnings are what they show:")]
        lines += [_line(f"  {f.summary.rstrip('.')} {{cite}}.", log_citation(f.file, f.line)) for f in flagged[:3]]
        more = [Line(f"What was checked: {checked}.")] if checked else []
    if not lines and not case.root:
        # warnings only: they are the findings
        for e in case.looked:
            for f in e.findings:
                if severity_rank(f.severity) <= severity_rank("warning"):
                    lines.append(_line(f"Found: {f.summary.rstrip('.')} {{cite}}.", log_citation(f.file, f.line)))
                    if len(lines) >= 3:
                        break
    return Section("status", tuple(lines), tuple(more))


# ---------------------------------------------------------------------- GPUs, checkpoints, config


def gpus(inq: Inquiry, case: Case) -> Section:
    lines: list[Line] = []
    more: list[Line] = []
    for e in case.subject("gpus"):
        bad = [a for a in e.advice if severity_rank(a.severity) <= severity_rank("warning")]
        for a in bad:
            lines.append(_line(f"GPU check: {a.summary}" + (f" Do: {a.fixes[0]}." if a.fixes else ""), a.citation))
        if not bad:
            lines.append(Line("GPU check: nothing left over and no fault on the GPUs."))
        lines += [Line(f"  {fact}") for fact in e.facts[:4]]
        more += [Line(f"  {fact}") for fact in e.facts[4:8]]
        more += [Line(f"  note: {a.summary}") for a in e.advice if a.severity == "info" and a.id != "gpu-in-use"][:3]
    return Section("gpus", tuple(lines), tuple(more))


def plan(inq: Inquiry, case: Case) -> Section:
    lines: list[Line] = []
    more: list[Line] = []
    for e in case.subject("checkpoints"):
        for f in e.findings:
            if f is not case.root and severity_rank(f.severity) <= severity_rank("warning"):
                lines.append(Line(f"Checkpoints: {f.summary.rstrip('.')}."))
        lines += [Line(f"  {fact}") for fact in e.facts[:4]]
        more += [Line(f"  {fact}") for fact in e.facts[4:]]
        if e.plan:
            lines.append(_line("Recovery plan: " + e.plan[0], *e.citations[:1]))
            lines += [Line(f"  - {step}") for step in e.plan[1:8]]
            more += [Line(f"  - {step}") for step in e.plan[8:12]]
    return Section("plan", tuple(lines), tuple(more))


def config(inq: Inquiry, case: Case) -> Section:
    """The config's own problems (the root excepted): errors in the short answer, warnings behind it."""
    lines: list[Line] = []
    more: list[Line] = []
    for e in case.subject("config"):
        for f in e.findings:
            if f is case.root or severity_rank(f.severity) > severity_rank("warning"):
                continue
            where = f"{f.key}: " if f.key else ""
            line = _line(f"Config check ({f.severity}): {where}{f.summary.rstrip('.')}.", f.citation)
            (lines if f.severity in ("critical", "error") and case.root is None else more).append(line)
        more += [Line(f"  {fact}") for fact in e.facts]
    return Section("config", tuple(lines[:4]), tuple(more[:8]))


# ---------------------------------------------------------------------- fixes


def fixes(inq: Inquiry, case: Case, chosen: Sequence[Fix], diff: str, *, card_cite: Citation | None = None) -> Section:
    """What to change: the ranked fixes (at most :data:`SHORT_FIXES` in the short answer) and the diff."""
    lines: list[Line] = []
    more: list[Line] = []
    if chosen:
        lines.append(Line("What to change (most effective first):"))
        for i, fix in enumerate(chosen, 1):
            text = str(fix)
            tag = f" [{fix.framework}]" if fix.framework and fix.framework != "generic" and not case.framework else ""
            why = f": {fix.why.rstrip('.')}" if fix.why and fix.key and fix.why not in text else ""
            cite = fix.citation or card_cite
            (lines if i <= SHORT_FIXES else more).append(_line(f"  {i}. {text}{why}{tag}", cite))
    if diff:
        lines += [Line("Corrected config (diff):")] + [Line(row) for row in diff.rstrip().splitlines()]
    return Section("fixes", tuple(lines), tuple(more))


# ---------------------------------------------------------------------- knowledge


def known(inq: Inquiry, case: Case, lead: Any, related: Sequence[Any], *, brief: bool = False) -> Section:
    """A known upstream issue that the evidence matches (its string, regex or exception), and at most two
    related records, each saying what matched; worded once for every front door
    (:func:`rlmedic.knowledge.known.answer.known_lines`). ``brief`` (a follow-up the thread already told it
    to): all of it under "more", where its fixes' citation still points."""
    from rlmedic.knowledge.known.answer import known_lines

    matches = ([lead] if lead is not None else []) + list(related[:2])
    if not matches:
        return Section("known")
    cites: list[Citation] = []

    def mark(citation: Citation) -> int:  # a placeholder number per citation, turned into {cite} below
        cites.append(citation)
        return MARK + len(cites) - 1

    how = {"exact": "the same error string", "regex": "its error pattern", "exception": "the exception and its message"}
    lines: list[Line] = []
    for text in known_lines(matches, mark, lead=lead is not None):
        found = [int(n) - MARK for n in re.findall(r"\[(\d+)\]", text) if int(n) >= MARK]
        text = re.sub(r"\[(\d+)\]", lambda m: "{cite}" if int(m.group(1)) >= MARK else m.group(0), text)
        lines.append(Line(text, tuple(cites[i] for i in found[:1])))
    for m in related[:2]:  # what each related record matched, in one line
        if m.matched:
            lines.append(Line(f"    (it matched {how.get(m.how, m.how)}: {m.matched.strip()[:120]})"))
    return Section("known", (), tuple(lines)) if brief else Section("known", tuple(lines))


#: Placeholder citation numbers while known_lines writes its text (far above any real one).
MARK = 900000


def background(inq: Inquiry, case: Case, cards: Sequence[tuple[Any, float]], *, lead: bool,
               told: bool = False) -> Section:
    """Playbook cards: the likely cause when nothing more specific exists (``lead``), else background (under
    "more" on a follow-up the thread already explained the failure to: ``told``)."""
    if not cards:
        return Section("cards")
    best = cards[0][0]
    head = _line(f"{'Likely cause (playbook)' if lead else 'Background (playbook)'}: {best.title} {{cite}}.", best.citation)
    why = Line("Why it happens: " + " ".join(c.rstrip(".") + "." for c in best.causes[:2]))
    also = [_line(f"Also check: {card.title} {{cite}}.", card.citation) for card, _ in cards[1:3]]
    if lead or (case.root is not None and best.category == case.root.category and not told):
        # the likely cause when nothing more specific exists; else the root's own kind of failure, explained
        return Section("cards", (head, why), tuple(also))
    return Section("cards", (), (head, why, *also))


def documents(inq: Inquiry, case: Case, docs: Sequence[Any], *, leading: bool) -> Section:
    """The team's own indexed documents that match the question and the root's evidence."""
    if not docs:
        return Section("docs")
    from rlmedic.knowledge.retrieve import key_sentences

    query = inq.question + (" " + case.root.summary if case.root else "")
    if leading:
        lines = tuple(_line(f"From your documents ({d.source}{' § ' + d.section if d.section else ''}) {{cite}}: "
                            f"{key_sentences(d, query)}", d.citation) for d in docs[:1])
        rest = tuple(_line("See also: {cite}.", d.citation) for d in docs[1:3])
        return Section("docs", lines, rest)
    if case.looked:  # with files attached, the team's own doc that matches the evidence is part of the answer
        d = docs[0]
        return Section("docs", (_line(f"Your team's documents ({d.source}{' § ' + d.section if d.section else ''}) "
                                      f"{{cite}}: {key_sentences(d, query)}", d.citation),),
                       tuple(_line("See also: {cite}.", x.citation) for x in docs[1:3]))
    return Section("docs", (), (_line("Documentation: " + ", ".join("{cite}" for _ in docs[:3]) + ".", *[d.citation for d in docs[:3]]),))


def needs(inq: Inquiry, case: Case) -> Section:
    """Which file to attach for the evidence the question needs."""
    wanted = list(case.needs)
    if case.nothing and not wanted:
        wanted = ["attach the training log of the failed run (the file its stdout/stderr went to, or the folder of "
                  "per-rank logs; `kubectl logs POD | rlmedic ask ... --attach -`)"]
    return Section("needs", tuple(Line(f"To answer this exactly, {text}.") for text in wanted))


def earlier(inq: Inquiry, case: Case) -> Section:
    """A follow-up refers to what the thread already established, in one line."""
    if not inq.history:
        return Section("earlier")
    last = inq.history[-1]
    said = str(last.get("summary") or "").strip()
    if not said:
        return Section("earlier")
    return Section("earlier", (Line(f"Earlier in this thread: {said.rstrip('.')}."),))


def related_findings(inq: Inquiry, case: Case, category: str) -> Section:
    """Findings of the thread's files on the follow-up's own topic (the category its playbook card has)."""
    lines = []
    for e in case.looked:
        for f in e.findings:
            if f.category == category and severity_rank(f.severity) <= severity_rank("warning"):
                lines.append(_line(f"From your files: {f.summary.rstrip('.')} {{cite}}.", log_citation(f.file, f.line)))
    return Section("related", tuple(lines[:3]))
