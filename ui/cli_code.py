"""``rlmedic sync-code``: a framework's commit history into the index, for naming upstream fixes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from rlmedic.ui.cli_knowledge import INDEX_DIR_HELP

_OWNER_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def register(app: typer.Typer) -> None:
    app.command("sync-code")(sync_code)


def sync_code(
    sources: list[str] = typer.Argument(..., metavar="SOURCE",
                                        help="A local git clone (bare or not) of a framework, or OWNER/REPO to read through the GitHub API."),
    since: Optional[str] = typer.Option(None, "--since", help="Only commits on or after this date (2025-01-31)."),
    name: Optional[str] = typer.Option(None, "--name", metavar="OWNER/REPO",
                                       help="The repository a clone is of (default: its origin URL, else its folder name)."),
    token_env: str = typer.Option("GITHUB_TOKEN", "--token-env", help="Environment variable holding a GitHub token (REST only)."),
    api_url: str = typer.Option("https://api.github.com", "--api-url", help="GitHub REST API root (REST only)."),
    max_commits: Optional[int] = typer.Option(None, "--max", min=1, help="Read at most N new commits per repository (REST only)."),
    max_wait: float = typer.Option(900, "--max-wait", min=0, help="Longest wait for a rate-limit reset, in seconds."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", help=INDEX_DIR_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Index a framework's git history to find upstream fixes.

    Each commit's PR, date, files, the functions it touched and the first release holding it; a re-sync
    reads only new commits."""
    from rlmedic.errors import UserError
    from rlmedic.knowledge.history import History, sync_clone, sync_rest
    from rlmedic.settings import history_path
    from rlmedic.knowledge.sync import parse_since
    from rlmedic.ui.clikit import print_json

    if name and len(sources) > 1:
        raise UserError("--name names one clone; give one SOURCE with it")
    if name and not _OWNER_REPO.match(name):
        raise UserError(f"--name {name!r}: write it as OWNER/REPO")
    kinds = []
    for source in sources:
        path = Path(source).expanduser()
        if path.exists():
            kinds.append(("git", source))
        elif _OWNER_REPO.match(source) and not source.startswith((".", "/", "~")):
            kinds.append(("rest", source))
        else:
            raise UserError(f"{source}: neither a folder nor OWNER/REPO")
    since_iso = parse_since(since)
    reports = []

    def notice(message: str) -> None:
        typer.echo(message, err=True)

    with History(history_path(index_dir)) as history:
        for kind, source in kinds:
            if kind == "git":
                reports.append(sync_clone(history, source, name=name, since=since_iso))
                continue
            from rlmedic.knowledge.github import EtagCache, GitHubClient, token_from_env

            cache = EtagCache.load(history.path.with_name("github-code-cache.json"))
            with GitHubClient(api_url, token=token_from_env(token_env), cache=cache, max_wait=max_wait,
                              on_wait=notice) as client:
                try:
                    report = sync_rest(history, client, source, since=since_iso, max_commits=max_commits)
                finally:
                    cache.save()
                report.http = client.stats.to_dict()
                reports.append(report)
    if json_out:
        print_json({"index": str(history_path(index_dir)), "repos": [r.to_dict() for r in reports]})
        return
    for r in reports:
        typer.echo(f"{r.repo}: {r.new_commits} new commit(s), {r.total_commits} in all; {r.tags} release tag(s)"
                   f" ({r.new_tags} new); {r.seconds:.1f} s")


ENV_HELP = ("The training environment's versions: a pip freeze, pip list (text or JSON), conda list or "
            "`rlmedic env --json` file (they decide whether an upstream fix is already in your release).")


def env_versions(env_file: Path | None) -> dict[str, str]:
    """The versions in ``--env FILE`` ({} without one); a file that is no listing is one clear error."""
    if env_file is None:
        return {}
    from rlmedic.tools.envinfo import versions_of_file

    return versions_of_file(env_file)[1]


def upstream_for_diagnosis(diagnosis: object, env: dict[str, str]) -> list[str]:
    """The upstream-fix lines for ``rlmedic diagnose`` (judged again with ``--env`` versions); the diagnosis's
    ``stats.upstream_fixes`` and ``stats.versions`` are updated to the same judgement for ``--json``."""
    from rlmedic.agent.upstream import judged, upstream_lines
    from rlmedic.types import Citation, Evidence, UpstreamFix

    stats = getattr(diagnosis, "stats", None)
    if not isinstance(stats, dict):
        return []
    logs = Evidence(subject="logs", versions=dict(stats.get("versions") or {}),
                    upstream_fixes=[UpstreamFix.from_dict(f) for f in stats.get("upstream_fixes") or []])
    evidence = [logs, Evidence(subject="env", versions=env)]
    if env:
        stats["versions"] = {**logs.versions, **env}
    if logs.upstream_fixes:
        stats["upstream_fixes"] = [f.to_dict() for f in judged(evidence)]
    cited: list[Citation] = []

    def cite(c: Citation) -> int:
        if c not in cited:
            cited.append(c)
        return cited.index(c) + 1

    lines = upstream_lines(evidence, cite)
    return lines + [f"  [{i}] {c.ref} <{c.url}>" for i, c in enumerate(cited, 1)] if lines else []


SOURCE_HELP = ("The framework's source (a clone, or the training environment's site-packages): the failing "
               "function is quoted from it around the traceback's line (read-only).")


def code_for_diagnosis(diagnosis: object, source: Path | None) -> list[str]:
    """``--source``: the failing functions of the root traceback quoted from ``source`` through the
    ``quote_code`` tool (confined to that folder); ``stats.code_context`` holds them for ``--json``."""
    if source is None:
        return []
    from rlmedic.errors import UserError
    from rlmedic.knowledge.history import parse_frame
    from rlmedic.tools.upstream import root_exception
    from rlmedic.ui.clikit import run_tool

    if not source.expanduser().is_dir():
        raise UserError(f"--source {source}: no such folder")
    root = getattr(diagnosis, "root_finding", None)
    findings = ([root] if root is not None else []) + list(getattr(diagnosis, "findings", []))
    ev = root_exception(findings)
    frames = [f for f in (parse_frame(str(x)) for x in (ev or {}).get("frames") or []) if f]
    if not frames:
        return []
    text = "\n".join(f'  File "{p}", line {n}, in {f}' for p, n, f in frames)
    quotes = run_tool("quote_code", {"source": str(source), "traceback": text}, roots=[source])
    diagnosis.stats["code_context"] = [q.to_dict() for q in quotes]  # type: ignore[attr-defined]
    if not quotes:
        return [f"No frame of the traceback resolves under {source}."]
    return ["Code at the failure (your source):", *(str(q) for q in quotes)]
