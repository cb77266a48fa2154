"""Upstream fixes for a failure: the diagnosis's traceback against the synced commit history.

The git-history path generalises the hand-written known-issue records: where no record
names the bug, the commits that changed the failing function after the user's release
often do. This module turns what a tool established (a diagnosis's root exception and its
frames, or a pasted traceback) into a :class:`~rlmedic.knowledge.history.FailureQuery`, reads
the user's versions from what it has (log banners, image tags, traceback paths), and asks
the index ``rlmedic sync-code`` built. No index, no traceback: nothing, silently.
"""

from __future__ import annotations

import re
from typing import Any

from rlmedic.types import UpstreamFix

#: Matches kept per failure (the answer re-judges them against the versions every piece of evidence gives).
KEEP = 8
_VERSION_IN_PATH = re.compile(r"/(verl|slime|areal|sglang|vllm|megatron[-_]core|transformers|torch)-(\d+\.\d+(?:\.\d+)*(?:\.post\d+|rc\d+)?)"
                              r"(?:\.dist-info|-py\d|/|$)")


def versions_in_paths(paths: list[str]) -> dict[str, str]:
    """Versions a traceback's file paths name (``.../verl-0.7.0-py3.10.egg/verl/...``, ``sglang-0.4.6/``)."""
    from rlmedic.versions import canonical

    out: dict[str, str] = {}
    for path in paths:
        for m in _VERSION_IN_PATH.finditer(path):
            out.setdefault(canonical(m.group(1)), m.group(2))
    return out


def root_exception(findings: list[Any]) -> dict[str, Any] | None:
    """The evidence dict of the first finding (root first) that carries a traceback."""
    for f in findings:
        ev = getattr(f, "evidence", None) or {}
        if ev.get("exception") and (ev.get("frames") or ev.get("deepest_frame")):
            return ev
    return None


def for_diagnosis(d: Any, index_dir: Any = None, versions: dict[str, str] | None = None) -> tuple[list[UpstreamFix], dict[str, str]]:
    """(fixes, versions read) for a diagnosis whose root (or first) error has a traceback; ([], {}) otherwise."""
    from rlmedic.settings import history_path

    root = d.root_finding
    findings = ([root] if root is not None else []) + [f for f in d.findings if f is not root]
    ev = root_exception(findings)
    if ev is None or not history_path(index_dir).is_file():
        return [], {}  # nothing synced (rlmedic sync-code): the history module is not even imported
    from rlmedic.knowledge.history import History, match, query_from_finding
    from rlmedic.versions import read_versions

    history = History.open_existing(index_dir)
    if history is None:
        return [], {}
    query = query_from_finding(ev)
    heads = "\n".join(getattr(f, "head", "") or "" for f in getattr(d, "files", []) or [])
    found = {**versions_in_paths([p for p, _l, _f in query.frames] if query else []),
             **read_versions(heads, str(ev.get("excerpt") or ""), str(ev.get("line_text") or "")),
             **(versions or {})}
    try:
        return (match(history, query, versions=found, k=KEEP) if query else []), found
    finally:
        history.close()


def for_traceback(text: str, index_dir: Any = None, versions: dict[str, str] | None = None,
                  repos: list[str] | None = None) -> tuple[list[UpstreamFix], dict[str, str], Any]:
    """(fixes, versions, query) for a traceback pasted as text: its last exception and the frames above it."""
    from rlmedic.knowledge.history import FailureQuery, History, match
    from rlmedic.tools.logs.tracebacks import read_traceback
    from rlmedic.versions import read_versions

    lines = text.splitlines()
    tb = None
    for i in range(len(lines) - 1, -1, -1):
        if re.search(r"(?:Error|Exception)\b(?::|\s*$)", lines[i]) and not lines[i].lstrip().startswith("File "):
            tb = read_traceback(lines[i], lines[:i])
            if tb is not None:
                break
    if tb is None:
        return [], {}, None
    query = FailureQuery(exception=tb.exc_type, message=tb.text, frames=[(f.path, f.line, f.func) for f in tb.frames])
    found = {**versions_in_paths([f.path for f in tb.frames]), **read_versions(text), **(versions or {})}
    history = History.open_existing(index_dir)
    if history is None:
        return [], found, query
    try:
        return match(history, query, versions=found, repos=repos, k=KEEP), found, query
    finally:
        history.close()


# ---------------------------------------------------------------------------- the words


def when(f: UpstreamFix) -> str:
    """``merged 2026-01-02, in v0.8.0`` or ``..., not released yet``."""
    merged = f"merged {f.date}" if f.date else "merged"
    return f"{merged}, in {f.release}" if f.release else f"{merged}, not released yet"


def what_to_do(f: UpstreamFix) -> str:
    """Upgrade to the release that holds the fix, or (unreleased) install from main or apply the change."""
    name = f.package or f.repo.rsplit("/", 1)[-1]
    if f.release:
        return f"upgrade {name} to {f.release.lstrip('vV')} or later, or apply that change to your copy"
    return (f"no release holds it yet: install {name} from its main branch at or after {f.commit[:10]}, "
            f"or apply that change to your copy (git cherry-pick {f.commit[:10]})")


def headline(f: UpstreamFix) -> str:
    """The lead sentence's start: "Fixed upstream after your verl 0.7.0" or "Likely fixed upstream"."""
    return f"Fixed upstream after your {f.package} {f.yours}" if f.status == "after_yours" else "Likely fixed upstream"


def alert_line(items: list[Any]) -> str:
    """One line for a ``watch`` alert: the best strong match not already in the user's release ("" if none)."""
    for item in items or ():
        try:
            f = item if isinstance(item, UpstreamFix) else UpstreamFix.from_dict(item)
        except (TypeError, ValueError):
            continue
        if f.strong and f.status != "in_yours":
            return f"{headline(f)}: {f.ref} '{f.subject}' ({when(f)}) <{f.url}>: {what_to_do(f)}."
    return ""
