"""The built-in tools, each defined once: what the CLI, the agent, MCP, the web app and Slack call.

Every function here is a thin typed entry point over a tool group (``logs``, ``gpu``,
``checkpoints``, ``config``, the knowledge base). It reads only through
``ctx.confinement`` (the roots the front door set), never writes, and returns a result
object; :mod:`rlmedic.tools.registry` validates the arguments, redacts the result and renders
the bounded text a model sees with the ``render`` function named at registration.

Add a tool: write a function ``name(ctx: ToolContext, ...) -> result`` with typed
parameters and a docstring (its first paragraph is what a model reads first), decorate it
with ``@tool`` (and ``render=`` for a compact text form). Nothing else to wire: the CLI,
the agent and ``rlmedic mcp`` pick it up from the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from rlmedic.tools import evidence as ev
from rlmedic.tools.registry import ToolContext, tool

Paths = Annotated[list[str], Field(min_length=1, description="Log files or folders of per-rank logs (gzip is fine).")]


def _cite(c: Any) -> str:
    return f" [{c}]" if c else ""


def _first(items: list[Any], n: int) -> list[Any]:
    return list(items)[:n]


# ---------------------------------------------------------------------- logs


def _render_diagnosis(d: Any) -> str:
    stats = d.stats
    lines = [f"scanned {stats.get('files', 0)} file(s), {stats.get('lines', 0)} lines"
             + (f"; last training step {stats['last_step']}" if stats.get("last_step") is not None else "")]
    if stats.get("truncated"):
        lines.append("NOTE: the scan stopped at the byte cap; later lines were not read")
    root = d.root_finding
    if root is None:
        serious = [f for f in d.findings if f.severity in ("critical", "error")]
        lines.append("no error found" if not serious else "no single root cause; findings below")
    else:
        where = f"{root.file}:{root.line}" if root.line else root.file
        lines.append(f"ROOT CAUSE [{root.severity}] {root.id} ({root.category}) at {where}: {root.summary}")
        excerpt = str(root.evidence.get("excerpt") or "")
        if excerpt:
            lines.append("evidence:\n" + excerpt)
        for i, fix in enumerate(_first(root.fixes, 4), 1):
            lines.append(f"fix {i}: {fix}")
        if root.citations:
            lines.append("sources: " + "; ".join(str(c) for c in root.citations))
        cascades = [f for f in d.findings if f.root == d.root and f is not root]
        if cascades:
            lines.append(f"{len(cascades)} cascade finding(s) caused by the root, e.g. " +
                         "; ".join(f"{f.id} at {f.file}:{f.line}" for f in cascades[:3]))
    others = [f for f in d.findings if f is not root and f.root is None]
    for f in others[:6]:
        lines.append(f"other [{f.severity}] {f.id} ({f.category}) at {f.file}:{f.line}: {f.summary}"
                     + (f" | fix: {f.fixes[0]}" if f.fixes else ""))
    return "\n".join(lines)


def _catalog(zero_reward_steps: int | None) -> Any:
    """The shipped catalog, or a copy whose zero-reward streak needs ``zero_reward_steps`` steps."""
    if zero_reward_steps is None:
        return None
    import copy
    import dataclasses

    from rlmedic.tools.logs.signatures import builtin_catalog

    base = builtin_catalog()
    metrics = copy.deepcopy(base.metrics)
    metrics.setdefault("rules", {}).setdefault("zero_reward", {})["min_steps"] = int(zero_reward_steps)
    return dataclasses.replace(base, metrics=metrics)


@tool(render=_render_diagnosis, cache_paths="paths", evidence=ev.diagnosis_evidence)
def diagnose(ctx: ToolContext, paths: Paths,
             zero_reward_steps: Annotated[int | None, Field(ge=1, le=100_000, description=(
                 "Steps in a row with zero reward that make the zero-reward streak (default: 10)."))] = None) -> Any:
    """Find the root cause of a failed AReaL/slime training run in its logs.

    Scans log files or folders of per-rank logs for failure signatures (CUDA OOM by phase,
    SGLang crashes, NCCL timeouts, NaN loss, zero rewards, recovery errors...) and metric
    trouble. Returns the root cause with its file:line and excerpt, the cascades it
    caused, the fixes (most effective first) and citations.
    """
    from rlmedic.tools.logs.diagnose import diagnose as run

    files, streams = ctx.split_streams(paths)
    d = run(files, confinement=ctx.confinement, streams=streams, catalog=_catalog(zero_reward_steps))
    _add_upstream(d, ctx)
    return d


def _add_upstream(d: Any, ctx: ToolContext) -> None:
    """The commits of a synced framework history (``rlmedic sync-code``) that match the root traceback,
    and the versions the logs show, into the diagnosis's stats (nothing without an index or a traceback)."""
    from rlmedic.tools.upstream import for_diagnosis

    fixes, versions = for_diagnosis(d, ctx.index_dir)
    if versions:
        d.stats["versions"] = versions
    if fixes:
        d.stats["upstream_fixes"] = [f.to_dict() for f in fixes]


