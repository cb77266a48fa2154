"""``rlmedic index`` and ``search``: the knowledge base from the terminal (``ask`` is in cli_agent)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rlmedic.ui.params import path as path_param

INDEX_DIR_HELP = "Index directory (default: $RLMEDIC_HOME/index or the per-user data dir)."
CHROMA_URL_HELP = "A Chroma server (`chroma run`) for the dense index instead of the embedded store (env RLMEDIC_CHROMA_URL)."


KNOWN_ISSUES_HELP = ("A folder of your team's known-issue records (YAML, see knowledge/known/README.md); repeatable. "
                     "Adds to $RLMEDIC_KNOWN_ISSUES; RLMEDIC_KNOWN_ISSUES_BUILTIN=0 turns the shipped records off.")


def use_known_issues(folders: list[Path] | None) -> None:
    """Add ``--known-issues`` folders for this process (and its workers); report each bad record in one line.

    A missing folder is an error (a typo must not silently drop the team's records); a bad record
    is a warning on stderr and the rest still load.
    """
    from rlmedic.errors import UserError
    from rlmedic.knowledge.known import add_folders, load

    for folder in folders or []:
        if not folder.expanduser().is_dir():
            raise UserError(f"--known-issues {folder}: no such folder")
    if folders:
        add_folders([folder.expanduser() for folder in folders])
    for line in load().problems:
        typer.echo(f"warning: known issues: {line}", err=True)


def use_chroma_url(url: str | None) -> None:
    """Point every knowledge base in this process at ``url`` (see rlmedic.settings.chroma_url)."""
    import os

    if url:
        os.environ["RLMEDIC_CHROMA_URL"] = url


def existing_index_dir(index_dir: Optional[Path], chroma_url: Optional[str] = None) -> Optional[Path]:
    """``--index-dir`` for a command that reads the index: it must exist (only ``index`` creates one),
    so a mistyped path is an error rather than a new, empty index. With ``--chroma-url`` the server
    holds the index, and reaching it is the check that matters."""
    from rlmedic.errors import UserError

    if index_dir is not None and not chroma_url and not index_dir.expanduser().is_dir():
        raise UserError(f"--index-dir {index_dir}: no such folder; `rlmedic index --index-dir {index_dir} DOCS...` "
                        f"(or `rlmedic sync-issues --index-dir {index_dir}`) creates an index there")
    return index_dir


def register(app: typer.Typer) -> None:
    app.command("index", short_help="Add your own documents to the knowledge base.")(index)
    app.command("search", short_help="Search your docs, the playbook cards and issue threads.")(search)


def index(
    paths: list[Path] = typer.Argument(..., metavar="PATH", parser=path_param, help="Files or folders of docs (Markdown, reStructuredText, text)."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", parser=path_param, help=INDEX_DIR_HELP + " Created if missing."),
    chroma_url: Optional[str] = typer.Option(None, "--chroma-url", help=CHROMA_URL_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Add documents to the knowledge base (only changed files are re-embedded)."""
    use_chroma_url(chroma_url)
    from rlmedic.knowledge.index import KnowledgeBase
    from rlmedic.ui.clikit import print_json
    from rlmedic.ui.progress import progress_bar

    kb = KnowledgeBase(index_dir)
    with progress_bar("Indexing", enabled=not json_out) as progress:
        report = kb.index([str(p) for p in paths], progress=progress)
    if json_out:
        print_json(report.to_dict())
        return
    for line in report.skipped:
        typer.echo(f"skipped: {line}", err=True)
    for line in report.warnings:
        typer.echo(f"warning: {line}", err=True)
    typer.echo(
        f"{len(report.added)} added, {len(report.updated)} updated, {len(report.unchanged)} unchanged, "
        f"{len(report.removed)} removed, {len(report.skipped)} skipped; "
        f"{report.chunks_embedded} chunks embedded, {report.total_chunks} in the index ({kb.store.directory})"
    )


def search(
    query: str = typer.Argument(..., metavar="QUERY", help="What to look for: words, a config key, an error string."),
    k: int = typer.Option(5, "-k", min=1, max=50, help="How many results."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", parser=path_param, help=INDEX_DIR_HELP),
    kind: Optional[str] = typer.Option(None, "--kind", help="Only 'doc' (indexed docs), 'card' (playbook cards), 'issue' (synced upstream threads), 'known' (known-issue records) or 'commit' (synced git history, rlmedic sync-code)."),
    chroma_url: Optional[str] = typer.Option(None, "--chroma-url", help=CHROMA_URL_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print results as JSON."),
    known_issues: list[Path] = typer.Option([], "--known-issues", metavar="DIR", parser=path_param, help=KNOWN_ISSUES_HELP),
) -> None:
    """Hybrid search (dense + BM25) over the indexed docs, the playbook cards and synced issue threads."""
    use_chroma_url(chroma_url)
    use_known_issues(known_issues)
    from rlmedic.errors import UserError
    from rlmedic.ui.clikit import print_json, run_tool

    if kind not in (None, "doc", "card", "issue", "known", "commit"):
        raise UserError(f"--kind must be 'doc', 'card', 'issue', 'known' or 'commit', not {kind!r}")
    results = run_tool("search_docs", {"query": query, "k": k, "kind": kind}, roots=[],
                       index_dir=existing_index_dir(index_dir, chroma_url) if kind != "commit" else index_dir)
    if json_out:
        print_json({"results": [r.to_dict() for r in results]})
        return
    if not results:
        typer.echo("no results")
    for i, r in enumerate(results, 1):
        typer.secho(f"[{i}] {r.citation_text}  (score {r.score:.4f})", bold=True)
        if r.kind == "issue" and r.info.get("fix"):
            typer.echo(f"    {r.info['fix']}")
        snippet = " ".join(r.text.split())[:300]
        typer.echo(f"    {snippet}\n")
