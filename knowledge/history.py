"""A framework's public git history as an index of fixes: which commit changed which function.

Most failures users hit in verl, slime, AReaL, SGLang or vLLM were fixed upstream in a merged
PR. A maintainer triages by looking at the function the traceback died in and at the commits
that changed it after the user's release; this module does the same with no hand-written
record. ``rlmedic sync-code`` fills it from a local clone (bare or not) or from the GitHub REST
API; :func:`match` ranks the commits against a failure's evidence.

Each commit row keeps its subject and body, PR number (``(#N)`` or a merge message), date,
the files it touched, the functions and classes its diff touched (hunk headers, with git's
Python function-name rules, and changed ``def``/``class`` lines) and the first release tag
that contains it. A re-sync reads only commits after the recorded head, and tags it has not
seen. Everything lives in one SQLite file (``history.sqlite``) in the index folder.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError
from rlmedic.settings import history_path
from rlmedic.types import UpstreamFix
from rlmedic.versions import canonical, compare, parse

SCHEMA = 1
#: A commit touching more than this many files (a vendored import, a mass rename) keeps only this many,
#: and its symbols are capped too: such a commit is a poor fix candidate anyway.
MAX_FILES = 200
MAX_SYMBOLS = 300
#: Characters of a commit body kept (what a matcher reads; the rest is changelog noise).
MAX_BODY = 4000
#: git's own function-name rules for these suffixes (``diff=python`` etc.), given through a temporary
#: attributes file so a bare clone and a user's clone are read the same way.
_DRIVERS = {"*.py": "python", "*.pyi": "python", "*.cc": "cpp", "*.cpp": "cpp", "*.cu": "cpp", "*.cuh": "cpp",
            "*.h": "cpp", "*.hpp": "cpp", "*.c": "cpp", "*.rs": "rust", "*.go": "golang"}
_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@ ?(.*)$")
_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")
_CALLISH = re.compile(r"([A-Za-z_]\w*)\s*\(")
_PR_SUBJECT = re.compile(r"\(#(\d+)\)\s*$")
_PR_MERGE = re.compile(r"^Merge pull request #(\d+)\b")
_PR_ANY = re.compile(r"(?:^|\s)\(?#(\d{2,6})\)?(?:\s|$)")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{2,}")
_SPLIT = re.compile(r"[_\W]+|(?<=[a-z])(?=[A-Z])")
#: A subject that says it repairs something.
FIX_WORDS = re.compile(r"(?i)\b(?:fix(?:es|ed|ing)?|bug(?:fix)?|hotfix|patch|resolve[sd]?|crash(?:es)?|avoid|prevent|"
                       r"handle|correct(?:ly)?|repair|workaround|revert|broken|wrong|incorrect|missing|error|fail(?:s|ing|ure)?)\b")
_STOP = frozenset("the and for with was not are but this that from has have had into its when while can cannot you your "
                  "than then got get set use used using only more most less all any some one two none self true false "
                  "error errors exception failed fails failure file line lines object type value got expected must "
                  "should would could does did been being which where there their they them what".split())


def package_of(repo: str) -> str:
    """The package a repository ships, in :mod:`rlmedic.versions` terms (``NVIDIA/Megatron-LM`` -> megatron-core)."""
    name = repo.rsplit("/", 1)[-1]
    name = re.sub(r"\.git$", "", name)
    return canonical(name)


# ---------------------------------------------------------------------------- the store


class History:
    """The commit index: one SQLite file, opened read-write by sync and read-only by matching."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.path = Path(path)
        if not create and not self.path.exists():
            raise UserError(f"no code history at {self.path}: run `rlmedic sync-code SOURCE` first")
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(self.path))
        else:
            self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        self.db.execute("PRAGMA journal_mode=WAL" if create else "PRAGMA query_only=1")
        if create:
            self._schema()

    @classmethod
    def open_existing(cls, index_dir: str | os.PathLike[str] | None = None) -> History | None:
        """The index when one was synced, else None (matching is then skipped, silently)."""
        path = history_path(index_dir)
        if not path.is_file():
            return None
        try:
            return cls(path, create=False)
        except (sqlite3.Error, UserError):
            return None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _schema(self) -> None:
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE IF NOT EXISTS repos (repo TEXT PRIMARY KEY, source TEXT, kind TEXT, head TEXT,
                tags TEXT DEFAULT '{}', synced_at REAL, commits INTEGER DEFAULT 0);
            CREATE TABLE IF NOT EXISTS commits (id INTEGER PRIMARY KEY, repo TEXT, sha TEXT, date INTEGER,
                subject TEXT, body TEXT, pr INTEGER, release TEXT, files TEXT, symbols TEXT, UNIQUE(repo, sha));
            CREATE TABLE IF NOT EXISTS touched (commit_id INTEGER, repo TEXT, path TEXT, base TEXT);
            CREATE INDEX IF NOT EXISTS touched_base ON touched(base, repo);
            CREATE TABLE IF NOT EXISTS symbols (commit_id INTEGER, repo TEXT, name TEXT, path TEXT);
            CREATE INDEX IF NOT EXISTS symbols_name ON symbols(name, repo);
            CREATE VIRTUAL TABLE IF NOT EXISTS commit_words USING fts5(subject, body, symbols, tokenize='unicode61');
        """)
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
        self.db.commit()

    # -- reading ------------------------------------------------------------------------
    def repos(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT repo, source, kind, head, tags, synced_at, commits FROM repos ORDER BY repo")
        return [{"repo": r[0], "source": r[1], "kind": r[2], "head": r[3], "tags": len(json.loads(r[4] or "{}")),
                 "synced_at": r[5], "commits": r[6], "package": package_of(r[0])} for r in rows]

    def repo_state(self, repo: str) -> tuple[str, dict[str, str]] | None:
        row = self.db.execute("SELECT head, tags FROM repos WHERE repo=?", (repo,)).fetchone()
        return (row[0] or "", json.loads(row[1] or "{}")) if row else None

    def known_shas(self, repo: str) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT sha FROM commits WHERE repo=?", (repo,))}

    def commit(self, repo: str, sha: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT sha, date, subject, body, pr, release, files, symbols FROM commits "
                              "WHERE repo=? AND sha LIKE ?", (repo, sha + "%")).fetchone()
        if not row:
            return None
        return {"sha": row[0], "date": _day(row[1]), "subject": row[2], "body": row[3], "pr": row[4],
                "release": row[5] or "", "files": row[6].split("\n") if row[6] else [],
                "symbols": row[7].split() if row[7] else []}

    # -- writing ------------------------------------------------------------------------
    def add(self, repo: str, commits: Iterable[Commit]) -> int:
        n = 0
        cur = self.db.cursor()
        for c in commits:
            cur.execute("INSERT OR IGNORE INTO commits (repo, sha, date, subject, body, pr, release, files, symbols) "
                        "VALUES (?,?,?,?,?,?,?,?,?)",
                        (repo, c.sha, c.date, c.subject, c.body[:MAX_BODY], c.pr, c.release or None,
                         "\n".join(c.files[:MAX_FILES]), " ".join(sorted(c.symbols)[:MAX_SYMBOLS])))
            if not cur.rowcount:
                continue
            cid = cur.lastrowid
            n += 1
            cur.executemany("INSERT INTO touched VALUES (?,?,?,?)",
                            [(cid, repo, p, p.rsplit("/", 1)[-1]) for p in c.files[:MAX_FILES]])
            cur.executemany("INSERT INTO symbols VALUES (?,?,?,?)",
                            [(cid, repo, name, path) for name, path in sorted(c.symbol_paths)[:MAX_SYMBOLS]])
            cur.execute("INSERT INTO commit_words (rowid, subject, body, symbols) VALUES (?,?,?,?)",
                        (cid, c.subject, c.body[:MAX_BODY], " ".join(sorted(c.symbols)[:MAX_SYMBOLS])))
        return n

    def set_releases(self, repo: str, release_of: dict[str, str]) -> int:
        """Record each commit's first release; an earlier (lower) release already recorded wins."""
        changed = 0
        rows = self.db.execute("SELECT sha, release FROM commits WHERE repo=?", (repo,)).fetchall()
        cur = self.db.cursor()
        for sha, old in rows:
            new = release_of.get(sha)
            if not new or new == old:
                continue
            if old and (compare(old, new) or 0) <= 0:
                continue
            cur.execute("UPDATE commits SET release=? WHERE repo=? AND sha=?", (new, repo, sha))
            changed += 1
        return changed

    def save_repo(self, repo: str, source: str, kind: str, head: str, tags: dict[str, str]) -> None:
        count = self.db.execute("SELECT count(*) FROM commits WHERE repo=?", (repo,)).fetchone()[0]
        self.db.execute("INSERT OR REPLACE INTO repos VALUES (?,?,?,?,?,?,?)",
                        (repo, source, kind, head, json.dumps(tags, sort_keys=True), time.time(), count))
        self.db.commit()


