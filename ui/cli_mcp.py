"""``rlmedic mcp``: serve the registry's tools to other agents over MCP (stdio or streamable HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("mcp", short_help="Serve the read-only tools over MCP.")(mcp)


def mcp(
    allow: list[Path] = typer.Option([], "--allow", metavar="PATH", help="A file or folder the tools may read (repeat it); nothing else is readable."),
    http: bool = typer.Option(False, "--http", help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address for --http (loopback by default)."),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="Port for --http."),
    index_dir: Optional[Path] = typer.Option(None, "--index-dir", help="Index directory for search_docs (default: the data dir)."),
) -> None:
    """Serve rlmedic's read-only tools over the Model Context Protocol (stdio by default)."""
    from rlmedic.errors import UserError

    for path in allow:
        if not path.exists():
            raise UserError(f"--allow {path}: no such file or directory")
    from rlmedic.ui.cli_knowledge import existing_index_dir

    existing_index_dir(index_dir)
    roots = [str(p) for p in allow]
    if http:
        from rlmedic.ui.mcp_server import serve_http

        typer.echo(f"rlmedic MCP server on http://{host}:{port}/mcp (read-only; roots: {', '.join(roots) or 'none'})", err=True)
        serve_http(roots, host=host, port=port, index_dir=str(index_dir) if index_dir else None)
    else:
        from rlmedic.ui.mcp_server import serve_stdio

        serve_stdio(roots, index_dir=str(index_dir) if index_dir else None)
