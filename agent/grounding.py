"""Tool results -> the structured parts of an :class:`Answer` (both engines use this).

The root cause, its evidence lines, the fixes, the config diff and the citations come
from the tools' JSON data, never from the model's prose: whatever the model writes,
the structured answer holds only what a tool established.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Protocol

from rlmedic.agent.events import Answer
from rlmedic.types import Citation, Fix

_DOC = re.compile(r"^(?P<ref>.+?)(?: § (?P<section>.+?))?(?: \(lines (?P<a>\d+)-(?P<b>\d+)\))?$")
_LOG = re.compile(r"^(?P<ref>.+):(?P<line>\d+)$")
_CARD = re.compile(r"^card:(?P<ref>[\w.-]+)(?: \((?P<section>.*)\))?$")


class ResultLike(Protocol):
    name: str
    ok: bool
    data: Any


def citation_from(value: Any) -> Citation | None:
    """A :class:`Citation` from its dict (``Citation.to_dict``) or its text (``str(Citation)``)."""
    if isinstance(value, Citation):
        return value
    if isinstance(value, dict) and value.get("kind") in ("card", "doc", "log", "issue", "config"):
        lines = value.get("lines")
        return Citation(kind=value["kind"], ref=str(value.get("ref", "")), section=value.get("section") or "",
                        lines=tuple(lines) if lines else None, url=value.get("url") or "")
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if m := _CARD.match(text):
        return Citation(kind="card", ref=m["ref"], section=m["section"] or "")
    if (m := _LOG.match(text)) and "§" not in text:
        line = int(m["line"])
        return Citation(kind="log", ref=m["ref"], lines=(line, line))
    m = _DOC.match(text)
    lines = (int(m["a"]), int(m["b"])) if m and m["a"] else None
    return Citation(kind="doc", ref=m["ref"] if m else text, section=(m["section"] or "") if m else "", lines=lines)


def _fix_from(detail: dict[str, Any]) -> Fix:
    """A :class:`Fix` from its JSON (``Fix.to_dict``: diagnose's fix_details, fix_config's changes)."""
    raw = detail.get("citations") or ([detail["citation"]] if detail.get("citation") else [])
    citations = tuple(c for c in (citation_from(r) for r in raw) if c is not None)
    op = detail.get("op") if detail.get("op") in ("set", "delete", "rename", "add_flag", "remove_flag", "action") else "action"
    return Fix(action=str(detail.get("action") or ""), op=op, key=str(detail.get("key") or ""), old=detail.get("old"),
               new=detail.get("new"), why=str(detail.get("why") or detail.get("reason") or ""),
               framework=str(detail.get("framework") or ""), rule=str(detail.get("rule") or ""), citations=citations)


def root_finding(data: dict[str, Any]) -> dict[str, Any] | None:
    """The root finding of a ``diagnose`` result (or its worst finding)."""
    findings = data.get("findings") or []
    root = data.get("root")
    if isinstance(root, int) and 0 <= root < len(findings):
        return findings[root]
    return findings[0] if findings else None


def ground(answer: Answer, results: Iterable[ResultLike]) -> Answer:
    """Fill ``answer``'s structured fields from successful tool results, in call order."""
    for result in results:
        if not result.ok:
            continue
        data = result.data if result.data is not None else {}
        if result.name == "search_docs":
            hits = data if isinstance(data, list) else data.get("results") or []
            for hit in hits[:3]:
                if cite := citation_from(hit.get("citation")):
                    answer.cite(cite)
            continue
        if not isinstance(data, dict):
            continue
        if result.name == "diagnose":
            _ground_diagnosis(answer, data)
        elif result.name == "fix_config":
            _ground_fix(answer, data)
        elif result.name == "lint_config":
            for problem in data.get("problems", []):
                if cite := citation_from(problem.get("citation")):
                    answer.cite(cite)
        elif result.name in ("gpu_status", "list_checkpoints"):
            for item in data.get("findings", []) or []:
                answer.findings.append(item)
    return answer


def _ground_diagnosis(answer: Answer, data: dict[str, Any]) -> None:
    root = root_finding(data)
    findings = data.get("findings") or []
    if root is None:
        answer.findings.extend(findings)
        return
    answer.findings.extend([root] + [f for f in findings if f is not root])  # root first
    if not answer.root_cause:
        answer.category = root.get("category", "") or answer.category
        answer.root_cause = root.get("summary", "")
        if root.get("file") and root.get("line"):
            answer.evidence.append(f"{root['file']}:{root['line']}")
        if root.get("card"):
            answer.cards.insert(0, root["card"])
    for text in root.get("citations", []):
        if cite := citation_from(text):
            answer.cite(cite)
    known = {(f.key, str(f)) for f in answer.fixes}
    for detail in root.get("fix_details", []):
        fix = _fix_from(detail)
        if str(fix) and (fix.key, str(fix)) not in known:
            answer.fixes.append(fix)
            known.add((fix.key, str(fix)))
            if fix.citation:
                answer.cite(fix.citation)


def _ground_fix(answer: Answer, data: dict[str, Any]) -> None:
    answer.config_diff = data.get("diff", "") or answer.config_diff
    # config changes are exact edits: they go before the generic advice from the log
    # (a generic fix for the same key, e.g. from the log's card, gives way to the exact edit)
    changes = [_fix_from(c) for c in data.get("changes", [])]
    keys = {c.key for c in changes if c.key}
    answer.fixes[:] = changes + [f for f in answer.fixes if f.key not in keys]
    for fix in changes:
        if fix.citation:
            answer.cite(fix.citation)


def grounded_text(answer: Any) -> str:
    """What the tools established, as plain text: printed after a model's prose.

    The model's text is its own; this block is not: root cause with its evidence lines,
    the fixes (exact keys, old -> new), the config diff and numbered sources, all from
    tool results and citations. Empty when the tools established nothing.
    """
    lines: list[str] = []
    if answer.root_cause:
        lines.append(f"Root cause (from the tools): {answer.root_cause}")
        if answer.category:
            lines.append(f"  category: {answer.category}")
        for where in answer.evidence[:5]:
            lines.append(f"  evidence: {where}")
    if answer.fixes:
        lines.append("Fixes (from the tools):")
        lines += [f"  {i}. {fix}" for i, fix in enumerate(answer.fixes[:8], 1)]
    if answer.config_diff:
        lines += ["Corrected config (diff):", answer.config_diff.rstrip()]
    if answer.citations:
        lines.append("Sources:")
        lines += [f"  [{i}] {c}" + (f" <{c.url}>" if getattr(c, "url", "") else "") for i, c in enumerate(answer.citations, 1)]
    if not lines:
        return ""
    return "\n".join(["", "-" * 24, *lines])