@dataclass
class Commit:
    sha: str
    date: int  # unix seconds
    subject: str
    body: str = ""
    pr: int | None = None
    files: list[str] = field(default_factory=list)
    symbol_paths: set[tuple[str, str]] = field(default_factory=set)  # (function or class, file)
    release: str = ""

    @property
    def symbols(self) -> set[str]:
        return {name for name, _ in self.symbol_paths}


@dataclass
class SyncReport:
    repo: str
    source: str
    kind: str
    new_commits: int = 0
    total_commits: int = 0
    tags: int = 0
    new_tags: int = 0
    releases_set: int = 0
    head: str = ""
    seconds: float = 0.0
    http: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["seconds"] = round(self.seconds, 3)
        return data


def pr_number(subject: str, body: str = "") -> int | None:
    """The PR a commit came from: ``subject (#123)`` (squash merge) or ``Merge pull request #123``."""
    m = _PR_SUBJECT.search(subject) or _PR_MERGE.match(subject)
    if m:
        return int(m.group(1))
    return None


def _day(ts: int | None) -> str:
    if not ts:
        return ""
    return datetime.fromtimestamp(int(ts), tz=timezone.utc).strftime("%Y-%m-%d")


def symbol_of(header: str) -> str:
    """The function or class a hunk header names: ``def update_policy(self, data):`` -> update_policy;
    a C/C++ header's last ``name(`` -> name; "" when it names neither."""
    m = _DEF.match(header)
    if m:
        return m.group(1)
    calls = _CALLISH.findall(header)
    return calls[-1] if calls and calls[-1] not in ("if", "for", "while", "switch", "return") else ""


