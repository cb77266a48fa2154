"""How an upstream fix reads in an answer: "Fixed upstream after your verl 0.7.0: owner/repo#N ...".

The tools attach :class:`~rlmedic.types.UpstreamFix` matches to their evidence (the diagnosis of
a traceback, or the ``upstream_fixes`` tool); each was judged against the versions that tool
saw. An answer knows more: an attached ``pip freeze`` or ``rlmedic env --json`` (``read_env``)
beats a version read from a log banner. So the matches are judged again here against every
version the evidence carries, then the best strong one leads with what to do (upgrade to the
release that holds it, or apply that change), or, when the user's release already has it, the
answer says so and points elsewhere. One place for these words: ``ask``, ``chat``, the web app,
Slack and ``watch`` all say it the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from rlmedic.tools.upstream import headline, what_to_do, when
from rlmedic.types import Citation, Evidence, UpstreamFix

#: Further matches mentioned after the lead, and the score a match without a strong tie needs to be mentioned.
ALSO_MAX = 2
RELATED_MIN = 0.6


def versions_of(evidence: Sequence[Evidence]) -> dict[str, str]:
    """The user's versions: those a listing of the environment gave (``read_env``) beat those logs showed."""
    out: dict[str, str] = {}
    for e in evidence:
        if e is not None and e.subject != "env":
            for k, v in e.versions.items():
                out.setdefault(k, v)
    for e in evidence:
        if e is not None and e.subject == "env":
            out.update(e.versions)
    return out


def judged(evidence: Sequence[Evidence]) -> list[UpstreamFix]:
    """Every upstream match in ``evidence`` once (best score kept), its status judged against
    :func:`versions_of`; best first, the ones already in the user's release after the others."""
    if not any(e is not None and e.upstream_fixes for e in evidence):
        return []  # nothing matched (or nothing synced): the history module is not imported for nothing
    from rlmedic.knowledge.history import IN_YOURS_MARGIN, status_for

    versions = versions_of(evidence)
    best: dict[tuple[str, str], UpstreamFix] = {}
    for e in evidence:
        for f in (e.upstream_fixes if e is not None else ()):
            key = (f.repo, f.commit)
            if key not in best or f.score > best[key].score:
                best[key] = f
    out = []
    for f in best.values():
        yours = versions.get(f.package, f.yours) if f.package else f.yours
        out.append(dataclasses.replace(f, yours=yours, status=status_for(f.release, yours)))
    out.sort(key=lambda f: -f.score)
    newer = [f for f in out if f.status != "in_yours"]
    if out and out[0].status == "in_yours" and newer and out[0].score < newer[0].score + IN_YOURS_MARGIN:
        out.remove(newer[0])
        out.insert(0, newer[0])  # the user still fails with the older commit: the newer one is the likelier fix
    return out


#: One answer line: its text with ``{cite}`` where its source's number goes, and that source.
Entry = tuple[str, Citation | None]


def entries(evidence: Sequence[Evidence]) -> tuple[list[Entry], list[Entry]]:
    """(lead lines, further lines) for the upstream fixes in ``evidence``; both empty when there are none.

    The lead is the best strong match after the user's release (or of unknown standing) with what matched
    and what to do, or a strong match already in their release ("look elsewhere"); further lines name up
    to two more matches."""
    fixes = judged(evidence)
    if not fixes:
        return [], []
    lead_lines: list[Entry] = []
    best = fixes[0]
    newer = [f for f in fixes if f.status != "in_yours"]
    if best.status == "in_yours" and best.strong:
        lead_lines.append((f"Already fixed in your {best.package} {best.yours}: {best.ref} '{best.subject}' ({when(best)}) "
                           f"{{cite}} changed the code that failed, and your release has it: the cause is likely "
                           f"elsewhere (your config, data, or another package).", best.citation))
        newer = [f for f in newer if f.strong][:ALSO_MAX]
    lead = next((f for f in newer if f.strong), None) if not lead_lines else None
    if lead is not None:
        lead_lines.append((f"{headline(lead)}: {lead.ref} '{lead.subject}' ({when(lead)}) {{cite}}.", lead.citation))
        lead_lines.append((f"  Matched: {lead.matched}.", None))
        if lead.status == "after_yours":
            lead_lines.append((f"  Do: {what_to_do(lead)}.", None))
        else:
            rel = lead.release.lstrip("vV") if lead.release else "a build after " + lead.commit[:10]
            lead_lines.append((f"  Do: if your {lead.package or 'copy'} is older than {rel}, {what_to_do(lead)}; "
                               f"attach `pip freeze` or `rlmedic env --python PY --json` to know.", None))
    further: list[Entry] = []
    for f in [f for f in newer if f is not lead and (f.strong or f.score >= RELATED_MIN)][:ALSO_MAX]:
        word = "Also changed the failing code" if f.strong else "Possibly related upstream change"
        further.append((f"{word}: {f.ref} '{f.subject}' ({when(f)}) {{cite}}.", f.citation))
    return lead_lines, further


def upstream_lines(evidence: Sequence[Evidence], cite: Callable[[Citation], int]) -> list[str]:
    """Answer lines for the upstream fixes in ``evidence`` (none when there are none), sources numbered by
    ``cite`` (``Answer.cite``): the lead lines, then the further ones."""
    lead, further = entries(evidence)
    return [text.replace("{cite}", f"[{cite(c)}]") if c is not None else text for text, c in lead + further]


def section(evidence: Sequence[Evidence]) -> Any:
    """The upstream fixes as an answer :class:`~rlmedic.agent.sections.Section` named ``upstream``: the lead
    lines in the short answer, further matches in the verbose part."""
    from rlmedic.agent.sections import Line, Section

    lead, further = entries(evidence)

    def line(entry: Entry) -> Any:
        return Line(entry[0], (entry[1],) if entry[1] is not None else ())

    return Section("upstream", tuple(line(e) for e in lead), tuple(line(e) for e in further))


def upstream_dicts(evidence: Sequence[Evidence]) -> list[dict[str, Any]]:
    """The JSON ``upstream_fixes`` of an answer: every match, judged, best first."""
    return [f.to_dict() for f in judged(evidence)]


def apply_upstream(answer: Any, evidence: Sequence[Evidence]) -> list[str]:
    """Fill ``answer.upstream_fixes`` and return the answer lines (one call for the composer)."""
    answer.upstream_fixes = upstream_dicts(evidence)
    return upstream_lines(evidence, answer.cite)
