"""Renderers of the agent's events and answers for people: Markdown (web, /save) and the terminal.

They take the structured :class:`~rlmedic.agent.events.Answer` and events; they never
parse prose. Tool steps get one compact line each: name, key arguments, outcome (the tool's
own ``step`` line, declared with the tool), time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: Tool arguments worth showing in a step line (paths shortened to their names).
_KEY_ARGS = ("paths", "config", "logs", "root", "snapshot", "query", "kind", "before_step")


def step_args(args: dict[str, Any]) -> str:
    """``paths=train.log config=c.yaml``: the arguments a person recognises, short."""
    shown = []
    for key in _KEY_ARGS:
        value = args.get(key)
        if value in (None, "", [], False):
            continue
        if isinstance(value, list):
            value = ",".join(Path(str(v)).name or str(v) for v in value[:4]) + ("..." if len(value) > 4 else "")
        elif key in ("config", "root", "snapshot"):
            value = Path(str(value)).name or str(value)
        text = str(value)
        shown.append(f"{key}={text[:60]}")
    return " ".join(shown)


def step_result(name: str, ok: bool, data: Any, error: str) -> str:
    """One line saying what a tool found (or why it failed): the tool's own ``step`` line."""
    if not ok:
        return f"error: {error}"
    from rlmedic.tools.registry import REGISTRY

    tool = REGISTRY.get(name)
    return tool.step_line(data) if tool is not None else "done"


def citation_link(citation: Any) -> str:
    """Markdown for one citation: a link when it has a URL, the plain text otherwise."""
    text = str(citation)
    url = getattr(citation, "url", "") or ""
    return f"[{text}]({url})" if url else text


#: Code in Markdown (fenced blocks, inline spans): shown as written, never rendered.
_CODE = re.compile(r"(```.*?(?:```|\Z)|`[^`\n]*`)", re.S)
_IMAGE = re.compile(r"!\[([^\]\n]*)\]")
_TAG = re.compile(r"<(?=[A-Za-z!/?])")


def model_markdown(text: str) -> str:
    """Text a model (or a model server) wrote, as Markdown that loads nothing when rendered.

    An image (``![alt](https://...)``, ``![alt][ref]``) becomes a plain link, and HTML
    (``<img src=...>``, ``<iframe>``, ``<video poster=...>``) is shown as text: rendering
    the answer never makes the user's browser fetch an outside address. Code is left as is.
    """
    parts = _CODE.split(text)
    for i in range(0, len(parts), 2):  # the even parts are outside code
        parts[i] = _TAG.sub("&lt;", _IMAGE.sub(r"[image: \1]", parts[i]))
    return "".join(parts)


def answer_markdown(answer: Any) -> str:
    """The answer as Markdown: its text, the config diff fenced, sources numbered (links where known).

    A model's text goes through :func:`model_markdown` (no remote images, no HTML)."""
    text = (model_markdown(answer.answer) if answer.engine == "llm" else answer.answer).rstrip()
    diff = (answer.config_diff or "").strip("\n")
    if diff and diff in text:
        text = text.replace(diff, f"\n```diff\n{diff}\n```\n")
    elif diff:
        text += f"\n\n**Corrected config (diff):**\n\n```diff\n{diff}\n```"
    head = "Sources:"
    if answer.citations and head in text:  # the engines end their text with a plain sources block
        text = text[: text.rindex(head)].rstrip()
    lines = [text.replace("\n", "  \n") if "```" not in text else text]
    more = (getattr(answer, "more", "") or "").strip()
    if more:  # the rest of the answer, folded: further fixes, background, related issues
        body = more.split("\nMore sources:", 1)[0].strip()
        count = len([line for line in body.splitlines() if line.strip()])
        lines.append(f"\n<details><summary>More ({count} lines: further fixes, background, related issues)</summary>\n\n"
                     + body.replace("\n", "  \n") + "\n\n</details>")
    if answer.citations:
        lines.append("\n**Sources**\n")
        lines += [f"{i}. {citation_link(c)}" for i, c in enumerate(answer.citations, 1)]
    if answer.engine == "offline":
        lines.append("\n_Answered by the offline engine (tools + playbook cards + docs, no LLM)._")
    return "\n".join(lines) + "\n"


def root_markdown(answer: Any) -> str:
    """The diagnosis panel: root cause, the evidence lines, the category."""
    if not answer.root_cause and not answer.evidence:
        return f"**Likely cause:** {answer.summary or 'not determined'}" + (f"  \ncategory `{answer.category}`" if answer.category else "")
    parts = [f"**Root cause:** {answer.root_cause or answer.summary}"]
    if answer.category:
        parts.append(f"category `{answer.category}`")
    for where in answer.evidence[:5]:
        parts.append(f"evidence `{where}`")
    for finding in answer.findings[:1]:
        excerpt = (finding.get("evidence") or {}).get("excerpt") if isinstance(finding, dict) else None
        if excerpt:
            parts.append(f"```\n{excerpt}\n```")
    return "  \n".join(parts)


def to_json_line(event: Any) -> str:
    return json.dumps(event.to_dict(), ensure_ascii=False, default=str)


def session_markdown(session: Any) -> str:
    """A session's conversation as Markdown (``/save`` in the chat)."""
    parts = [f"# rlmedic conversation {session.thread_id}\n"]
    for turn in session.turns:
        parts.append(f"## Q: {turn.question}\n")
        if turn.attachments:
            parts.append("Attached: " + ", ".join(f"`{a}`" for a in turn.attachments) + "\n")
        if turn.answer is not None:
            parts.append(answer_markdown(turn.answer))
        else:
            parts.append(f"_{turn.summary}_\n" if turn.summary else "_(no answer: stopped)_\n")
    return "\n".join(parts)