@tool
def excerpt(ctx: ToolContext, paths: Paths,
            max_lines: Annotated[int, Field(ge=10, le=1000, description="Line budget of the excerpt.")] = 120) -> str:
    """The most relevant lines of training logs: around the root error, repeats collapsed, redacted.

    Use it to read the log itself after `diagnose` (what happened just before the error).
    """
    from rlmedic.tools.logs.excerpt import build_excerpt

    files, streams = ctx.split_streams(paths)
    return build_excerpt(files, max_lines=max_lines, confinement=ctx.confinement, streams=streams)


# ---------------------------------------------------------------------- GPU


@dataclass
class GpuReport:
    """A snapshot (live NVML or a saved file) and the advice drawn from it."""

    snapshot: Any
    advice: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = self.snapshot.to_dict()
        data["advice"] = [a.to_dict() for a in self.advice]
        return data


def _render_gpu(report: GpuReport) -> str:
    snap = report.snapshot
    if not snap.has_gpus:
        return f"no GPU visible ({snap.source}): {snap.message or snap.status}"
    lines = [f"{snap.hostname or 'host'} ({snap.source}): driver {snap.driver_version or '?'}, {len(snap.gpus)} GPU(s)"]
    for g in snap.gpus:
        lines.append(f"[{g.index}] {g.name} used {g.memory_used / 2**30:.1f}/{g.memory_total / 2**30:.1f} GiB, "
                     f"util {g.utilization_gpu}%, {len(g.processes)} process(es)"
                     + "".join(f"; pid {p.pid} {p.role} {(p.used_gpu_memory or 0) / 2**30:.1f} GiB"
                               + (" LEFTOVER" if p.leftover else "") for p in g.processes[:4]))
    for a in report.advice:
        lines.append(f"{a.severity}: {a.message}" + (f" | do: {a.fixes[0]}" if a.fixes else "")
                     + _cite(getattr(a, "citation", None)))
    return "\n".join(lines)


@tool(render=_render_gpu, evidence=ev.gpu_evidence)
def gpu_status(ctx: ToolContext,
               snapshot: Annotated[str | None, Field(description="A GPU snapshot JSON saved with `rlmedic gpu --save`; "
                                                     "omit to read the live GPUs through NVML.")] = None) -> GpuReport:
    """GPU state: memory per GPU and per process, utilisation, ECC, clocks, leftovers from dead runs.

    Reads the live GPUs through NVML (a machine without GPUs or driver says so), or a
    snapshot file. Adds advice: leftover processes holding memory, attention backend for
    the architecture, memory-optimised settings for GPUs under 80 GB.
    """
    from rlmedic.tools.gpu.advice import gpu_advice
    from rlmedic.tools.gpu.snapshot import gpu_snapshot, load_snapshot

    snap = load_snapshot(snapshot, confinement=ctx.confinement) if snapshot else gpu_snapshot()
    return GpuReport(snap, list(gpu_advice(snap)))


# ---------------------------------------------------------------------- checkpoints


