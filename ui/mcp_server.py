"""``rlmedic mcp``: the registry's tools over the Model Context Protocol, read-only and confined.

Other agents (Claude Desktop, IDEs, another team's bot) get the same tools the CLI and
rlmedic's own agent use, with no per-tool glue: the tool list, descriptions and JSON
schemas come from :data:`rlmedic.tools.registry.REGISTRY`, and every call runs through
:meth:`~rlmedic.tools.registry.Registry.call` inside a context whose roots are the ``--allow``
paths given at start-up (a client cannot change them). Results carry the bounded text a
model reads as content and the redacted JSON as structured content.

Built on the low-level server of the official ``mcp`` SDK (2.x; ``mcp>=2.3,<3``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from rlmedic import __version__

def instructions() -> str:
    """What the server tells a client, its tools named from the registry (one line each: what it is for)."""
    from rlmedic.tools.registry import REGISTRY

    return ("rlmedic troubleshoots RL training runs of LLMs (AReaL, slime, verl). Start with `diagnose` on the "
            "run's logs. The tools: " + "; ".join(REGISTRY.guide()) + ". Files are readable only under the folders "
            "the server was started with.")


def build_server(allow: Iterable[str | os.PathLike[str]], *, index_dir: str | None = None,
                 max_text_chars: int = 8000) -> Any:
    """An MCP low-level ``Server`` exposing every registry tool, confined to ``allow``."""
    import anyio
    import mcp_types as types
    from mcp.server import Server

    from rlmedic.tools.registry import REGISTRY, ToolContext

    roots = [str(p) for p in allow]

    def context() -> ToolContext:
        return ToolContext.for_roots(roots, env_roots=False, index_dir=index_dir, max_text_chars=max_text_chars)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tools = [
            types.Tool(name=t.name, description=t.description, input_schema=t.schema,
                       annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False,
                                                         open_world_hint=False))
            for t in REGISTRY.tools()
        ]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        # tools are synchronous (file scans, embeddings): keep the event loop free
        result = await anyio.to_thread.run_sync(lambda: REGISTRY.call(params.name, arguments, context()))
        if not result.ok:
            return types.CallToolResult(content=[types.TextContent(text=result.error)], is_error=True)
        data = result.data if isinstance(result.data, dict) else {"result": result.data}
        return types.CallToolResult(content=[types.TextContent(text=result.text)], structured_content=data)

    return Server("rlmedic", version=__version__, instructions=instructions(),
                  on_list_tools=list_tools, on_call_tool=call_tool)


def serve_stdio(allow: list[str], *, index_dir: str | None = None) -> None:
    """Serve over stdin/stdout until the client closes the pipe."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(allow, index_dir=index_dir)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def serve_http(allow: list[str], *, host: str = "127.0.0.1", port: int = 8765, index_dir: str | None = None) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` (loopback by default)."""
    import uvicorn

    server = build_server(allow, index_dir=index_dir)
    app = server.streamable_http_app(host=host)
    uvicorn.run(app, host=host, port=port, log_level="warning")
