"""How a known-issue match reads in an answer, an alert and a search result.

One place for the words, so ``ask``, ``chat``, ``watch`` and the MCP search tool all say
"Known issue owner/repo#N, fixed in ..." the same way. The answer pipeline calls
:func:`known_lines` with its own citation numbering (``cite``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlmedic.knowledge.known.match import KnownMatch
from rlmedic.types import Citation

#: Matches by similarity only are mentioned, never lead; at most this many, scoring at least RELATED_MIN
#: (a paraphrase of a record's symptoms scores ~0.3; a different bug in the same area ~0.15).
RELATED_MAX = 2
RELATED_MIN = 0.25


def leading(matches: Sequence[KnownMatch]) -> list[KnownMatch]:
    """The matches that lead an answer: certain (exact, regex, exception) and not fixed in the user's release."""
    return [m for m in matches if m.certain and m.version_status != "fixed_in_yours"]


def known_lines(matches: Sequence[KnownMatch], cite: Callable[[Citation], int], *, lead: bool = True) -> list[str]:
    """Answer lines for ``matches`` (best first): the leading record with its cause, fix and version advice,
    then demoted and merely similar records in one line each. ``cite`` numbers a citation (``Answer.cite``).
    ``lead=False``: the caller found that none of them explains the failure (a record that matched a
    cascade's line, an NCCL watchdog after an OOM): each is one line, none is told as the known issue."""
    lines: list[str] = []
    lead = leading(matches)[:1] if lead else []
    for m in lead:
        r = m.record
        ref = cite(m.citation) if m.citation else 0
        lines.append(f"Known issue: {r.title} ({r.source}) [{ref}].")
        if m.matched:
            lines.append(f"  Your log: {m.matched[:240]}")
        lines.append(f"  Cause: {r.cause.strip()}")
        lines.append(f"  Fix: {r.fix.summary.strip()}")
        for fix in m.fixes:
            if fix.key or fix.action.startswith("run: "):
                lines.append(f"    - {fix}")
        lines.append(f"  {m.advice} <{r.source_url}>")
        age = _old_thread(r.closed_at)
        if age:
            lines.append(f"  {age}")
    rest = [m for m in matches if m not in lead]
    for m in rest:
        if m.version_status == "fixed_in_yours" and m.certain:
            lines.append(f"Known issue {m.record.source} matches your error, but {_tail(m.advice)} [{cite(m.citation)}]")
    also = [m for m in rest if m.certain and m.version_status != "fixed_in_yours"][:RELATED_MAX]
    for m in also:
        lines.append(f"Also a known issue with this error: {m.record.title} [{cite(m.citation)}]: {m.advice}")
    related = [m for m in rest if not m.certain and m.score >= RELATED_MIN][:RELATED_MAX]
    for m in related:
        lines.append(f"Possibly related known issue: {m.record.title} [{cite(m.citation)}]: {m.advice}")
    return lines


#: A synced thread closed longer ago than this is flagged: the code may have moved on.
OLD_THREAD_DAYS = 365


def _old_thread(closed_at: str) -> str:
    """A warning for a thread closed over a year ago ("" otherwise, and for hand-written records)."""
    if not closed_at:
        return ""
    from rlmedic.knowledge.threads import age_days

    days = age_days({"closed_at": closed_at})
    if days is None or days <= OLD_THREAD_DAYS:
        return ""
    return f"The thread was closed in {closed_at[:7]}, over a year ago: the code may have changed since."


def _tail(advice: str) -> str:
    """The part of the advice after the issue's name (``your sglang 0.5 already has that fix...``)."""
    return advice.split("; ", 1)[1] if "; " in advice else advice


def alert_text(m: KnownMatch) -> str:
    """One line for a ``watch`` alert or a tool result: the advice with its URL."""
    return f"{m.advice} <{m.record.source_url}>"
