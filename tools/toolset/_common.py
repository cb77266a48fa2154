"""What the built-in tools share: citations in a line, and the Evidence helpers their adapters use."""

from __future__ import annotations

from typing import Any

from rlmedic.types import Citation, Finding, UpstreamFix, severity_rank


def cite(c: Any) -> str:
    """`` [citation]`` after a line, or nothing."""
    return f" [{c}]" if c else ""


def serious_findings(findings: list[Finding]) -> list[Finding]:
    """The findings of severity error or worse."""
    return [f for f in findings if severity_rank(f.severity) <= severity_rank("error")]


def add_citations(out: list[Citation], items: Any) -> None:
    """Append the citations among ``items`` that ``out`` does not hold yet."""
    for c in items or ():
        if isinstance(c, Citation) and c not in out:
            out.append(c)


def upstream_fixes_of(items: Any) -> list[UpstreamFix]:
    """Upstream fixes kept in a result as JSON (``stats.upstream_fixes``) back as models."""
    out = []
    for item in items or ():
        try:
            out.append(item if isinstance(item, UpstreamFix) else UpstreamFix.from_dict(item))
        except (TypeError, ValueError):
            continue
    return out
