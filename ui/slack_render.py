"""Block Kit for the Slack bot: progress, the answer, notices. Rendering only.

The answer's parts come from the structured :class:`~rlmedic.agent.events.Answer`
(root cause, evidence, fixes, citations, notices), never from parsing its prose.
Slack's limits are respected (3000 characters a section, 50 blocks); all text is
redacted again by the client that posts it.
"""

from __future__ import annotations

from typing import Any

from rlmedic.redact import redact

SECTION_CHARS = 2900
MAX_FIXES = 4
MAX_SOURCES = 8


def escape(text: str) -> str:
    """Slack mrkdwn escaping: &, <, > are control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int = SECTION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(redact(text))}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(redact(text))}]}


def _local(text: str, folder: str) -> str:
    """Paths inside the thread's private folder shown as the attachment's own name."""
    if folder:
        text = text.replace(folder.rstrip("/") + "/", "")
    return text


def progress_blocks(steps: list[tuple[str, str]], *, title: str = "Looking into it") -> tuple[str, list[dict[str, Any]]]:
    """``steps`` are ``(name, state)``: ``running``, or the step's one-line result
    (:func:`rlmedic.ui.render.step_result`; ``error: ...`` when it failed)."""
    marks = []
    for name, state in steps:
        if state == "running":
            marks.append(f":hourglass_flowing_sand: `{name}`")
        elif state.startswith("error:"):
            marks.append(f":x: `{name}`: {escape(state)}")
        else:
            marks.append(f":white_check_mark: `{name}`: {escape(state)}")
    text = f":mag: {title}…" + ("\n" + "\n".join(marks) if marks else "")
    return text, [_section(text)]


def answer_blocks(answer: Any, *, folder: str = "", diff_attached: bool = False, diff_above: bool = False,
                  skipped: list[str] = (), offline_flag: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """The reply: root cause + evidence, the fix, the diff notice, sources, engine notice."""
    blocks: list[dict[str, Any]] = []
    if answer.engine == "offline":
        why = "; ".join(n.removeprefix("offline: ") for n in answer.notices)
        why = why or ("the bot runs with --offline" if offline_flag else "no model server answered")
        blocks.append(_context(f":warning: Answered by the offline engine (no LLM: {escape(why)}): "
                               "log signatures, playbook cards and docs, without a model's reasoning."))
    if answer.root_cause:
        text = f"*Root cause:* {escape(_local(answer.root_cause, folder))}"
        if answer.evidence:
            text += "\n*Evidence:* " + ", ".join(f"`{escape(_local(e, folder))}`" for e in answer.evidence[:3])
        blocks.append(_section(text))
    elif answer.summary:
        blocks.append(_section(f"*Likely cause:* {escape(_local(answer.summary, folder))}"))
    if answer.fixes:
        fixes = "\n".join(f"{i}. {escape(_local(str(f), folder))}" for i, f in enumerate(answer.fixes[:MAX_FIXES], 1))
        blocks.append(_section(f"*Fix:*\n{fixes}"))
    details = getattr(answer, "details", None) or []
    if details and (answer.root_cause or answer.fixes):  # health, GPU and checkpoint facts, a known issue
        blocks.append(_section(_cut(escape(_local("\n".join(details), folder)), 2900)))
    if not answer.root_cause and not answer.fixes:
        blocks.append(_section(escape(_local(answer.answer, folder)) or "I found nothing to go on."))
    for need in getattr(answer, "needs", None) or []:
        blocks.append(_context(f":paperclip: {escape(need)}"))
    if diff_attached:
        blocks.append(_context(":page_facing_up: The corrected config is attached below as `config.diff`."))
    elif diff_above:
        blocks.append(_context(":page_facing_up: The corrected config is the `config.diff` posted earlier in this thread."))
    if answer.citations:
        refs = []
        for i, c in enumerate(answer.citations[:MAX_SOURCES], 1):
            label = escape(_local(str(c), folder))
            refs.append(f"[{i}] <{c.url}|{label}>" if getattr(c, "url", "") else f"[{i}] {label}")
        blocks.append({"type": "divider"})
        blocks.append(_context("*Sources:* " + "  ".join(refs)))
    for note in skipped:
        blocks.append(_context(f":no_entry_sign: {escape(note)}"))
    fallback = _cut(redact(_local(answer.summary or answer.answer, folder)), 3000)
    return fallback or "rlmedic answered", blocks[:50]


def more_blocks(more: str, *, folder: str = "") -> tuple[str, list[dict[str, Any]]]:
    """The rest of the answer (further fixes, background, related issues) as the thread's second message."""
    text = _cut(escape(_local(more.strip(), folder)), 2900)
    return _cut(redact(_local(more.strip(), folder)), 3000), [_context("*More on this answer*"), _section(text)]


def notice_blocks(text: str) -> tuple[str, list[dict[str, Any]]]:
    return redact(text), [_section(escape(text))]


def answer_chart(answer: Any) -> tuple[bytes, str] | None:
    """The PNG of the curves behind the answer's first finding that has them (a run folder's
    diagnosis), and its caption; None for an answer without curves."""
    from rlmedic.tools.runs.chart import caption, finding_png

    for finding in answer.findings[:3]:
        png = finding_png(finding)
        if png is not None:
            return png, redact(caption(finding))
    return None
