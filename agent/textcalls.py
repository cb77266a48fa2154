"""What small models write instead of a clean reply: tool calls as text, and ``<think>`` blocks.

SGLang turns a model's tool-call markup into structured ``tool_calls`` only when it runs
with the right ``--tool-call-parser``, and hides reasoning only with a
``--reasoning-parser``. Without them, or when the parser misses, a 7-8B model's reply
carries the raw markup. This module reads it back:

- :func:`strip_think` drops ``<think>...</think>`` (also an unclosed block, and a reply
  that starts inside one, as Qwen3's template does);
- :func:`parse_tool_calls` finds tool calls written as text in the formats small models
  emit (Hermes/Qwen ``<tool_call>``, JSON in code fences, Llama 3 ``<|python_tag|>``,
  Mistral ``[TOOL_CALLS]``, Phi-4 ``<|tool_call|>...<|/tool_call|>``, DeepSeek
  ``<｜tool▁calls▁begin｜>``, Gemma ``tool_code`` and pythonic ``[name(key=value)]`` calls,
  ReAct ``Action:``/``Action Input:``, a bare JSON object), accepting only known tool names
  and JSON-object arguments; it is a fallback, used only when no structured call came back;
- :func:`loads_lenient` is the JSON repair both paths share (a text call's arguments and a
  structured call whose arguments did not parse);
- at most :data:`MAX_CALLS_PER_REPLY` calls are read from one reply, and arguments over
  :data:`MAX_ARG_CHARS` are not parsed: a reply of thousands of calls, or one huge
  argument, costs no more than a normal one;
- the loop shows a reply only once it is complete and parsed, so neither reasoning nor
  tool-call markup reaches the user.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
#: DeepSeek V3/R1 tool-call markup (full-width bar and the SentencePiece space in the tokens).
DS_CALLS, DS_CALL, DS_SEP, DS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
#: The most tool calls read from one reply (the loop's tool budget is smaller still).
MAX_CALLS_PER_REPLY = 16
#: The longest argument text parsed; a longer one is refused, never parsed nor echoed whole.
MAX_ARG_CHARS = 64_000

_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)
_FENCE = re.compile(r"```(?:json|tool_call|tool|python)?\s*(.*?)```", re.S)
_FUNCTION_TAG = re.compile(r"<function=([\w.-]+)>\s*(.*?)\s*(?:</function>|\Z)", re.S)
_TOOL_CODE = re.compile(r"```tool_code\s*(.*?)(?:```|\Z)", re.S)
_PYTHONIC = re.compile(r"^\s*\[\s*[A-Za-z_][\w.]*\(.*\)\s*\]\s*$", re.S)
_REACT = re.compile(r"^[ \t]*Action:[ \t]*([\w.-]+)[ \t]*\n[ \t]*Action Input:[ \t]*(.*?)"
                    r"(?=^[ \t]*(?:Observation|Thought|Action|Final Answer):|\Z)", re.S | re.M)


def strip_think(text: str) -> str:
    """``text`` without reasoning blocks; a reply that opens inside one keeps what follows ``</think>``."""
    if not text:
        return text
    head, sep, tail = text.partition(THINK_CLOSE)
    if sep and THINK_OPEN not in head:  # the template opened the block in the prompt
        text = tail
    return _THINK_BLOCK.sub("", text).replace(THINK_CLOSE, "").strip()


@dataclass
class TextCall:
    """One tool call read from text: ``name`` and its JSON-object ``args``."""

    name: str
    args: dict[str, Any]
    id: str = field(default_factory=lambda: f"textcall_{uuid.uuid4().hex[:12]}")

    def as_langchain(self) -> dict[str, Any]:
        return {"name": self.name, "args": self.args, "id": self.id, "type": "tool_call"}


def loads_lenient(raw: str) -> Any:
    """``raw`` parsed as JSON, after the repairs small models need; None when it does not parse."""
    raw = raw.strip()
    if not raw or len(raw) > MAX_ARG_CHARS:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        pass
    # a trailing comma, a missing or an extra closing brace, Python quoting: common; nothing fancier is guessed
    fixed = re.sub(r",\s*([}\]])", r"\1", raw)
    for candidate in (fixed, fixed + "}", fixed + "}}", fixed + "]"):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    try:  # one object followed by a stray brace or text
        value, _ = json.JSONDecoder().raw_decode(fixed)
        return value
    except ValueError:
        pass
    if fixed[:1] in "{[":  # {'paths': ['x'], 'flag': True}: a Python literal, read, never run
        import ast

        try:
            value = ast.literal_eval(fixed)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            return None
        return value if isinstance(value, (dict, list)) else None
    return None


def _as_calls(obj: Any, names: set[str]) -> list[TextCall]:
    """Calls from a parsed object: ``{"name", "arguments"|"parameters"|"args"}`` or a list of them."""
    items = obj if isinstance(obj, list) else [obj]
    calls = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if "function" in item and isinstance(item["function"], dict):  # OpenAI-shaped, written as text
            item = item["function"]
        name = item.get("name")
        args = next((item[k] for k in ("arguments", "parameters", "args", "input") if k in item), {})
        if isinstance(args, str):
            args = loads_lenient(args)
        if isinstance(name, str) and name in names and isinstance(args, dict):
            calls.append(TextCall(name, args))
    return calls


def _pythonic_calls(source: str, names: set[str]) -> list[TextCall]:
    """Calls written as Python (Gemma ``tool_code``, Llama's pythonic ``[f(a=1), g(b=2)]``).

    Read with :mod:`ast` and literal values only: nothing is ever evaluated.
    """
    import ast

    source = source.strip()
    if not source or len(source) > MAX_ARG_CHARS:
        return []
    try:
        tree = ast.parse(source, mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    nodes: list[ast.AST] = []
    for statement in tree.body:
        if isinstance(statement, ast.Expr):
            value = statement.value
            nodes += list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value]
    calls = []
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" and node.args:
            node = node.args[0]  # Gemma wraps the call in print(...)
        if not isinstance(node, ast.Call) or node.args:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in names:
            continue
        try:
            args = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            continue
        calls.append(TextCall(name, args))
    return calls


def _deepseek_calls(body: str, names: set[str]) -> list[TextCall]:
    """DeepSeek's ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME```json ...```<｜tool▁call▁end｜>``
    (V3) and ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`` (V3.1)."""
    calls = []
    for part in body.split(DS_CALL)[1:]:
        part = part.split(DS_END)[0]
        head, sep, rest = part.partition(DS_SEP)
        if not sep:
            continue
        if head.strip() == "function":
            name, _, rest = rest.strip().partition("\n")
        else:
            name = head
        rest = re.sub(r"^\s*```(?:json)?|```\s*$", "", rest.strip())
        obj = loads_lenient(rest)
        if name.strip() in names and isinstance(obj, dict):
            calls.append(TextCall(name.strip(), obj))
    return calls


def _react_calls(body: str, names: set[str]) -> tuple[list[TextCall], str]:
    """ReAct ``Action: NAME`` / ``Action Input: {...}``; the prose is what precedes the first action."""
    calls = []
    first = None
    for match in _REACT.finditer(body):
        obj = loads_lenient(match.group(2))
        if match.group(1) in names and isinstance(obj, dict):
            calls.append(TextCall(match.group(1), obj))
            first = match.start() if first is None else first
    if not calls:
        return [], body
    prose = re.sub(r"^[ \t]*Thought:[ \t]*", "", body[:first], flags=re.M).strip()
    return calls, prose


def parse_tool_calls(text: str, tool_names: Iterable[str]) -> tuple[list[TextCall], str]:
    """Tool calls written as text in ``text`` and the prose left around them.

    Only calls to a name in ``tool_names`` with JSON-object arguments count; anything else
    stays prose. Returns ``([], text)`` when nothing parses; at most
    :data:`MAX_CALLS_PER_REPLY` calls.
    """
    calls, prose = _parse(text, set(tool_names))
    return calls[:MAX_CALLS_PER_REPLY], prose


def _parse(text: str, names: set[str]) -> tuple[list[TextCall], str]:
    body = strip_think(text or "")
    if not body or not names:
        return [], body
    calls: list[TextCall] = []
    for match in _HERMES.finditer(body):
        calls += _as_calls(loads_lenient(match.group(1)), names)
        if len(calls) >= MAX_CALLS_PER_REPLY:
            break
    if calls:
        return calls, _HERMES.sub("", body).strip()
    for match in _FUNCTION_TAG.finditer(body):  # Llama 3.x / Qwen-coder <function=name>{...}</function>
        obj = loads_lenient(match.group(2))
        if match.group(1) in names and isinstance(obj, dict):
            calls.append(TextCall(match.group(1), obj))
    if calls:
        return calls, _FUNCTION_TAG.sub("", body).strip()
    if DS_CALL in body:
        calls = _deepseek_calls(body, names)
        if calls:
            return calls, body.split(DS_CALLS)[0].split(DS_CALL)[0].strip()
    for marker in ("[TOOL_CALLS]", "<|python_tag|>", "<|tool_call|>"):
        if marker in body:
            prose, _, rest = body.partition(marker)
            rest = rest.split("<|eom_id|>")[0].split("<|eot_id|>")[0].split("<|/tool_call|>")[0]
            obj = loads_lenient(rest)
            if obj is None:  # several JSON objects separated by ';' or newlines (Llama 3.2)
                calls = [c for part in re.split(r";\s*|\n+", rest) for c in _as_calls(loads_lenient(part), names)]
            else:
                calls = _as_calls(obj, names)
            if not calls:
                calls = _pythonic_calls(rest, names)
            if calls:
                return calls, prose.strip()
    for match in _TOOL_CODE.finditer(body):  # Gemma
        calls += _pythonic_calls(match.group(1), names)
    if calls:
        return calls, _TOOL_CODE.sub("", body).strip()
    for match in _FENCE.finditer(body):
        calls += _as_calls(loads_lenient(match.group(1)), names)
    if calls:
        return calls, _FENCE.sub("", body).strip()
    stripped = body.strip()
    if stripped[:1] in "{[" and stripped[-1:] in "}]":  # the whole reply is one call object
        calls = _as_calls(loads_lenient(stripped), names)
        if not calls and _PYTHONIC.match(stripped):  # Llama 3.2+ pythonic: [name(key=value), ...]
            calls = _pythonic_calls(stripped, names)
        if calls:
            return calls, ""
    if "Action Input:" in body:
        return _react_calls(body, names)
    return [], body
