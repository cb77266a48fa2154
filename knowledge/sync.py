"""Sync upstream issue trackers: which requests, in which order, and what is kept.

Per repository: the closed issues (newest update first, ``Link``-paginated), the
releases (to name the release a fix landed in), and for each issue its timeline
(comments, merged pull requests that reference it, the closing commit). Every request
is conditional on the ETag of the last answer; an issue whose ``updated_at`` did not
change reuses its cached timeline without any request, so a re-sync of an unchanged
repo costs one ``304`` per list page. Records are shaped and filtered by
:mod:`rlmedic.knowledge.threads`, then either indexed or written to an export file.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError
from rlmedic.knowledge import threads
from rlmedic.knowledge.github import GitHubClient

DEFAULT_REPOS = ("inclusionAI/AReaL", "THUDM/slime", "sgl-project/sglang", "volcengine/verl")
PER_PAGE = 100
MAX_RELEASE_PAGES = 5
MAX_TIMELINE_PAGES = 10
#: Export files are read line by line; a single line over this is refused.
MAX_EXPORT_LINE = 4 * 1024 * 1024
NO_FIX = "closed without a fix (not planned, no maintainer reply, no merged PR)"
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")

#: progress(done, total, current name)
Progress = Callable[[int, int, str], None]


@dataclass
class SyncReport:
    repos: list[str] = field(default_factory=list)
    listed: int = 0  # closed issues read (pull requests excluded)
    pull_requests: int = 0  # items of the issue list that are pull requests: not threads
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> count
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    embedded: int = 0
    exported: int = 0
    http: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["skipped"] = dict(self.skipped)
        return data


def parse_repo(text: str) -> str:
    text = text.strip().removeprefix("https://github.com/").strip("/")
    if not _REPO.match(text) or text.endswith(".git"):
        raise UserError(f"{text!r}: expected OWNER/REPO, e.g. inclusionAI/AReaL")
    return text


def parse_since(text: str | None) -> str | None:
    """``2025-01-31`` or an ISO timestamp -> GitHub's ``since`` (ISO 8601, UTC)."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UserError(f"--since {text!r}: expected a date like 2025-01-31") from exc
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _releases(client: GitHubClient, repo: str) -> list[dict[str, Any]]:
    url = client.url(f"repos/{repo}/releases", {"per_page": PER_PAGE})
    out: list[dict[str, Any]] = []
    for body, _cached in client.paginate(url, threads.slim_releases, max_pages=MAX_RELEASE_PAGES):
        out += body
    return out


def _timeline(client: GitHubClient, repo: str, issue: dict[str, Any]) -> list[dict[str, Any]]:
    url = client.url(f"repos/{repo}/issues/{issue['number']}/timeline", {"per_page": PER_PAGE})
    stamp = issue.get("updated_at", "")
    events: list[dict[str, Any]] = []
    next_url: str | None = url
    pages = 0
    seen: set[str] = set()
    while next_url and pages < MAX_TIMELINE_PAGES and next_url not in seen:  # a link back to a read page ends it
        seen.add(next_url)
        cached = client.fresh(next_url, stamp)
        if cached is not None:  # the issue did not change since this page was read
            body, next_url = cached
        else:
            body, next_url, _ = client.get(next_url, threads.slim_timeline, stamp=stamp)
        events += body
        pages += 1
    return events


def fetch_threads(
    client: GitHubClient,
    repo: str,
    report: SyncReport,
    *,
    since: str | None = None,
    max_issues: int | None = None,
    progress: Progress | None = None,
) -> Iterator[dict[str, Any]]:
    """Thread records of ``repo`` that teach something; the rest are counted in ``report``."""
    params: dict[str, Any] = {"state": "closed", "sort": "updated", "direction": "desc", "per_page": PER_PAGE}
    if since:
        params["since"] = since
    issues: list[dict[str, Any]] = []
    for page, _cached in client.paginate(client.url(f"repos/{repo}/issues", params), threads.slim_issues):
        for item in page:
            if item["is_pr"]:
                report.pull_requests += 1
                continue
            issues.append(item)
        if progress:
            progress(0, 0, f"{repo}: {len(issues)} closed issues listed")
        if max_issues is not None and len(issues) >= max_issues:
            issues = issues[:max_issues]
            break
    report.listed += len(issues)
    releases = _releases(client, repo)
    for n, issue in enumerate(issues):
        if progress:
            progress(n, len(issues), f"{repo}#{issue['number']}")
        record = threads.shape_thread(repo, issue, _timeline(client, repo, issue), releases)
        why = threads.teaches(record)
        if not why:
            report.skipped[NO_FIX] += 1
            continue
        report.kept += 1
        yield record
    if progress and issues:
        progress(len(issues), len(issues), repo)


def write_export(records: Sequence[dict[str, Any]], path: str | Path) -> None:
    """One JSON record per line (see the README for the format); a new file only."""
    from rlmedic.confine import write_new_text

    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
    write_new_text(path, text, force_option="")


def read_export(path: str | Path) -> list[dict[str, Any]]:
    """Records from an export file, validated and redacted again (it may come from anywhere)."""
    from rlmedic.confine import Confinement

    confinement = Confinement.for_paths([path])
    records: list[dict[str, Any]] = []
    with confinement.open_binary(path) as handle:
        for n, raw in enumerate(handle, 1):
            if len(raw) > MAX_EXPORT_LINE:
                raise UserError(f"{path}:{n}: line longer than {MAX_EXPORT_LINE >> 20} MB")
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as exc:
                raise UserError(f"{path}:{n}: not valid JSON ({exc.msg})") from exc
            records.append(threads.validate(record, f"{path}:{n}"))
    if not records:
        raise UserError(f"{path}: no issue threads in this file")
    return records