def _render_checkpoints(report: Any) -> str:
    lines = [f"{report.root}: {report.layout} layout, {report.total} checkpoint(s)"]
    for c in report.selected()[-8:]:
        status = "ok" if c.valid else ("unread" if c.unreadable else "unchecked" if not c.checked
                                       else "DAMAGED: " + "; ".join(c.issues[:2]))
        lines.append(f"step {c.step} {c.kind} {status} {c.path}")
    for i in report.issues[:6]:
        lines.append(f"{i.severity}: {getattr(i, 'message', None) or getattr(i, 'summary', '')}")
    plan = report.plan
    if plan is not None:
        lines.append(f"recovery plan ({plan.framework}, {plan.mode}): {plan.command}")
        lines += [f"- {n}" for n in plan.notes[:6]]
        lines += [f"DIFFERS: {d}" for d in plan.differences[:6]]
    return "\n".join(lines)


@tool(render=_render_checkpoints, evidence=ev.checkpoint_evidence)
def list_checkpoints(
    ctx: ToolContext,
    root: Annotated[str, Field(description="A fileroot or its checkpoints/ folder, a slime --save folder, or HF save folders.")],
    experiment_name: Annotated[str | None, Field(description="Only this AReaL experiment.")] = None,
    trial_name: Annotated[str | None, Field(description="Only this AReaL trial.")] = None,
    before_step: Annotated[int | None, Field(ge=0, description="Only checkpoints before this global step.")] = None,
    config: Annotated[str | None, Field(description="The config the run will resume with: the plan lists what differs.")] = None,
) -> Any:
    """Checkpoints that exist (AReaL, slime/Megatron, Hugging Face): steps, times, sizes, integrity, and how to resume.

    Ends with the exact recovery plan (AReaL recover.mode=auto or a restart from saved
    weights; slime --load/--ckpt-step).
    """
    from rlmedic.tools.checkpoints.listing import list_checkpoints as scan
    from rlmedic.tools.checkpoints.listing import recovery_plan

    parsed = None
    if config:  # first: a config that cannot be read (or a YAML bomb) is refused before a long scan
        from rlmedic.tools.config.fix import load_config

        _framework, parsed = load_config(config, confinement=ctx.confinement)
    report = scan(root, experiment_name=experiment_name, trial_name=trial_name, before_step=before_step,
                  confinement=ctx.confinement)
    recovery_plan(report, config=parsed)
    return report


# ---------------------------------------------------------------------- configs


def _problem_line(p: Any) -> str:
    where = f":{p.line}" if getattr(p, "line", None) else ""
    message = getattr(p, "message", None) or getattr(p, "summary", "")
    return f"{p.severity}{where} {p.key}: {message}" + _cite(getattr(p, "citation", None))


def _render_lint(result: Any) -> str:
    if not result.problems:
        return f"{result.path} ({result.framework}): no problems found"
    return "\n".join([f"{result.path} ({result.framework}): {len(result.problems)} problem(s)"]
                     + [_problem_line(p) for p in result.problems[:15]])


def _load_snapshot(ctx: ToolContext, snapshot: str | None) -> Any:
    if not snapshot:
        return None
    from rlmedic.tools.gpu.snapshot import load_snapshot

    return load_snapshot(snapshot, confinement=ctx.confinement)


Snapshot = Annotated[str | None, Field(description="A GPU snapshot (rlmedic gpu --save) for the hardware checks.")]
Spot = Annotated[bool, Field(description="The run uses spot/preemptible machines: recovery settings become errors.")]


@tool(render=_render_lint, evidence=ev.lint_evidence)
def lint_config(ctx: ToolContext,
                config: Annotated[str, Field(description="An AReaL YAML config, or a slime launch script / argument file.")],
                snapshot: Snapshot = None, spot: Spot = False) -> Any:
    """Check an AReaL YAML config or slime launch script: schema, "did you mean", constraint rules. Changes nothing."""
    from rlmedic.tools.config.fix import lint_config as run

    return run(config, snapshot=_load_snapshot(ctx, snapshot), spot=spot, confinement=ctx.confinement)


