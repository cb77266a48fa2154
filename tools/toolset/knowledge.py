"""The knowledge tool: ``search_docs`` (docs, playbook cards, issue threads, known issues, commits)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from rlmedic.tools.registry import Param, ToolContext, tool
from rlmedic.tools.toolset._common import add_citations
from rlmedic.types import Citation, Evidence


def _render_search(results: list[Any]) -> str:
    if not results:
        return "no results"
    return "\n\n".join(f"[{i}] {r.citation_text}\n{' '.join(r.text.split())[:600]}" for i, r in enumerate(results, 1))


def search_evidence(results: list[Any]) -> Evidence:
    """Search hits: their citations (the top three), nothing else is a claim."""
    citations: list[Citation] = []
    for hit in list(results)[:3]:
        cite = getattr(hit, "citation", None)
        if isinstance(cite, Citation):
            add_citations(citations, [cite])
    return Evidence(subject="knowledge", citations=citations)


def _step_search(data: Any) -> str:
    """``5 result(s)``: the hits are a list (wrapped as ``{"result": [...]}`` where a mapping is needed)."""
    hits = data.get("results", data.get("result")) if isinstance(data, dict) else data
    return f"{len(hits)} result(s)" if isinstance(hits, list) else ""


@tool(render=_render_search, evidence=search_evidence, step=_step_search,
      use="for the documentation, playbook cards and known upstream issues")
def search_docs(
    ctx: ToolContext,
    query: Annotated[str, Param(min_length=1, description="Words, a config key or flag, or an error string.")],
    k: Annotated[int, Param(ge=1, le=20, description="How many results.")] = 5,
    kind: Annotated[Literal["doc", "card", "issue", "known", "commit"] | None,
                    Param(description="Only indexed docs, playbook cards, upstream issue threads, known-issue "
                                      "records (exact bugs with their fix and the release that fixed them), or "
                                      "commits of the frameworks' synced git history (rlmedic sync-code).")] = None,
) -> list[Any]:
    """Search the troubleshooting knowledge: indexed AReaL/slime docs, playbook cards and synced upstream
    issue threads (hybrid dense + BM25).

    Each result carries its citation (a doc section with line range, a card id, or owner/repo#N with its URL).
    """
    if kind == "commit":
        from rlmedic.errors import UserError
        from rlmedic.knowledge.history import History, search

        history = History.open_existing(ctx.index_dir)
        if history is None:
            raise UserError("no code history in the index: run `rlmedic sync-code SOURCE` first")
        with history:
            return search(history, query, k)
    return ctx.knowledge().search(query, k, kind=kind)
