"""Investigate: run the registry's tools on the attachments and on the question itself.

Shared by the offline engine and the LLM loop (its fallback and its "the model looked at
nothing" path): what kind each attachment is (:func:`classify`), the calls those kinds call
for (each tool says which kinds it reads: :meth:`~rlmedic.tools.registry.Registry.plan`),
and log text pasted into the question, which
is diagnosed through the registry too (as a stream the front door vouches for), so every
result passes the same single redaction and comes back as :class:`~rlmedic.types.Evidence`.
A call whose evidence a session already holds is not run again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from rlmedic.agent.events import Event, ToolFinished, ToolStarted
from rlmedic.confine import looks_binary

CONFIG_SUFFIXES = (".yaml", ".yml")
SCRIPT_SUFFIXES = (".sh", ".bash")
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz", ".jsonl")
#: Names that say a folder holds checkpoints (AReaL, slime/Megatron, Hugging Face trainers).
CHECKPOINT_MARKERS = ("latest_checkpointed_iteration", "iter_", "checkpoints", "checkpoint-", "recover_",
                      "epoch", "globalstep", "release")
#: The name the question's own text goes by when it is diagnosed as a log.
QUESTION_STREAM = "<question>"


@dataclass
class Failure:
    """A tool call that raised instead of answering (same fields a registry ToolResult has)."""

    name: str
    ok: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    error: str = ""
    seconds: float = 0.0
    evidence: Any = None


def _env_listing(peek: bytes) -> bool:
    from rlmedic.versions import looks_like_env

    return looks_like_env(peek.decode("utf-8", errors="replace"))


def classify(path: Path, peek: bytes) -> str:
    """``log``, ``config`` (YAML), ``script`` (a launch script), ``snapshot``, ``env`` (pip freeze, pip list,
    conda list, ``rlmedic env --json``: the training environment's versions, recognised by content) or
    ``checkpoints`` for one attachment (:data:`rlmedic.tools.registry.ATTACHMENT_KINDS`)."""
    if path.is_dir():
        from rlmedic.tools.runs.locate import run_kind

        if run_kind(path):  # a W&B run, a wandb/ folder or a TensorBoard log folder: diagnose reads its curves
            return "log"
        names = [p.name for p in list(path.iterdir())[:200] if not p.name.startswith(".")]
        if any(n.startswith(CHECKPOINT_MARKERS) for n in names):
            return "checkpoints"
        # a folder of per-rank logs is a log even with a stray weight or config file beside them
        return "log" if any(n.endswith(LOG_SUFFIXES) for n in names) else "checkpoints"
    name = path.name.lower()
    head = peek.lstrip()[:1]
    if not name.endswith(CONFIG_SUFFIXES + SCRIPT_SUFFIXES) and _env_listing(peek):
        return "env"
    if name.endswith(".json") and head == b"{" and (b'"gpus"' in peek or b'"nvml"' in peek or b'"driver' in peek):
        return "snapshot"
    if name.endswith(CONFIG_SUFFIXES):
        return "config"
    if name.endswith(SCRIPT_SUFFIXES):
        return "script"
    return "log"


def plan_calls(attachments: Sequence[Path], peek: Callable[[Path], bytes]) -> list[tuple[str, dict[str, Any]]]:
    """The deterministic tool calls for these attachments: each classified, then the calls the
    tools that read those kinds make of them (their ``reads``, :meth:`Registry.plan`)."""
    from rlmedic.tools.registry import REGISTRY

    return REGISTRY.plan((classify(path, b"" if path.is_dir() else peek(path)), str(path)) for path in attachments)


def _registry_call() -> Callable[..., Any]:
    from rlmedic.tools.registry import REGISTRY

    return REGISTRY.call


def run_tools(calls: Iterable[tuple[str, dict[str, Any]]], ctx: Any, results: list[Any],
              call: Callable[..., Any] | None = None) -> Iterator[Event]:
    """Run ``calls`` through the registry, emitting started/finished events; append to ``results``."""
    call = call or _registry_call()
    for n, (name, args) in enumerate(calls, 1):
        call_id = f"rlmedic-{len(results) + 1}-{n}"
        yield ToolStarted(id=call_id, name=name, args=args)
        try:
            result = call(name, args, ctx)
        except Exception as exc:  # noqa: BLE001 - a tool bug is one failed step, not a lost answer
            result = Failure(name=name, error=f"the tool failed: {type(exc).__name__}: {exc}")
        results.append(result)
        yield ToolFinished(id=call_id, name=name, ok=result.ok, data=result.data, error=result.error,
                           seconds=result.seconds)


def question_evidence(question: str, ctx: Any) -> Any:
    """Diagnose the question's own text (pasted log lines, a quoted error) through the registry.

    The signature scan is cheap and precise (a finding needs a known error or symptom
    pattern), so prose questions go through it as well; Evidence with findings, or None.
    Always the built-in registry: this is rlmedic reading its own input, not a tool a model picked.
    """
    from rlmedic.tools.logs.scan import Source

    if ctx is None:
        from rlmedic.tools.registry import ToolContext

        ctx = ToolContext.for_roots([], env_roots=False)
    ctx.streams[QUESTION_STREAM] = Source(name=QUESTION_STREAM, data=question.encode("utf-8", errors="replace"))
    try:
        result = _registry_call()("diagnose", {"paths": [QUESTION_STREAM]}, ctx)
    finally:
        ctx.streams.pop(QUESTION_STREAM, None)
    evidence = getattr(result, "evidence", None)
    if not getattr(result, "ok", False) or evidence is None or not evidence.findings:
        return None
    evidence.subject = "question"  # what the user wrote, not a look at the run
    evidence.checked = "the text of the question"
    evidence.healthy = False  # prose is not a run: no findings says nothing about health
    return evidence


def investigate(question: str, *, attachments: Sequence[Path], ctx: Any, results: list[Any],
                call: Callable[..., Any] | None = None, known: Iterable[Any] = ()) -> Iterator[Event]:
    """Run the tools the attachments call for: events, results appended.

    A call whose evidence is in ``known`` (earlier evidence) or ``results`` is skipped, unless
    a file it names changed after that evidence was established (a log that grew meanwhile).
    """
    from rlmedic.tools.registry import call_key

    if not attachments or ctx is None:
        return
    done = {e.call: e.at for e in known if e is not None}
    done.update({r.evidence.call: r.evidence.at for r in results if getattr(r, "evidence", None) is not None})
    peek = lambda p: ctx.confinement.read_bytes(p, max_bytes=4096)  # noqa: E731
    calls = [c for c in plan_calls(attachments, peek)
             if call_key(*c) not in done or _changed_since(c[1], done[call_key(*c)])]
    yield from run_tools(calls, ctx, results, call)


def _changed_since(args: dict[str, Any], at: float) -> bool:
    """Whether a file or folder named in ``args`` was modified after ``at`` (or cannot be stat'ed)."""
    import os

    names = [v for value in args.values() for v in (value if isinstance(value, list) else [value])
             if isinstance(v, str)]
    for name in names:
        try:
            if os.stat(name).st_mtime > at:
                return True
        except OSError:
            return True
    return False


def attachment_texts(attachments: Sequence[Path], ctx: Any, max_bytes: int = 2_000_000) -> list[str]:
    """The text of attached logs, for matching known issues and reading versions: a small log whole, a big
    one as its head (banners, versions) and its tail (where the failure is), ``max_bytes`` in all, read
    through the confinement; unreadable ones are skipped (the tools report them)."""
    out: list[str] = []
    if ctx is None:
        return out
    for path in attachments:
        try:
            if path.is_dir() or classify(path, ctx.confinement.read_bytes(path, max_bytes=4096)) != "log":
                continue
            data = _head_and_tail(ctx, path, max_bytes)
        except Exception:  # noqa: BLE001 - gzip, binary or unreadable: the diagnose tool reports it
            continue
        if not looks_binary(data):
            out.append(data.decode("utf-8", errors="replace"))
    return out


#: Of a big log, this much of its start is read (the rest of the budget goes to its end).
HEAD_BYTES = 256 * 1024


def _head_and_tail(ctx: Any, path: Path, max_bytes: int) -> bytes:
    import os

    with ctx.confinement.open_binary(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= max_bytes:
            return fh.read(max_bytes)
        head = fh.read(min(HEAD_BYTES, max_bytes // 4))
        fh.seek(size - (max_bytes - len(head)))
        tail = fh.read(max_bytes - len(head))
    cut_head = head[: head.rfind(b"\n") + 1] or head  # whole lines on both sides of the gap
    return cut_head + b"...\n" + tail[tail.find(b"\n") + 1:]
