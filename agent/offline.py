"""The offline engine: answers without any LLM, in the same events and Answer as the loop.

It runs the tools that apply to the attachments (``diagnose`` for logs, ``fix_config``
for configs and launch scripts, ``gpu_status`` for GPU snapshots, ``list_checkpoints``
for folders), diagnoses log text pasted into the question, retrieves the best playbook
cards and documentation sections, and composes cause, evidence, fixes and citations.
When there is a log, the category and the fixes come from its root finding (the
evidence), and the cards only add background.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from rlmedic.agent.events import Answer, Event, Final, Notice, TextDelta, ToolFinished, ToolStarted
from rlmedic.agent.grounding import ground
from rlmedic.types import Citation

#: A second card is mentioned when its score is at least this share of the best one.
RELATED_SHARE = 0.8
CONFIG_SUFFIXES = (".yaml", ".yml", ".sh", ".bash")
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz", ".jsonl")
#: Names that say a folder holds checkpoints (AReaL, slime/Megatron, Hugging Face trainers).
CHECKPOINT_MARKERS = ("latest_checkpointed_iteration", "iter_", "checkpoints", "checkpoint-", "recover_",
                      "epoch", "globalstep", "release")


@dataclass
class Result:
    """A tool result the engine made in-process (same fields the registry's ToolResult has)."""

    name: str
    ok: bool
    data: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    error: str = ""
    seconds: float = 0.0


def detect_framework(text: str) -> str:
    """``slime`` for Megatron-style flags, ``areal`` for dotted YAML keys, else ``""``."""
    low = text.lower()
    if "slime" in low or re.search(r"(?<![\w-])--[a-z]+(?:-[a-z]+)+", low) or "megatron" in low:
        return "slime"
    if "areal" in low or re.search(r"\b(actor|rollout|gconfig|saver|recover|cluster)\.[a-z_]+", low):
        return "areal"
    return ""


def classify(path: Path, peek: bytes) -> str:
    """``log``, ``config``, ``snapshot`` or ``checkpoints`` for one attachment."""
    if path.is_dir():
        names = [p.name for p in list(path.iterdir())[:200] if not p.name.startswith(".")]
        if any(n.startswith(CHECKPOINT_MARKERS) for n in names):
            return "checkpoints"
        # a folder of per-rank logs is a log even with a stray weight or config file beside them
        return "log" if any(n.endswith(LOG_SUFFIXES) for n in names) else "checkpoints"
    name = path.name.lower()
    head = peek.lstrip()[:1]
    if name.endswith(".json") and head == b"{" and (b'"gpus"' in peek or b'"nvml"' in peek or b'"driver' in peek):
        return "snapshot"
    if name.endswith(CONFIG_SUFFIXES):
        return "config"
    return "log"


def plan_calls(attachments: Sequence[Path], peek: Callable[[Path], bytes]) -> list[tuple[str, dict[str, Any]]]:
    """The deterministic tool calls for these attachments (the offline engine and the loop's fallback)."""
    kinds: dict[str, list[str]] = {"log": [], "config": [], "snapshot": [], "checkpoints": []}
    for path in attachments:
        kinds[classify(path, b"" if path.is_dir() else peek(path))].append(str(path))
    calls: list[tuple[str, dict[str, Any]]] = []
    if kinds["log"]:
        calls.append(("diagnose", {"paths": kinds["log"]}))
    snapshot = kinds["snapshot"][0] if kinds["snapshot"] else None
    for snap in kinds["snapshot"]:
        calls.append(("gpu_status", {"snapshot": snap}))
    for config in kinds["config"]:
        args: dict[str, Any] = {"config": config, "logs": kinds["log"]}
        if snapshot:
            args["snapshot"] = snapshot
        calls.append(("fix_config", args))
    for root in kinds["checkpoints"]:
        calls.append(("list_checkpoints", {"root": root}))
    return calls


def run_tools(calls: Iterable[tuple[str, dict[str, Any]]], ctx: Any, results: list[Any],
              call: Callable[..., Any] | None = None) -> Iterator[Event]:
    """Run ``calls`` through the registry, emitting started/finished events; append to ``results``."""
    if call is None:
        from rlmedic.registry import REGISTRY

        call = REGISTRY.call
    for n, (name, args) in enumerate(calls, 1):
        call_id = f"offline-{len(results) + 1}-{n}"
        yield ToolStarted(id=call_id, name=name, args=args)
        try:
            result = call(name, args, ctx)
        except Exception as exc:  # noqa: BLE001 - a tool bug is one failed step, not a lost answer
            result = Result(name=name, ok=False, error=f"the tool failed: {type(exc).__name__}: {exc}")
        results.append(result)
        yield ToolFinished(id=call_id, name=name, ok=result.ok, data=result.data, error=result.error,
                           seconds=result.seconds)


def pasted_log_result(question: str) -> Result | None:
    """Diagnose the question's own text: pasted log lines and quoted errors are evidence too.

    The signature scan is cheap and precise (a finding needs a known error or symptom
    pattern), so prose questions go through it as well; no finding -> None.
    """
    from rlmedic.confine import redact_value
    from rlmedic.tools.logs.diagnose import diagnose_text  # lazy: only for pasted logs

    diagnosis = diagnose_text(question, name="<question>")
    if not diagnosis.findings:
        return None
    return Result(name="diagnose", ok=True, data=redact_value(diagnosis.to_dict()))


def run_offline(question: str, *, attachments: Sequence[Path] = (), ctx: Any = None, kb: Any = None,
                notices: Sequence[str] = (), results: list[Any] | None = None,
                call: Callable[..., Any] | None = None) -> Iterator[Event]:
    """The offline engine as an event stream; ``results`` are tool results already made (reused)."""
    for text in notices:
        yield Notice(text)
    results = list(results or [])
    done = {r.name for r in results if r.ok}
    if attachments and ctx is not None:
        calls = [c for c in plan_calls(attachments, lambda p: ctx.confinement.read_bytes(p, max_bytes=4096))
                 if c[0] not in done]
        yield from run_tools(calls, ctx, results, call)
    pasted = pasted_log_result(question)
    if pasted is not None:
        results.insert(0, pasted)
    if kb is None and ctx is not None:
        kb = ctx.knowledge()
    answer = compose(question, results, kb, texts=attachment_texts(attachments, ctx))
    answer.notices = list(notices)
    answer.tool_calls = [{"name": r.name, "ok": r.ok} for r in results if not isinstance(r, Result)]
    yield TextDelta(answer.answer)
    yield Final(answer)


def _cards(question: str, answer: Answer, kb: Any, k: int = 3) -> list[tuple[Any, float]]:
    """The root finding's card when a log gave one (no retrieval: fast and evidence-led), else a search."""
    from rlmedic.knowledge.cards import card_by_id

    root_card = card_by_id(answer.cards[0]) if answer.cards else None
    if root_card:
        return [(root_card, 1.0)]
    cards: list[tuple[Any, float]] = []
    for hit in (kb.search(question, k, kind="card") if kb is not None else []):
        card = card_by_id(hit.card_id)
        if card:
            cards.append((card, hit.score))
    return cards


def known_matches(question: str, texts: Sequence[str], kb: Any) -> list[Any]:
    """Known-issue records (and synced threads, as records) matching the logs and the question, best first."""
    from rlmedic.knowledge.known import match

    return match(list(texts), question=question, kb=kb, k=3)


def attachment_texts(attachments: Sequence[Path], ctx: Any, max_bytes: int = 2_000_000) -> list[str]:
    """The text of attached logs (the first ``max_bytes`` of each), for known-issue matching; unreadable ones skipped."""
    out: list[str] = []
    if ctx is None:
        return out
    for path in attachments:
        try:
            if path.is_dir() or classify(path, ctx.confinement.read_bytes(path, max_bytes=4096)) != "log":
                continue
            out.append(ctx.confinement.read_text(path, max_bytes=max_bytes))
        except Exception:  # noqa: BLE001 - gzip, binary or unreadable: the diagnose tool reports it
            continue
    return out


def compose(question: str, results: list[Any], kb: Any, *, texts: Sequence[str] = ()) -> Answer:
    """Ground an answer in ``results`` and the knowledge base; write its text.

    ``texts`` are the attached logs' text: a known issue whose error string is in them (or in the
    question) leads the answer with its cause, fix and the release that fixed it.
    """
    from rlmedic.knowledge.known import known_lines, leading
    from rlmedic.knowledge.retrieve import key_sentences

    answer = Answer(answer="", engine="offline")
    known = known_matches(question, texts, kb)
    first = leading(known)[:1]
    if first:  # this exact bug is known: it is cited first, its cause and fix lead
        answer.cite(first[0].citation)
    # An attached log decides the answer; otherwise the user's own documents that match the question
    # better than any card (one ranking) lead it and are cited first.
    attached_log = any(getattr(r, "name", "") == "diagnose" and not isinstance(r, Result) for r in results)
    lead = [] if attached_log else _leading_documents(question, kb)
    for doc in lead:
        answer.cite(doc.citation)
    answer = ground(answer, results)
    framework = detect_framework(question)
    cards = _cards(question, answer, kb)
    answer.cards = [c.id for c, _ in cards]
    lines: list[str] = []
    if first:  # the log's evidence and the cards follow
        lines += known_lines(known, answer.cite)
        shown = {str(f) for f in first[0].fixes}
        answer.fixes = list(first[0].fixes) + [f for f in answer.fixes if str(f) not in shown]
        if first[0].how in ("exact", "regex"):
            answer.category = first[0].record.category
    for doc in lead:
        where = doc.source + (f" § {doc.section}" if doc.section else "")
        lines.append(f"From your documents ({where}) [{answer.cite(doc.citation)}]: {key_sentences(doc, question)}")
    if answer.root_cause:
        where = f" [{answer.cite(_log_citation(answer.evidence[0]))}]" if answer.evidence else ""
        lines.append(f"From the log: {answer.root_cause}{where}.")
    card_fix_texts: set[str] = set()
    if cards:
        best, best_score = cards[0]
        answer.category = answer.category or best.category
        lines.append(f"Likely cause{' (playbook)' if lead else ''}: {best.title} [{answer.cite(best.citation)}].")
        lines.append("Why it happens: " + " ".join(c.rstrip(".") + "." for c in best.causes[:2]))
        card_fixes = [f for f in best.fixes if not framework or not f.framework or f.framework == framework] or list(best.fixes)
        shown = {str(f) for f in answer.fixes}
        answer.fixes += [f for f in card_fixes if str(f) not in shown]
        card_fix_texts = {str(f) for f in best.fixes}
        tags = {str(fix): fix.framework for fix in best.fixes}
    else:
        tags = {}
        if not answer.root_cause:
            lines.append("No playbook card matches this question closely, and no log evidence was given.")
    if answer.fixes:
        lines.append("What to change (most effective first):")
        for i, fix in enumerate(answer.fixes[:6], 1):
            text = str(fix)
            tag = f" [{tags[text]}]" if tags.get(text) and not framework else ""
            # say where each fix comes from: its own citation, else the card it was taken from
            ref = f" [{answer.cite(fix.citation)}]" if fix.citation else ""
            if not ref and text in card_fix_texts:
                ref = f" [{answer.cite(cards[0][0].citation)}]"
            why = f": {fix.why.rstrip('.')}" if fix.why and fix.key and fix.why not in text else ""
            lines.append(f"  {i}. {text}{why}{tag}{ref}")
    if answer.config_diff:
        lines += ["Corrected config (diff):", answer.config_diff.rstrip()]
    for card, score in cards[1:3]:
        if score >= RELATED_SHARE * cards[0][1]:
            lines.append(f"Also check: {card.title} [{answer.cite(card.citation)}].")
    retrieve = kb is not None and not answer.root_cause and kb.has_documents()
    docs = [d for d in (kb.search(question, 3, kind="doc") if retrieve else []) if d.id not in {x.id for x in lead}]
    if docs:
        lines.append("Documentation: " + ", ".join(f"[{answer.cite(d.citation)}]" for d in docs) + ".")
    if known and not first:
        lines += known_lines(known, answer.cite)
    if answer.citations:
        lines += ["", "Sources:"] + [f"  [{i}] {c}" + (f" <{c.url}>" if c.url else "") for i, c in enumerate(answer.citations, 1)]
    answer.summary = (f"Known issue {first[0].record.source}: {first[0].record.title}" if first else
                      answer.root_cause or (cards[0][0].title if cards else ""))
    answer.answer = "\n".join(lines)
    return answer


def _leading_documents(question: str, kb: Any) -> list[Any]:
    """The user's indexed documents ranked above every card for this question (one scale)."""
    from rlmedic.knowledge.retrieve import leading_documents

    if kb is None or not kb.has_documents():
        return []
    return leading_documents(kb.search(question, 6))


def _log_citation(evidence: str) -> Citation:
    ref, _, line = evidence.rpartition(":")
    return Citation(kind="log", ref=ref, lines=(int(line), int(line))) if line.isdigit() else Citation(kind="log", ref=evidence)


def answer_offline(question: str, kb: Any = None, *, attachments: Sequence[Path] = (), ctx: Any = None,
                   notices: Sequence[str] = ()) -> Answer:
    """The offline answer, events drained (for callers that want only the result)."""
    from rlmedic.agent.events import final_answer

    return final_answer(run_offline(question, attachments=attachments, ctx=ctx, kb=kb, notices=notices))
