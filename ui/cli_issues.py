"""``rlmedic sync-issues``: upstream issue threads into the knowledge base (or an export file)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rlmedic.ui.cli_knowledge import INDEX_DIR_HELP


def register(app: typer.Typer) -> None:
    app.command("sync-issues", short_help="Index closed upstream issues that record a fix.")(sync_issues)


def sync_issues(
    repos: Optional[list[str]] = typer.Argument(
        None, metavar="OWNER/REPO...", help="Trackers to read (default: AReaL, slime, SGLang and verl)."
    ),
    since: Optional[str] = typer.Option(None, "--since", help="Only issues updated on or after this date (2025-01-31)."),
    token_env: str = typer.Option(
        "GITHUB_TOKEN", "--token-env", help="Environment variable holding a GitHub token (optional; raises the rate limit)."
    ),
    max_issues: Optional[int] = typer.Option(None, "--max", min=1, help="Read at most N closed issues per repo (newest first)."),
    api_url: str = typer.Option("https://api.github.com", "--api-url", help="GitHub REST API root (GitHub Enterprise: https://HOST/api/v3)."),
    export: Optional[Path] = typer.Option(None, "--export", help="Write the threads to this new JSONL file instead of indexing them."),
    from_export: Optional[Path] = typer.Option(
        None, "--from-export", help="Index threads from a JSONL file made by --export (no network)."
    ),
    max_wait: float = typer.Option(900, "--max-wait", min=0, help="Longest wait for a rate-limit reset, in seconds."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", help=INDEX_DIR_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Sync closed upstream issues that teach a fix (maintainer reply, merged PR, closed as completed)."""
    from rlmedic.errors import UserError
    from rlmedic.knowledge import sync, threads
    from rlmedic.knowledge.github import EtagCache, GitHubClient, token_from_env
    from rlmedic.knowledge.index import KnowledgeBase
    from rlmedic.ui.clikit import print_json
    from rlmedic.ui.progress import progress_bar

    if export and from_export:
        raise UserError("--export and --from-export do not go together: export on a connected machine, import on the other")
    kb = KnowledgeBase(index_dir)
    report = sync.SyncReport()

    def notice(message: str) -> None:
        typer.echo(message, err=True)

    if from_export:
        if repos:
            raise UserError("--from-export reads every thread in the file; drop the OWNER/REPO arguments")
        records = sync.read_export(from_export)
        report.repos = sorted({r["repo"] for r in records})
        report.listed = len(records)
    else:
        names = [sync.parse_repo(r) for r in repos] if repos else list(sync.DEFAULT_REPOS)
        report.repos = names
        since_iso = sync.parse_since(since)
        token = token_from_env(token_env)
        cache = EtagCache.load(kb.github_cache_path)
        records = []
        with (
            GitHubClient(api_url, token=token, cache=cache, max_wait=max_wait, on_wait=notice) as client,
            progress_bar("Reading issues", enabled=not json_out) as progress,
        ):
            try:
                for repo in names:
                    records += sync.fetch_threads(client, repo, report, since=since_iso, max_issues=max_issues, progress=progress)
            finally:
                cache.save()  # what was read is kept even when a rate limit stops the run
                report.http = client.stats.to_dict()
    kept = [r for r in records if threads.teaches(r)]  # fetch_threads filtered already; an export may not have
    if len(kept) < len(records):
        report.skipped[sync.NO_FIX] += len(records) - len(kept)
    report.kept = len(kept)
    if export:
        sync.write_export(kept, export)
        report.exported = len(kept)
    else:
        with progress_bar("Embedding threads", enabled=not json_out) as progress:
            indexed = kb.index_threads(kept, progress=progress)
        report.added, report.updated, report.unchanged = len(indexed.added), len(indexed.updated), len(indexed.unchanged)
        report.embedded = indexed.chunks_embedded
        for line in indexed.warnings:
            notice(f"warning: {line}")
    if json_out:
        print_json(report.to_dict())
        return
    skipped = sum(report.skipped.values())
    line = f"{', '.join(report.repos)}: {report.listed} closed issues read, {report.kept} threads kept, {skipped} skipped (no fix recorded)"
    if report.pull_requests:
        line += f", {report.pull_requests} pull requests ignored"
    typer.echo(line)
    if report.http:
        h = report.http
        typer.echo(f"GitHub: {h['requests']} requests, {h['not_modified']} unchanged (304), {h['retries']} retried")
    if export:
        typer.echo(f"{report.exported} threads written to {export}")
    else:
        typer.echo(
            f"{report.added} added, {report.updated} updated, {report.unchanged} unchanged; "
            f"{report.embedded} threads embedded ({kb.issues.directory})"
        )
