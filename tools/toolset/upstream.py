"""The version and upstream tools: ``read_env`` (the training environment's versions), ``upstream_fixes``
(the commits that likely fixed a traceback) and ``quote_code`` (the failing functions from the user's source)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from rlmedic.tools.registry import Param, ToolContext, tool
from rlmedic.tools.toolset._common import upstream_fixes_of
from rlmedic.types import Evidence


@dataclass
class EnvListing:
    path: str
    kind: str
    versions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "versions": self.versions}


def _render_env(listing: EnvListing) -> str:
    from rlmedic.tools.envinfo import PACKAGES

    shown = [name for name, _ in PACKAGES if name in listing.versions]
    return (f"{listing.kind} listing of {len(listing.versions)} packages: "
            + ", ".join(f"{n} {listing.versions[n]}" for n in shown))


def env_evidence(listing: Any) -> Evidence:
    """The training environment's listing: its versions (they decide whether a fix is already in)."""
    versions = dict(getattr(listing, "versions", {}) or {})
    return Evidence(subject="env", versions=versions,
                    checked=f"{len(versions)} package versions from {getattr(listing, 'path', '')} ({getattr(listing, 'kind', '')})")


def _step_env(data: Any) -> str:
    return f"{len(data.get('versions') or {})} package version(s) ({data.get('kind')})" if isinstance(data, dict) else ""


@tool(render=_render_env, cache_paths="path", evidence=env_evidence, step=_step_env, reads={"path": "env"},
      use="for a pip/conda listing of the training environment (its versions)")
def read_env(ctx: ToolContext,
             path: Annotated[str, Param(min_length=1, description="A pip freeze, pip list (text or JSON), conda list "
                                                                  "or `rlmedic env --json` file.")]) -> EnvListing:
    """Read the training environment's package versions from a listing of it.

    Versions decide whether an upstream fix or a known issue's fix is already in the user's release.
    """
    from rlmedic.tools.envinfo import versions_of_file

    kind, versions = versions_of_file(path, ctx.confinement)
    return EnvListing(path=path, kind=kind, versions=versions)


@dataclass
class UpstreamResult:
    fixes: list[Any] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    checked: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"upstream_fixes": [f.to_dict() for f in self.fixes], "versions": self.versions, "checked": self.checked}


def _render_upstream(result: UpstreamResult) -> str:
    if not result.fixes:
        return f"no matching upstream commit ({result.checked})"
    lines = []
    for f in result.fixes:
        rel = f"in {f.release}" if f.release else "not released yet"
        yours = {"in_yours": f"already in your {f.package} {f.yours}", "after_yours": f"after your {f.package} {f.yours}",
                 "unknown": "your version unknown"}[f.status]
        lines.append(f"{f.ref} {f.subject!r} ({f.date}, {rel}; {yours}) matched {f.matched} score {f.score:.2f}")
    return "\n".join(lines)


def upstream_evidence(result: Any) -> Evidence:
    """Commits that likely fixed a traceback, with the versions they were judged against."""
    fixes = upstream_fixes_of(getattr(result, "fixes", ()))
    return Evidence(subject="upstream", versions=dict(getattr(result, "versions", {}) or {}), upstream_fixes=fixes,
                    citations=[f.citation for f in fixes[:3]], checked=getattr(result, "checked", ""))


@tool(render=_render_upstream, evidence=upstream_evidence,
      use="for a traceback that may be an upstream bug fixed in the framework's git history")
def upstream_fixes(
    ctx: ToolContext,
    traceback: Annotated[str, Param(min_length=1, description="The traceback as printed: its File lines and the final exception line.")],
    versions: Annotated[dict[str, str] | None, Param(description="The user's versions, e.g. {\"verl\": \"0.7.0\"} (read from the text when absent).")] = None,
    repo: Annotated[str | None, Param(description="Only this synced repository (OWNER/REPO).")] = None,
) -> UpstreamResult:
    """Find the commits in a framework's synced git history (rlmedic sync-code) that likely fixed this traceback.

    Matches the failing functions and files, fix-like commit messages and the error's words; each result
    names the PR, its date, the first release that contains it and whether that is after the user's version.
    """
    from rlmedic.tools.upstream import for_traceback

    fixes, found, query = for_traceback(traceback, ctx.index_dir, versions, [repo] if repo else None)
    checked = "no traceback in the text" if query is None else (
        f"{query.exception or 'the error'} with {len(query.frames)} frame(s) against the synced history")
    return UpstreamResult(fixes=fixes, versions=found, checked=checked)


def _render_code(quotes: list[Any]) -> str:
    return "\n\n".join(str(q) for q in quotes) if quotes else "no frame of the traceback resolves under the source"


def code_evidence(quotes: Any) -> Evidence:
    """The failing functions quoted from the user's source: one fact per quote, its code included."""
    facts = [str(q) for q in quotes or ()]
    return Evidence(subject="code", facts=facts,
                    checked=f"{len(facts)} failing function(s) quoted from the source" if facts else "")


@tool(render=_render_code, evidence=code_evidence, use="to quote the failing functions of a traceback from the user's source")
def quote_code(
    ctx: ToolContext,
    source: Annotated[str, Param(min_length=1, description="The framework's source: a clone, or the training "
                                                           "environment's site-packages folder.")],
    traceback: Annotated[str, Param(min_length=1, description="The traceback as printed (its File lines).")],
) -> list[Any]:
    """Quote the failing functions of a traceback from the user's copy of the framework's source.

    For the frames nearest the exception that resolve under ``source``: the lines from the function's def
    to a few past the failing line (bounded, read-only).
    """
    from rlmedic.tools.code_context import frames_in, quote_frames

    return quote_frames(frames_in(traceback), source, ctx.confinement)