# ---------------------------------------------------------------------------- git clones


def _git(path: Path, *args: str, attrs: str | None = None) -> list[str]:
    """Run a read-only git command in ``path``; stdout lines, or a UserError with git's own words."""
    cmd = ["git", "-C", str(path)]
    if attrs:
        cmd += ["-c", f"core.attributesFile={attrs}"]
    try:
        out = subprocess.run([*cmd, *args], capture_output=True, check=False, timeout=600,
                             env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    except FileNotFoundError as exc:
        raise UserError("git is not installed: sync-code reads clones with git") from exc
    if out.returncode != 0:
        raise UserError(f"git {args[0]} in {path}: {out.stderr.decode(errors='replace').strip()[:300]}")
    return out.stdout.decode("utf-8", errors="replace").splitlines()


def repo_name(path: Path) -> str:
    """OWNER/REPO of a clone from its ``origin`` URL (github.com or any host), else its folder name."""
    try:
        url = _git(path, "config", "--get", "remote.origin.url")
    except UserError:
        url = []
    if url:
        m = re.search(r"[:/]([^/:]+)/([^/]+?)(?:\.git)?/?$", url[0].strip())
        if m:
            return f"{m.group(1)}/{m.group(2)}"
    name = path.resolve().name
    if name in (".git", "repo") or name.endswith(".git"):
        name = name[:-4] if name.endswith(".git") and name != ".git" else path.resolve().parent.name
    return name.replace("+", "/", 1)


def check_clone(path: Path) -> None:
    if not path.exists():
        raise UserError(f"{path}: no such folder (give a git clone or OWNER/REPO)")
    try:
        inside = _git(path, "rev-parse", "--is-inside-work-tree", "--is-bare-repository")
    except UserError as exc:
        raise UserError(f"{path}: not a git clone ({exc})") from None
    if "true" not in inside:
        raise UserError(f"{path}: not a git clone")


def release_tags(path: Path) -> dict[str, str]:
    """{tag: commit sha} of the tags that name a release (``v0.4.6``, ``0.5.0rc1``), annotated ones peeled."""
    out: dict[str, str] = {}
    for line in _git(path, "for-each-ref", "refs/tags", "--format=%(refname:short) %(objectname) %(*objectname)"):
        parts = line.split()
        if len(parts) < 2 or parse(parts[0]) is None:
            continue
        out[parts[0]] = parts[2] if len(parts) > 2 and parts[2] else parts[1]
    return out


def _version_order(tags: Iterable[str]) -> list[str]:
    from functools import cmp_to_key

    return sorted(tags, key=cmp_to_key(lambda a, b: compare(a, b) or (a > b) - (a < b)))


def first_releases(path: Path, tags: dict[str, str], only: Iterable[str] | None = None) -> dict[str, str]:
    """{commit sha: first release tag containing it}: each tag's commits minus those of every lower tag."""
    ordered = _version_order(tags)
    wanted = set(ordered if only is None else only)
    out: dict[str, str] = {}
    for i, tag in enumerate(ordered):
        if tag not in wanted:
            continue
        lower = [tags[t] for t in ordered[:i]]
        for sha in _git(path, "rev-list", tags[tag], *(["--not", *lower] if lower else [])):
            out.setdefault(sha, tag)
    return out


def read_commits(path: Path, rev_range: Sequence[str], since: str | None = None) -> Iterator[Commit]:
    """Commits of ``rev_range`` (newest first) with their files and touched functions, streamed from one
    ``git log -p -U0`` (only hunk headers and changed ``def``/``class`` lines are kept)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".gitattributes", delete=False) as fh:
        fh.write("".join(f"{pattern} diff={driver}\n" for pattern, driver in _DRIVERS.items()))
        attrs = fh.name
    cmd = ["git", "-C", str(path), "-c", f"core.attributesFile={attrs}", "log", *rev_range, "-p", "-U0", "--no-color",
           "--no-renames", "--no-ext-diff", "--no-textconv", "--format=%x1e%H%x1f%ct%x1f%s%x1f%b%x1d"]
    if since:
        cmd.append(f"--since={since}")
    cmd.append("--")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    try:
        yield from _parse_log(proc.stdout)  # type: ignore[arg-type]
        proc.wait(timeout=60)
        if proc.returncode:
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            raise UserError(f"git log in {path}: {err[:300]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.unlink(attrs)


def _parse_log(stream: Iterable[bytes]) -> Iterator[Commit]:
    current: Commit | None = None
    header: list[bytes] = []
    in_header = False
    file = ""
    for raw in stream:
        first = raw[:1]
        if in_header:
            header.append(raw)
            if b"\x1d" in raw:
                in_header = False
                current = _header_commit(b"".join(header))
            continue
        if first == b"\x1e":
            if current is not None:
                yield current
            current = None
            header = [raw[1:]]
            if b"\x1d" in raw:
                current = _header_commit(b"".join(header))
            else:
                in_header = True
            file = ""
            continue
        if current is None:
            continue
        if first == b"@":
            m = _HUNK.match(raw.rstrip(b"\n"))
            if m and file:
                name = symbol_of(m.group(1).decode("utf-8", "replace"))
                if name:
                    current.symbol_paths.add((name, file))
        elif first in (b"+", b"-"):
            if raw.startswith((b"+++ ", b"--- ")):
                target = raw[4:].rstrip(b"\n").decode("utf-8", "replace")
                if target != "/dev/null":
                    target = target[2:] if target[:2] in ("a/", "b/") else target
                    if raw[:1] == b"-" or target != file:
                        if target not in current.files:
                            current.files.append(target)
                        file = target
                continue
            body = raw[1:].lstrip()
            if body.startswith((b"def ", b"class ", b"async def ")) and file:
                m2 = _DEF.match(body.decode("utf-8", "replace"))
                if m2:
                    current.symbol_paths.add((m2.group(1), file))
        elif first == b"d" and raw.startswith(b"diff --git "):
            file = ""
    if current is not None:
        yield current


_TEMPLATE_LINE = re.compile(r"^\s*(?:[-*] \[[ xX]\]|>|<!--|\[!|(?:Signed-off-by|Co-authored-by|Reviewed-by):)")
_CHECKLIST = re.compile(r"(?im)^#+\s*(?:checklist|test(?:ing)?\b|api and usage|design & code changes)")


def clean_body(body: str) -> str:
    """A commit body without the PR template around it: checklists, quoted instructions, sign-offs,
    and everything from a "Checklist" or "Test" heading on (words of a template match every error)."""
    m = _CHECKLIST.search(body)
    if m:
        body = body[:m.start()]
    body = re.sub(r"(?s)<!--.*?-->", "", body)
    lines = [line for line in body.splitlines() if not _TEMPLATE_LINE.match(line)]
    return "\n".join(lines).strip()


def _header_commit(data: bytes) -> Commit:
    text = data.decode("utf-8", "replace").split("\x1d", 1)[0]
    sha, ts, subject, body = (text.split("\x1f", 3) + ["", "", ""])[:4]
    body = clean_body(body)
    return Commit(sha=sha.strip(), date=int(ts or 0), subject=subject.strip(), body=body,
                  pr=pr_number(subject.strip(), body))


def sync_clone(history: History, path: str | os.PathLike[str], *, name: str | None = None,
               since: str | None = None, progress: Any = None) -> SyncReport:
    """Index the commits of a clone's HEAD and its release tags; a re-sync reads only what is new."""
    started = time.monotonic()
    clone = Path(path).expanduser()
    check_clone(clone)
    repo = name or repo_name(clone)
    report = SyncReport(repo=repo, source=str(clone), kind="git")
    head = _git(clone, "rev-parse", "HEAD")[0].strip()
    tags = release_tags(clone)
    state = history.repo_state(repo)
    old_head, old_tags = state if state else ("", {})
    report.head, report.tags = head, len(tags)
    if head != old_head:
        rev_range = [head]
        if old_head:
            try:
                _git(clone, "merge-base", "--is-ancestor", old_head, head)
                rev_range = [head, f"^{old_head}"]
            except UserError:  # history rewritten or the old head is gone: read all, keep what is known
                rev_range = [head]
        known = history.known_shas(repo) if rev_range == [head] and old_head else set()
        commits = (c for c in read_commits(clone, rev_range, since) if c.sha not in known)
        batch: list[Commit] = []
        for c in commits:
            batch.append(c)
            if len(batch) >= 2000:
                report.new_commits += history.add(repo, batch)
                batch = []
                if progress is not None:
                    progress(report.new_commits)
        report.new_commits += history.add(repo, batch)
    new_tags = [t for t, sha in tags.items() if old_tags.get(t) != sha]
    report.new_tags = len(new_tags)
    if new_tags or report.new_commits:
        # releases for new tags, and for new commits (already inside an old tag only if history was rewritten)
        only = None if report.new_commits and not old_head else (new_tags or [])
        releases = first_releases(clone, tags, only)
        report.releases_set = history.set_releases(repo, releases)
    history.save_repo(repo, str(clone), "git", head, tags)
    report.total_commits = history.db.execute("SELECT count(*) FROM commits WHERE repo=?", (repo,)).fetchone()[0]
    report.seconds = time.monotonic() - started
    return report


# ---------------------------------------------------------------------------- GitHub REST


def _slim_commit_list(body: Any) -> Any:
    if not isinstance(body, list):
        return body
    return [{"sha": c.get("sha"), "message": (c.get("commit") or {}).get("message", ""),
             "date": ((c.get("commit") or {}).get("committer") or {}).get("date", "")} for c in body if isinstance(c, dict)]


def _slim_commit(body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    files = []
    for f in body.get("files") or []:
        if isinstance(f, dict):
            files.append({"filename": f.get("filename", ""), "patch": _hunk_lines(f.get("patch") or "")})
    return {"sha": body.get("sha"), "files": files}


def _hunk_lines(patch: str) -> str:
    """Of a file's patch, only the lines sync reads (hunk headers, changed def/class lines): a small cache."""
    keep = [line for line in patch.splitlines()
            if line.startswith("@@") or (line[:1] in "+-" and _DEF.match(line[1:]))]
    return "\n".join(keep)


def _iso_ts(text: str) -> int:
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


def sync_rest(history: History, client: Any, repo: str, *, since: str | None = None,
              max_commits: int | None = None, progress: Any = None) -> SyncReport:
    """Index a repository's default branch through the GitHub REST API (commits, then each new one's files).

    The first release containing a commit is the lowest release tag whose commit is not older than
    it (the REST API has no cheap "which tags contain this"): exact for a linear history.
    """
    started = time.monotonic()
    report = SyncReport(repo=repo, source=f"{client.api_url}/repos/{repo}", kind="rest")
    state = history.repo_state(repo)
    old_head, old_tags = state if state else ("", {})
    known = history.known_shas(repo)
    params: dict[str, Any] = {"per_page": 100}
    if since:
        params["since"] = since
    listed: list[dict[str, Any]] = []
    for page, _cached in client.paginate(client.url(f"repos/{repo}/commits", params), slim=_slim_commit_list):
        stop = False
        for c in page or []:
            if c.get("sha") in known or c.get("sha") == old_head:
                stop = True
                break
            listed.append(c)
            if max_commits and len(listed) >= max_commits:
                stop = True
                break
        if stop:
            break
    commits: list[Commit] = []
    for n, c in enumerate(listed, 1):
        detail, _next, _cached = client.get(client.url(f"repos/{repo}/commits/{c['sha']}"), slim=_slim_commit)
        message = str(c.get("message") or "")
        subject, _, body = message.partition("\n")
        commit = Commit(sha=str(c["sha"]), date=_iso_ts(str(c.get("date") or "")), subject=subject.strip(),
                        body=clean_body(body), pr=pr_number(subject.strip(), body))
        for f in (detail or {}).get("files") or []:
            path = f.get("filename") or ""
            if not path:
                continue
            commit.files.append(path)
            for line in str(f.get("patch") or "").splitlines():
                if line.startswith("@@"):
                    name = symbol_of(line.split("@@", 2)[-1].strip())
                else:
                    m = _DEF.match(line[1:])
                    name = m.group(1) if m else ""
                if name:
                    commit.symbol_paths.add((name, path))
        commits.append(commit)
        if progress is not None:
            progress(n)
    report.new_commits = history.add(repo, commits)
    head = listed[0]["sha"] if listed else old_head
    tags: dict[str, str] = dict(old_tags)
    for page, _cached in client.paginate(client.url(f"repos/{repo}/tags", {"per_page": 100})):
        for t in page or []:
            name, sha = t.get("name", ""), (t.get("commit") or {}).get("sha", "")
            if name and sha and parse(name) is not None:
                tags[name] = sha
    report.new_tags = len([t for t in tags if t not in old_tags])
    dates = dict(history.db.execute("SELECT sha, date FROM commits WHERE repo=?", (repo,)).fetchall())
    tag_dates: dict[str, int] = {}
    for tag, sha in tags.items():
        if sha in dates:
            tag_dates[tag] = dates[sha]
        else:
            detail, _n, _c = client.get(client.url(f"repos/{repo}/commits/{sha}"), slim=_slim_tag_date)
            tag_dates[tag] = _iso_ts(str((detail or {}).get("date") or ""))
    ordered = _version_order(tags)
    releases: dict[str, str] = {}
    for sha, date in dates.items():
        for tag in ordered:
            if tag_dates.get(tag, 0) >= date:
                releases[sha] = tag
                break
    report.releases_set = history.set_releases(repo, releases)
    history.save_repo(repo, report.source, "rest", head, tags)
    report.head, report.tags = head, len(tags)
    report.total_commits = len(dates)
    report.seconds = time.monotonic() - started
    return report


def _slim_tag_date(body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    return {"sha": body.get("sha"), "date": ((body.get("commit") or {}).get("committer") or {}).get("date", "")}


# ---------------------------------------------------------------------------- matching


@dataclass
class FailureQuery:
    """What a failure says about itself: the exception, its message and its frames (deepest last)."""

    exception: str = ""
    message: str = ""
    frames: list[tuple[str, int, str]] = field(default_factory=list)  # (path, line, function)
    words: str = ""  # more error text (other error lines, the question)

    def frame_packages(self) -> list[tuple[tuple[str, int, str], str]]:
        """Each frame (deepest first) with the package whose repository could hold it."""
        out = []
        for path, line, func in reversed(self.frames):
            out.append(((path, line, func), _frame_package(path)))
        return out


_SITE = re.compile(r"(?:site|dist)-packages/([A-Za-z_]\w*)/")


def _frame_package(path: str) -> str:
    m = _SITE.search(path)
    if m:
        return canonical(m.group(1))
    return ""


#: What each kind of tie to the failure is worth, and how much a fix-like subject and word overlap add.
WEIGHTS = {"function": 1.0, "file": 0.45, "named": 0.35, "module": 0.3, "message": 0.0}
#: A commit touching more files than this is a sweeping change (a lint pass, a rename): its frame tie counts
#: this much. A commit in the first release after the user's gains NEXT_RELEASE_BONUS: a bug the user has
#: existed in their release, so the first fix after it that touches the failing code is the likeliest.
SWEEPING_FILES = 30
SWEEPING_FACTOR = 0.5
NEXT_RELEASE_BONUS = 0.1
#: A commit already in the user's release leads only this far ahead of the best newer one: the user still
#: fails with it, so a later commit on the same code is the likelier fix.
IN_YOURS_MARGIN = 0.3
#: A name the error quotes that more commits than this touched is common (``forward``): it ties nothing.
NAMED_MAX_COMMITS = 40
_NAMED = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*")
_NOT_NAMED = frozenset("NoneType None True False object function module method builtin int str float bool list dict "
                       "tuple set bytes type self cls".split())


def named_in(message: str) -> list[str]:
    """Identifiers an error message quotes that can name code: ``snake_case``, ``CamelCase`` with an inner
    capital, ``dotted.module.names`` (builtin type names and plain words left out)."""
    out: list[str] = []
    for m in _NAMED.finditer(message):
        name = m.group(0).strip(".")
        if len(name) < 4 or name in _NOT_NAMED or name in out:
            continue
        if "_" in name.strip("_") or "." in name or any(ch.isupper() for ch in name[1:]):
            out.append(name)
    return out[:12]
FIX_BONUS = 0.25
WORD_WEIGHT = 0.6
#: Each frame further from the exception (among frames of indexed repositories) is worth this much less.
DEPTH_DECAY = 0.15
#: Frames of indexed repositories considered, deepest first.
MAX_FRAMES = 8
#: Candidates taken by words alone (no frame tie), per query.
WORD_CANDIDATES = 40


def _suffix_len(a: str, b: str) -> int:
    pa, pb = a.strip("/").split("/"), b.strip("/").split("/")
    n = 0
    while n < min(len(pa), len(pb)) and pa[-1 - n] == pb[-1 - n]:
        n += 1
    return n


_LOWER_TOKEN = re.compile(r"[a-z][a-z0-9_]+")
_PART = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def _tokens(text: str) -> set[str]:
    """Every word :func:`error_words` could make of ``text`` (whole identifiers and their parts), as a set:
    the fast test of which of an error's words a commit shares."""
    low = text.lower()
    out = set(_LOWER_TOKEN.findall(low))
    out.update(p.lower() for p in _PART.findall(text))
    out.update(low.replace("_", " ").split())
    return out


def error_words(text: str) -> list[str]:
    """The distinctive words of an error text (identifiers kept whole and split), lower-case, no stop words."""
    out: list[str] = []
    for w in _WORD.findall(text):
        for part in {w, *(_SPLIT.split(w) if "_" in w or any(ch.isupper() for ch in w[1:]) else ())}:
            low = part.lower()
            if len(low) >= 3 and low not in _STOP and not low.isdigit() and low not in out:
                out.append(low)
    return out[:40]


def match(history: History, query: FailureQuery, *, versions: dict[str, str] | None = None,
          repos: Sequence[str] | None = None, k: int = 5) -> list[UpstreamFix]:
    """Commits that likely fixed this failure, best first: those after the user's release (or of unknown
    standing) first, then at most one already in it (so the answer can say "already in: look elsewhere")."""
    versions = versions or {}
    indexed = {r["repo"]: r["package"] for r in history.repos()}
    if repos:
        indexed = {r: p for r, p in indexed.items() if r in repos}
    if not indexed:
        return []
    by_package: dict[str, list[str]] = {}
    for repo, package in indexed.items():
        by_package.setdefault(package, []).append(repo)
    scores: dict[int, dict[str, Any]] = {}

    def tie(cid: int, repo: str, kind: str, where: str, weight: float) -> None:
        entry = scores.setdefault(cid, {"repo": repo, "frame": 0.0, "matched": ""})
        if weight > entry["frame"]:
            entry["frame"], entry["matched"] = weight, f"{kind} {where}"

    depth = 0
    for (path, _line, func), package in query.frame_packages():
        repo_list = by_package.get(package) or []
        if not repo_list and not package:  # a source checkout or a pasted relative path: try every repo
            repo_list = list(indexed)
        if not repo_list:
            continue
        decay = max(0.2, 1.0 - DEPTH_DECAY * depth)
        base = path.replace("\\", "/").rsplit("/", 1)[-1]
        files: dict[tuple[str, str], int] = {}
        marks = ",".join("?" * len(repo_list))
        touched_any = False
        for cid, repo, rpath in history.db.execute(
                f"SELECT commit_id, repo, path FROM touched WHERE base=? AND repo IN ({marks})", (base, *repo_list)):
            n = files.get((repo, rpath))
            if n is None:
                n = files[(repo, rpath)] = _suffix_len(path, rpath)
            if n >= 2 or (n == 1 and "/" not in rpath):
                touched_any = True
                tie(cid, repo, "file", f"{rpath}", WEIGHTS["file"] * decay)
        if func and func not in ("<module>", "<lambda>", "wrapper", "inner", "forward", "__call__", "run", "main"):
            for cid, repo, rpath in history.db.execute(
                    f"SELECT commit_id, repo, path FROM symbols WHERE name=? AND repo IN ({marks})", (func, *repo_list)):
                n = files.get((repo, rpath), _suffix_len(path, rpath))
                if n >= 2 or (n == 1 and "/" not in rpath):
                    tie(cid, repo, "function", f"{rpath}:{func}", WEIGHTS["function"] * decay)
        if touched_any or any(files.values()):
            depth += 1
        if depth >= MAX_FRAMES:
            break
    frame_repos = list(indexed)
    for name in named_in(query.message):
        marks = ",".join("?" * len(frame_repos))
        last = name.rsplit(".", 1)[-1]
        rows = history.db.execute(f"SELECT commit_id, repo, path FROM symbols WHERE name=? AND repo IN ({marks}) LIMIT ?",
                                  (last, *frame_repos, NAMED_MAX_COMMITS + 1)).fetchall()
        if len(rows) <= NAMED_MAX_COMMITS:
            for cid, repo, rpath in rows:
                tie(cid, repo, "named", f"{rpath}:{last}", WEIGHTS["named"])
        if "." in name:  # a module path: the commits that touched that module's files
            prefix = name.replace(".", "/")
            rows = history.db.execute(f"SELECT commit_id, repo, path FROM touched WHERE (path LIKE ? OR path LIKE ?) "
                                      f"AND repo IN ({marks}) LIMIT ?",
                                      (f"%{prefix}/%", f"%{prefix}.py", *frame_repos, NAMED_MAX_COMMITS + 1)).fetchall()
            if len(rows) <= NAMED_MAX_COMMITS:
                for cid, repo, rpath in rows:
                    tie(cid, repo, "module", rpath, WEIGHTS["module"])
    words = error_words(f"{query.exception.rsplit('.', 1)[-1]} {query.message} {query.words}")
    if words:
        fts = " OR ".join(f'"{w}"' for w in words[:24])
        repo_filter = set(indexed)
        try:
            rows = history.db.execute("SELECT c.id, c.repo FROM commit_words w JOIN commits c ON c.id = w.rowid "
                                      "WHERE commit_words MATCH ? ORDER BY bm25(commit_words) LIMIT ?",
                                      (fts, WORD_CANDIDATES)).fetchall()
        except sqlite3.Error:
            rows = []
        for cid, repo in rows:
            if repo in repo_filter:
                scores.setdefault(cid, {"repo": repo, "frame": 0.0, "matched": "message"})
    if not scores:
        return []
    idf = _idf(history, words)
    total_idf = sum(idf.values()) or 1.0
    out: list[UpstreamFix] = []
    judged: dict[tuple[str, str], str] = {}
    next_release = _next_releases(history, indexed, versions)
    ids = list(scores)
    for chunk in range(0, len(ids), 500):
        part = ids[chunk:chunk + 500]
        rows = history.db.execute(f"SELECT id, repo, sha, date, subject, body, pr, release, symbols, "
                                  f"length(files) - length(replace(files, char(10), '')) + 1 FROM commits "
                                  f"WHERE id IN ({','.join('?' * len(part))})", part).fetchall()
        for cid, repo, sha, date, subject, body, pr, release, symbols, nfiles in rows:
            entry = scores[cid]
            text_words = _tokens(f"{subject} {body[:1500]} {symbols or ''}")
            shared = [w for w in words if w in text_words]
            overlap = sum(idf.get(w, 0.0) for w in shared) / total_idf
            fixlike = bool(FIX_WORDS.search(subject))
            if entry["frame"] == 0.0 and (overlap < 0.25 or not fixlike):
                continue  # a word match alone must be a fix that says much of what the error says
            frame = entry["frame"] * (SWEEPING_FACTOR if (nfiles or 0) > SWEEPING_FILES else 1.0)
            package = indexed.get(repo, "")
            first_after = next_release.get(repo, {}).get(versions.get(package, ""), None)
            soon = NEXT_RELEASE_BONUS if first_after is not None and (release or "") == first_after else 0.0
            score = frame + (FIX_BONUS if fixlike else 0.0) + WORD_WEIGHT * overlap + soon
            matched = entry["matched"] or "message"
            if shared:
                matched += f"; words: {', '.join(shared[:6])}"
            strong = (entry["matched"].startswith("function") and (fixlike or overlap >= 0.2)) or \
                     (entry["matched"].startswith(("named", "module")) and fixlike and overlap >= 0.25) or \
                     (entry["matched"].startswith("file") and fixlike and overlap >= 0.3) or \
                     (fixlike and overlap >= 0.6)
            yours = versions.get(package, "")
            key = (release or "", yours)
            if key not in judged:
                judged[key] = status_for(*key)
            out.append(UpstreamFix(repo=repo, commit=sha, subject=subject, pr=pr, date=_day(date), release=release or "",
                                   matched=matched, score=round(score, 4), package=package, yours=yours,
                                   status=judged[key], strong=strong))
    out.sort(key=lambda f: (-f.score, f.date))
    newer = [f for f in out if f.status != "in_yours"][:k]
    already = [f for f in out if f.status == "in_yours"][:1]
    if already and (not newer or already[0].score >= newer[0].score + IN_YOURS_MARGIN):
        return already + newer  # the best tie is already in the user's release: the answer says so first
    return newer + already


def _next_releases(history: History, indexed: dict[str, str], versions: dict[str, str]) -> dict[str, dict[str, str]]:
    """{repo: {user's version: the first release tag after it}} for the repos whose package has a version."""
    out: dict[str, dict[str, str]] = {}
    for repo, package in indexed.items():
        yours = versions.get(package, "")
        if not yours or parse(yours) is None:
            continue
        state = history.repo_state(repo)
        later = [t for t in _version_order((state or ("", {}))[1]) if (compare(t, yours) or 0) > 0]
        if later:
            out[repo] = {yours: later[0]}
    return out


def status_for(release: str, yours: str) -> str:
    """``in_yours`` when the first release holding the commit is at or below the user's, ``after_yours`` when
    it is newer or unreleased, ``unknown`` without a comparable user version."""
    if not yours or parse(yours) is None:
        return "unknown"
    if not release:
        return "after_yours"
    cmp = compare(release, yours)
    if cmp is None:
        return "unknown"
    return "in_yours" if cmp <= 0 else "after_yours"


def _idf(history: History, words: Sequence[str]) -> dict[str, float]:
    import math

    total = history.db.execute("SELECT count(*) FROM commits").fetchone()[0] or 1
    out: dict[str, float] = {}
    for w in words:
        try:
            n = history.db.execute("SELECT count(*) FROM commit_words WHERE commit_words MATCH ?", (f'"{w}"',)).fetchone()[0]
        except sqlite3.Error:
            n = 0
        out[w] = math.log(1 + total / (1 + n))
    return out


def query_from_finding(evidence: dict[str, Any], summary: str = "") -> FailureQuery | None:
    """A query from a log finding's evidence (``exception``, ``message``, ``frames``), or None without a traceback."""
    exc = str(evidence.get("exception") or "")
    frames_raw = evidence.get("frames") or ([evidence["deepest_frame"]] if evidence.get("deepest_frame") else [])
    frames = [f for f in (parse_frame(str(x)) for x in frames_raw) if f]
    if not exc and not frames:
        return None
    return FailureQuery(exception=exc, message=str(evidence.get("message") or ""), frames=frames,
                        words=str(evidence.get("line_text") or "") if not evidence.get("message") else "")


_FRAME_TEXT = re.compile(r"^(.*?):(\d+) in (\S+)$")


def parse_frame(text: str) -> tuple[str, int, str] | None:
    """``path:line in func`` (how a finding stores a frame) -> (path, line, func)."""
    m = _FRAME_TEXT.match(text.strip())
    if not m:
        return None
    return m.group(1), int(m.group(2)), m.group(3)


def search(history: History, text: str, k: int = 5, repos: Sequence[str] | None = None) -> list[Any]:
    """Commits whose subject, description or touched functions share the words of ``text``, best first
    (FTS5 BM25), as :class:`~rlmedic.knowledge.retrieve.SearchResult` of kind ``commit``."""
    from rlmedic.knowledge.retrieve import SearchResult

    words = error_words(text)
    if not words:
        return []
    fts = " OR ".join(f'"{w}"' for w in words[:24])
    sql = ("SELECT c.repo, c.sha, c.date, c.subject, c.body, c.pr, c.release, c.files, c.symbols, bm25(commit_words) "
           "FROM commit_words w JOIN commits c ON c.id = w.rowid WHERE commit_words MATCH ?")
    params: list[Any] = [fts]
    if repos:
        sql += f" AND c.repo IN ({','.join('?' * len(repos))})"
        params += list(repos)
    try:
        rows = history.db.execute(sql + " ORDER BY bm25(commit_words) LIMIT ?", (*params, k)).fetchall()
    except sqlite3.Error:
        return []
    out = []
    for repo, sha, date, subject, body, pr, release, files, symbols, rank in rows:
        fix = UpstreamFix(repo=repo, commit=sha, subject=subject, pr=pr, date=_day(date), release=release or "")
        where = ", ".join((files or "").split("\n")[:4])
        funcs = " ".join((symbols or "").split()[:8])
        summary = (f"{subject}\n{fix.date}, {release or 'not released yet'}; files: {where}"
                   + (f"; functions: {funcs}" if funcs else "") + (f"\n{body[:400]}" if body else ""))
        out.append(SearchResult(id=f"commit-{repo}@{sha}", source=fix.ref, section=subject[:120], score=-float(rank),
                                text=summary, kind="commit", path="", line_start=0, line_end=0, url=fix.url,
                                info={"commit": sha, "pr": pr, "date": fix.date, "release": release or "",
                                      "repo": repo}))
    return out
