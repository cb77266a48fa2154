"""Issue threads as knowledge: shape GitHub's JSON into a thread record, decide if it teaches.

A thread record is what we store, export and index (one JSON object per line in an
export file; the format is documented in the README, "Upstream issue threads"):

    format, repo, number, url, title, state_reason, labels, created_at, updated_at,
    closed_at, problem, error_lines, resolution[{association, created_at, body}],
    workaround, fix_prs[{repo, number, url, title, merged_at}], fix_commit,
    fixed_in, fixed_in_basis

Only threads that teach something are kept: closed as completed, or answered by a
maintainer (author association OWNER/MEMBER/COLLABORATOR), or linked to a merged pull
request. Logs in posts are trimmed to their error lines, because the error line is what
the next person will paste. No user names are kept: a reply is known by its author's
association only. Secrets are redacted before a record leaves this module.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from rlmedic.confine import redact_value

FORMAT = "rlmedic-issue-thread/1"
MAINTAINERS = ("OWNER", "MEMBER", "COLLABORATOR")
#: Characters kept of an opening post's prose, of a reply, and of a workaround.
PROBLEM_CHARS = 1500
REPLY_CHARS = 700
MAX_REPLIES = 3
MAX_ERROR_LINES = 8
ERROR_LINE_CHARS = 300
#: A thread error line and a query error line match when one contains the other and the
#: shorter is at least this long (normalised), so "error: #" matches nothing.
MIN_MATCH_CHARS = 24

_ERROR_HINT = re.compile(
    r"\b(?:[A-Z]\w*)?(?:Error|Exception)\b|\berror:|\bERROR\b|\bFAILED\b|\bFatal\b|CUDA error|NCCL (?:error|WARN)"
    r"|out of memory|\bKilled\b|Segmentation fault|core dumped|\bAssertionError\b|\bassert(?:ion)? failed|\bpanicked\b"
    r"|\bTimeout\b|timed out|No module named|cannot import name",
)
_TRACEBACK_HEAD = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")
# log prefixes before the message: [timestamps], (pid=..), "INFO 01-02 12:00:00", "host | "
_PREFIX = re.compile(
    r"^(?:\s*(?:\[[^\]]{0,80}\]|\([^)]{0,80}\)|\d{4}-\d\d-\d\d[ T][\d:.,]+Z?|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b"
    r"|\d\d-\d\d [\d:.]+|[\w.-]+\s\|)\s*:?)+\s*"
)
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")
_FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)
_THANKS = re.compile(r"(?i)\b(?:works?(?:ed)? (?:now|for me|fine)|that (?:worked|fixed it|solved it)|solved|resolved|fixed it|thank)")
_VERSION_CLAIM = re.compile(
    r"(?i)\b(?:fixed|released|available|landed|included|shipped|resolved)\s+(?:in|with|since|by)\s+(?:release\s+|version\s+)?"
    r"(v?\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+|\.dev\d+)?)\b"
)
_REF = re.compile(r"(?:#|/pull/|/issues/)(\d+)\b")


# -- error lines ------------------------------------------------------------------------
def error_lines(text: str, limit: int = MAX_ERROR_LINES) -> list[str]:
    """The lines of ``text`` that carry an error message, deduplicated, in order."""
    out: list[str] = []
    seen: set[str] = set()
    for raw in text.splitlines():
        line = raw.strip().strip("`").strip()
        if not line or _TRACEBACK_HEAD.match(line) or not _ERROR_HINT.search(line):
            continue
        key = normalize_error(line)
        if len(key) < 8 or key in seen:
            continue
        seen.add(key)
        out.append(line[:ERROR_LINE_CHARS])
        if len(out) >= limit:
            break
    return out


def normalize_error(line: str) -> str:
    """Comparable form of an error line: log prefixes dropped, numbers and case folded."""
    line = _PREFIX.sub("", line.strip())
    line = _NUMBERS.sub("#", line.lower())
    return " ".join(line.split())


def error_keys(text_or_lines: str | Iterable[str]) -> list[str]:
    lines = error_lines(text_or_lines) if isinstance(text_or_lines, str) else list(text_or_lines)
    return [k for k in (normalize_error(line) for line in lines) if len(k) >= 12]


def keys_match(query_key: str, thread_key: str) -> bool:
    if query_key == thread_key:
        return True
    short, long = sorted((query_key, thread_key), key=len)
    return len(short) >= MIN_MATCH_CHARS and short in long


# -- trimming posts -----------------------------------------------------------------------
def trim_post(body: str, limit: int) -> str:
    """Prose kept, fenced code/log blocks reduced to their error lines, cut at ``limit``."""

    def block(m: re.Match[str]) -> str:
        lines = error_lines(m.group(1), limit=4)
        return ("\n".join(lines) + "\n") if lines else "[code]\n"

    text = _FENCE.sub(block, body or "")
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)  # issue-template comments
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# -- slimming GitHub's JSON (what the ETag cache keeps: redacted, like everything on disk) ---
# A server (or a proxy in front of it) may answer anything: every field is read through
# these helpers, so a wrong type becomes an empty value or a skipped item, never a traceback.
def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _n(value: Any) -> int | None:
    """A positive issue/PR number (bool is no number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 53 else None


def _items(body: Any, what: str) -> list[dict[str, Any]]:
    """The dict items of a list page; a page that is not a list is a one-line error."""
    if not isinstance(body, list):
        from rlmedic.errors import UserError

        raise UserError(f"GitHub answered a {type(body).__name__} where a list of {what} was expected")
    return [item for item in body if isinstance(item, dict)]


def slim_issues(body: Any) -> list[dict[str, Any]]:
    out = []
    for item in _items(body, "issues"):
        number = _n(item.get("number"))
        if number is None:
            continue
        labels = item.get("labels") if isinstance(item.get("labels"), list) else []
        comments = item.get("comments")
        out.append(
            {
                "number": number,
                "title": _s(item.get("title")),
                "body": _s(item.get("body")),
                "html_url": _s(item.get("html_url")),
                "state_reason": _s(item.get("state_reason")),
                "labels": [_s(lb.get("name")) if isinstance(lb, dict) else _s(lb) for lb in labels],
                "created_at": _s(item.get("created_at")),
                "updated_at": _s(item.get("updated_at")),
                "closed_at": _s(item.get("closed_at")),
                "author": _s(_d(item.get("user")).get("login")),
                "association": _s(item.get("author_association")),
                "is_pr": isinstance(item.get("pull_request"), dict),
                "comments": comments if isinstance(comments, int) and not isinstance(comments, bool) else 0,
            }
        )
    return redact_value(out)


def slim_timeline(body: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ev in _items(body, "timeline events"):
        kind = ev.get("event")
        if kind == "commented":
            out.append(
                {
                    "event": kind,
                    "author": _s(_d(ev.get("user") or ev.get("actor")).get("login")),
                    "association": _s(ev.get("author_association")),
                    "created_at": _s(ev.get("created_at")),
                    "body": _s(ev.get("body")),
                }
            )
        elif kind == "cross-referenced":
            issue = _d(_d(ev.get("source")).get("issue"))
            pr = _d(issue.get("pull_request"))
            number = _n(issue.get("number"))
            if _s(pr.get("merged_at")) and number is not None:
                out.append(
                    {
                        "event": kind,
                        "repo": _s(_d(issue.get("repository")).get("full_name")),
                        "number": number,
                        "url": _s(pr.get("html_url")) or _s(issue.get("html_url")),
                        "title": _s(issue.get("title")),
                        "merged_at": _s(pr.get("merged_at")),
                    }
                )
        elif kind == "closed" and _s(ev.get("commit_id")):
            out.append({"event": kind, "commit_id": _s(ev.get("commit_id")), "created_at": _s(ev.get("created_at"))})
    return redact_value(out)


def slim_releases(body: Any) -> list[dict[str, Any]]:
    out = []
    for rel in _items(body, "releases"):
        if rel.get("draft"):
            continue
        out.append(
            {
                "tag": _s(rel.get("tag_name")),
                "published_at": _s(rel.get("published_at")),
                "prerelease": bool(rel.get("prerelease")),
                "refs": sorted({int(n) for n in _REF.findall(_s(rel.get("body"))) if len(n) < 16}),
            }
        )
    return out


# -- shaping --------------------------------------------------------------------------------
def _release_for(releases: list[dict[str, Any]], pr_number: int | None, after: str) -> tuple[str, str]:
    """(tag, basis): the release whose notes name the PR, else the first one after ``after``."""
    ordered = sorted((r for r in releases if r["published_at"]), key=lambda r: r["published_at"])
    if pr_number is not None:
        for rel in ordered:
            if pr_number in rel["refs"] and (not after or rel["published_at"] >= after):
                return rel["tag"], "release notes"
    if after:
        for rel in ordered:
            if rel["published_at"] >= after and not rel["prerelease"]:
                return rel["tag"], "first release after the fix"
    return "", ""


def shape_thread(repo: str, issue: dict[str, Any], timeline: list[dict[str, Any]], releases: list[dict[str, Any]]) -> dict[str, Any]:
    """A redacted thread record from a slimmed issue, its slimmed timeline and the repo's releases."""
    comments = [ev for ev in timeline if ev["event"] == "commented"]
    author = issue.get("author", "")
    resolution = [
        {"association": c["association"], "created_at": c["created_at"], "body": trim_post(c["body"], REPLY_CHARS)}
        for c in comments
        if c["association"] in MAINTAINERS and c["author"] != author
    ][-MAX_REPLIES:]
    workaround = ""
    for i, c in enumerate(comments):
        if c["author"] == author or not c["body"].strip():
            continue
        if any(later["author"] == author and _THANKS.search(later["body"]) for later in comments[i + 1 :]):
            workaround = trim_post(c["body"], REPLY_CHARS)  # the last reply the reporter confirmed
    fix_prs = [
        {"repo": ev["repo"] or repo, "number": ev["number"], "url": ev["url"], "title": ev["title"], "merged_at": ev["merged_at"]}
        for ev in timeline
        if ev["event"] == "cross-referenced" and (ev["repo"] or repo).lower() == repo.lower()
    ]
    fix_commit = next((ev["commit_id"] for ev in reversed(timeline) if ev["event"] == "closed"), "")
    fixed_in, basis = "", ""
    if fix_prs:
        last = max(fix_prs, key=lambda p: p["merged_at"])
        fixed_in, basis = _release_for(releases, last["number"], last["merged_at"])
    if not fixed_in:
        for c in reversed(comments):
            m = _VERSION_CLAIM.search(c["body"]) if c["association"] in MAINTAINERS else None
            if m:
                fixed_in, basis = m.group(1), "maintainer reply"
                break
    if not fixed_in and fix_commit and issue.get("closed_at"):
        fixed_in, basis = _release_for(releases, None, issue["closed_at"])
    body = issue.get("body", "")
    record = {
        "format": FORMAT,
        "repo": repo,
        "number": int(issue["number"]),
        "url": issue.get("html_url", ""),
        "title": issue.get("title", ""),
        "state_reason": issue.get("state_reason", ""),
        "labels": list(issue.get("labels", [])),
        "created_at": issue.get("created_at", ""),
        "updated_at": issue.get("updated_at", ""),
        "closed_at": issue.get("closed_at", ""),
        "problem": trim_post(body, PROBLEM_CHARS),
        "error_lines": error_lines(body),
        "resolution": resolution,
        "workaround": workaround,
        "fix_prs": fix_prs,
        "fix_commit": fix_commit,
        "fixed_in": fixed_in,
        "fixed_in_basis": basis,
    }
    return redact_value(record)


def teaches(record: dict[str, Any]) -> str:
    """Why the thread is worth keeping ("" when it is not)."""
    if record.get("fix_prs"):
        return "merged pull request"
    if any(r.get("association") in MAINTAINERS for r in record.get("resolution", [])):
        return "maintainer reply"
    if record.get("state_reason") == "completed":
        return "closed as completed"
    return ""


# -- the record as stored -------------------------------------------------------------------
def source(record: dict[str, Any]) -> str:
    return f"{record['repo']}#{record['number']}"


def key(record: dict[str, Any]) -> str:
    """Manifest key of a thread."""
    return f"issue:{source(record)}"


def chunk_id(record: dict[str, Any]) -> str:
    return "issue-" + re.sub(r"[^a-z0-9]+", "-", record["repo"].lower()) + f"-{record['number']}"


def record_hash(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def fix_summary(record: dict[str, Any]) -> str:
    """"fixed by owner/repo#1250 (merged 2025-03-02) in v0.4.1" or "" when unknown."""
    parts = []
    if record.get("fix_prs"):
        pr = max(record["fix_prs"], key=lambda p: p["merged_at"])
        parts.append(f"fixed by {pr['repo']}#{pr['number']} (merged {pr['merged_at'][:10]})")
    elif record.get("fix_commit"):
        parts.append(f"fixed by commit {record['fix_commit'][:10]}")
    if record.get("fixed_in"):
        parts.append(f"in {record['fixed_in']}" if parts else f"fixed in {record['fixed_in']}")
    return " ".join(parts)


def resolution_summary(record: dict[str, Any], limit: int = 240) -> str:
    """The maintainers' last word (or the accepted workaround), one paragraph."""
    text = record["resolution"][-1]["body"] if record.get("resolution") else record.get("workaround", "")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def to_text(record: dict[str, Any]) -> str:
    """The thread as indexed for BM25 and shown as a search result."""
    lines = [f"{source(record)}: {record['title']}"]
    meta = []
    if record.get("labels"):
        meta.append("labels: " + ", ".join(record["labels"]))
    if record.get("closed_at"):
        meta.append(f"closed {record['closed_at'][:10]}" + (f" ({record['state_reason']})" if record.get("state_reason") else ""))
    if meta:
        lines.append("; ".join(meta))
    if record.get("problem"):
        lines += ["Problem:", record["problem"]]
    if record.get("error_lines"):
        lines += ["Error lines:"] + [f"  {e}" for e in record["error_lines"]]
    if record.get("resolution"):
        lines.append("Resolution:")
        lines += [f"  [{r['association'].lower()} {r['created_at'][:10]}] {r['body']}" for r in record["resolution"]]
    if record.get("workaround"):
        lines += ["Workaround the reporter confirmed:", record["workaround"]]
    fix = fix_summary(record)
    if fix:
        lines.append(f"Fix: {fix}" + (f" ({record['fixed_in_basis']})" if record.get("fixed_in_basis") else ""))
    lines.append(f"URL: {record['url']}")
    return "\n".join(lines)


def embed_text(record: dict[str, Any], limit: int = 256) -> str:
    """What the dense side sees: the title, the first error lines, the start of the problem.

    Short on purpose: a thread is recognised by its title and error line, and ~60 word
    pieces embed about 1.7x faster than the model's 128-token maximum, which is what
    makes 10,000 threads fit in minutes on 2 cores. BM25 still indexes the whole thread.
    """
    text = "\n".join([record["title"], *record.get("error_lines", [])[:2], record.get("problem", "")])
    return text[:limit]


def validate(record: Any, where: str) -> dict[str, Any]:
    """A record read from an export file, checked for the fields indexing needs."""
    from rlmedic.errors import UserError

    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise UserError(f"{where}: not an rlmedic issue-thread record (format {FORMAT!r} expected)")
    for name, typ in (("repo", str), ("number", int), ("title", str), ("url", str)):
        if not isinstance(record.get(name), typ):
            raise UserError(f"{where}: field {name!r} missing or not a {typ.__name__}")
    defaults = {"labels": [], "error_lines": [], "resolution": [], "fix_prs": [], "problem": "", "workaround": ""}
    for name, value in defaults.items():
        record.setdefault(name, value)
    for name in ("state_reason", "created_at", "updated_at", "closed_at", "fix_commit", "fixed_in", "fixed_in_basis"):
        record.setdefault(name, "")
    return redact_value(record)


def age_days(record: dict[str, Any], now: datetime | None = None) -> int | None:
    stamp = record.get("closed_at") or record.get("updated_at")
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ((now or datetime.now(timezone.utc)) - when).days