def _render_fix(result: Any) -> str:
    lines = []
    if result.phases:
        lines.append(f"failure phase(s) from the logs: {', '.join(result.phases)}")
    lines.append(f"{len(result.changes)} change(s) to {result.path}" if result.changes else f"{result.path}: no automatic change")
    for c in result.changes:
        reason = getattr(c, "reason", None) or getattr(c, "why", "")
        lines.append(f"- {c.key}: {c.old!r} -> {c.new!r} ({reason}){_cite(getattr(c, 'citation', None))}")
    for a in result.actions:
        lines.append(f"- do: {getattr(a, 'reason', None) or getattr(a, 'why', '')}")
    left = [p for p in result.remaining if p.severity in ("critical", "error", "warning")]
    lines += ["still: " + _problem_line(p) for p in left[:8]]
    if result.diff:
        lines.append(result.diff.rstrip("\n"))
    return "\n".join(lines)


@tool(render=_render_fix, evidence=ev.fix_evidence)
def fix_config(
    ctx: ToolContext,
    config: Annotated[str, Field(description="An AReaL YAML config, or a slime launch script / argument file.")],
    logs: Annotated[list[str], Field(description="Training logs: the failure phase picks the remedies.")] = [],  # noqa: B006
    snapshot: Snapshot = None,
    spot: Spot = False,
    fileroot: Annotated[str, Field(description="Persistent path for a relative or /tmp fileroot/--save.")] = "",
) -> Any:
    """The corrected config: the smallest set of changes, each with old and new value, reason and citation, and a diff.

    Uses the logs' failure phase (OOM in generation, training or weight update...) and
    the GPU snapshot to pick remedies. Returns the corrected text; it never writes a file.
    """
    from rlmedic.tools.config.fix import fix_config as run

    return run(config, log_paths=logs, snapshot=_load_snapshot(ctx, snapshot), spot=spot, fileroot=fileroot,
               confinement=ctx.confinement)


# ---------------------------------------------------------------------- knowledge


def _render_search(results: list[Any]) -> str:
    if not results:
        return "no results"
    return "\n\n".join(f"[{i}] {r.citation_text}\n{' '.join(r.text.split())[:600]}" for i, r in enumerate(results, 1))


@tool(render=_render_search, evidence=ev.search_evidence)
def search_docs(
    ctx: ToolContext,
    query: Annotated[str, Field(min_length=1, description="Words, a config key or flag, or an error string.")],
    k: Annotated[int, Field(ge=1, le=20, description="How many results.")] = 5,
    kind: Annotated[Literal["doc", "card", "issue", "known", "commit"] | None,
                    Field(description="Only indexed docs, playbook cards, upstream issue threads, known-issue "
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


# ---------------------------------------------------------------------- versions and upstream fixes


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


@tool(render=_render_env, cache_paths="path", evidence=ev.env_evidence)
def read_env(ctx: ToolContext,
             path: Annotated[str, Field(min_length=1, description="A pip freeze, pip list (text or JSON), conda list "
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


@tool(render=_render_upstream, evidence=ev.upstream_evidence)
def upstream_fixes(
    ctx: ToolContext,
    traceback: Annotated[str, Field(min_length=1, description="The traceback as printed: its File lines and the final exception line.")],
    versions: Annotated[dict[str, str] | None, Field(description="The user's versions, e.g. {\"verl\": \"0.7.0\"} (read from the text when absent).")] = None,
    repo: Annotated[str | None, Field(description="Only this synced repository (OWNER/REPO).")] = None,
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


@tool(render=_render_code, evidence=ev.code_evidence)
def quote_code(
    ctx: ToolContext,
    source: Annotated[str, Field(min_length=1, description="The framework's source: a clone, or the training "
                                                           "environment's site-packages folder.")],
    traceback: Annotated[str, Field(min_length=1, description="The traceback as printed (its File lines).")],
) -> list[Any]:
    """Quote the failing functions of a traceback from the user's copy of the framework's source.

    For the frames nearest the exception that resolve under ``source``: the lines from the function's def
    to a few past the failing line (bounded, read-only).
    """
    from rlmedic.tools.code_context import frames_in, quote_frames

    return quote_frames(frames_in(traceback), source, ctx.confinement)
