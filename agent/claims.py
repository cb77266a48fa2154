"""Check what the model wrote against what the tools found.

A 7-8B model invents plausible config keys ("set foo_bar=3"), flags, versions and
``file:line`` references. The structured answer never takes them (it is grounded in the
tool results), but the model's prose reaches the user too. This module pulls the
checkable claims out of that prose and marks the ones no tool result, citation, attached
file name or the question itself supports:

- config keys (``actor.mb_spec.max_tokens_per_mb``, ``key=value``, ``key: value``),
- command-line flags (``--sglang-mem-fraction-static 0.5``),
- versions (``sglang 0.4.6.post1``, ``v0.3.0``, ``>=2.6``),
- ``file:line`` references (``train.log:52``).

A claim is *supported* when its text occurs in the evidence (case-insensitive, ``-`` and
``_`` alike for flags); a key=value pair also needs its value there. Unsupported claims
get ``[unverified]`` after their first occurrence in the text and one notice line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

UNVERIFIED = " [unverified]"

_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:[-_][a-z0-9]+)+)(?:[ =]+([^\s,;`'\"]+))?", re.I)
_DOTTED = re.compile(r"(?<![\w./-])([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)(?:\s*(?:=|:)\s*([^\s,;`'\"]+))?")
_ASSIGN = re.compile(r"(?<![\w.-])([a-z][a-z0-9]*_[a-z0-9_]+)\s*(?:=|:)\s*([^\s,;`'\"]+)")
_VERSION = re.compile(r"(?i)\b(?:v|version\s+|==|>=|<=)?(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+|\.dev\d+)?)\b")
_FILELINE = re.compile(r"(?<![\w/.-])([\w./-]+\.(?:log|txt|out|err|yaml|yml|sh|json|py|gz)):(\d+)\b")
#: Dotted words that are not config keys (file names, modules the prose names in passing).
_NOT_KEYS = re.compile(r"\.(?:log|txt|out|err|yaml|yml|sh|json|py|gz|md|com|org|io|html)$|^(?:e\.g|i\.e|etc)\b", re.I)


@dataclass(frozen=True)
class Claim:
    kind: str  # key | flag | version | fileline
    text: str  # as written
    value: str = ""

    def __str__(self) -> str:
        return f"{self.text}={self.value}" if self.value and self.kind in ("key", "flag") else self.text


def extract(text: str) -> list[Claim]:
    """The checkable claims in ``text``, first occurrence order, without repeats."""
    claims: list[Claim] = []
    seen: set[tuple[str, str]] = set()

    def add(claim: Claim) -> None:
        key = (claim.kind, claim.text.lower())
        if key not in seen:
            seen.add(key)
            claims.append(claim)

    spans: list[tuple[int, int]] = []
    for m in _FILELINE.finditer(text):
        add(Claim("fileline", m.group(0)))
        spans.append(m.span())
    for m in _FLAG.finditer(text):
        value = (m.group(2) or "").rstrip(".")
        add(Claim("flag", m.group(1), value if not value.startswith("-") else ""))
        spans.append(m.span())
    for m in _DOTTED.finditer(text):
        if any(a <= m.start() < b for a, b in spans) or _NOT_KEYS.search(m.group(1)) or "_" not in m.group(1):
            continue  # a key has an underscore somewhere (actor.mb_spec...): "e.g." or "torch.cuda" are not keys
        add(Claim("key", m.group(1), (m.group(2) or "").rstrip(".")))
        spans.append(m.span())
    for m in _ASSIGN.finditer(text):
        if not any(a <= m.start() < b for a, b in spans):
            add(Claim("key", m.group(1), m.group(2).rstrip(".")))
            spans.append(m.span())
    for m in _VERSION.finditer(text):
        if not any(a <= m.start() < b for a, b in spans):
            add(Claim("version", m.group(1)))
    return claims


def evidence_text(results: Iterable[Any], extra: Iterable[str] = ()) -> str:
    """One lower-cased haystack of everything the tools returned (data and model text) plus ``extra``."""
    parts = [str(e) for e in extra]
    for result in results:
        data = getattr(result, "data", None)
        if data:
            parts.append(json.dumps(data, default=str, ensure_ascii=False))
        parts.append(str(getattr(result, "text", "") or ""))
    return _norm("\n".join(parts))


def _norm(text: str) -> str:
    return text.lower().replace("_", "-")


def supported(claim: Claim, haystack: str) -> bool:
    """Whether ``claim`` (and its value, when it has one) occurs in the normalised evidence."""
    if claim.kind == "fileline":
        name, _, line = claim.text.rpartition(":")
        base = _norm(name.rsplit("/", 1)[-1])
        # the tools cite files by path and line in several shapes (file:line, "line": 52)
        return f"{base}:{line}" in haystack or (base in haystack and re.search(rf"\b{line}\b", haystack) is not None)
    if _norm(claim.text.lstrip("-")) not in haystack:
        return False
    if claim.value and claim.kind in ("key", "flag"):
        return _norm(claim.value.strip("'\"")) in haystack
    return True


def check(text: str, haystack: str) -> tuple[str, list[Claim]]:
    """``text`` with unsupported claims marked, and the list of them."""
    unsupported = [c for c in extract(text) if not supported(c, haystack)]
    marked = text
    for claim in unsupported:
        needle = claim.text
        at = marked.find(needle)
        if at < 0:
            continue
        end = at + len(needle)
        if claim.value:  # mark after the value when it follows
            m = re.compile(rf"\s*(?:=|:|\s)\s*{re.escape(claim.value)}").match(marked, end)
            if m:
                end = m.end()
        if not marked.startswith(UNVERIFIED, end):
            marked = marked[:end] + UNVERIFIED + marked[end:]
    return marked, unsupported


def notice(unsupported: list[Claim]) -> str:
    """One line for ``Answer.notices`` naming the model's claims no tool result supports."""
    shown = ", ".join(str(c) for c in unsupported[:8]) + (" ..." if len(unsupported) > 8 else "")
    return f"unverified in the model's text (no tool result or citation supports them): {shown}"
