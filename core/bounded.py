"""Bounded parsing: JSON and YAML from users are checked against fixed limits before they are built.

A config, a GPU snapshot or a checkpoint's ``step_info.json`` comes from anywhere: a
hand edit, another machine, a model, an upload. A few hundred bytes of YAML with nested
aliases ("billion laughs") expand to billions of nodes; a few kilobytes of ``[[[[`` blow
Python's recursion limit; a 10,000-digit integer trips the int/str conversion limit. Each
of these is refused here with one :class:`UserError` line that names the limit, before
anything is expanded or recursed into.

The limits are far above anything a real AReaL/slime config, snapshot or checkpoint
metadata file holds (those have tens to hundreds of nodes, a depth under ten):

- :data:`MAX_DEPTH` levels of nesting (JSON and YAML);
- :data:`MAX_NUMBER_CHARS` characters in one JSON number;
- :data:`MAX_YAML_ALIASES` alias uses (``*name``, merge keys included) in one YAML file;
- :data:`MAX_YAML_NODES` nodes in a YAML file once every alias is expanded.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rlmedic.errors import UserError

MAX_DEPTH = 100
MAX_NUMBER_CHARS = 100
MAX_YAML_ALIASES = 10_000
MAX_YAML_NODES = 200_000

_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class _NumberTooLong(Exception):
    pass


def _bounded_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _NumberTooLong(text)
    return int(text)


def _bounded_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _NumberTooLong(text)
    return float(text)


def json_depth(text: str | bytes, limit: int = MAX_DEPTH) -> int:
    """The nesting depth of a JSON text (strings skipped), stopping as soon as it passes ``limit``."""
    data = text.encode("utf-8", errors="replace") if isinstance(text, str) else text
    depth = deepest = 0
    for match in _JSON_TOKENS.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def load_json(text: str | bytes, where: str) -> Any:
    """``json.loads`` within the limits: too deep, a too long number or invalid JSON is a :class:`UserError`."""
    if json_depth(text) > MAX_DEPTH:
        raise UserError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels; refusing to read it")
    try:
        return json.loads(text, parse_int=_bounded_int, parse_float=_bounded_float)
    except _NumberTooLong as exc:
        raise UserError(f"{where}: a JSON number longer than {MAX_NUMBER_CHARS} characters ({str(exc)[:20]}...)") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON, does not parse ({exc.msg} at line {exc.lineno})") from exc
    except (ValueError, RecursionError) as exc:  # bytes that are not UTF-8, a depth the pre-check did not see
        raise UserError(f"{where}: not valid JSON ({exc})") from exc


def check_yaml(text: str, where: str) -> None:
    """Refuse YAML that is nested too deep or expands through aliases past the limits.

    Runs over ruamel's event stream (its parser is a state machine: no recursion, nothing
    built), keeping for each anchor the size of its node once expanded. An alias then costs
    that size, so the total is the node count of the fully expanded document, counted
    without expanding anything. Syntax errors are left to the loader, which reports them
    with their line.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent

    sizes: dict[str, int] = {}
    stack: list[list[Any]] = [[None, 0]]  # [anchor, expanded size so far] per open collection
    total = aliases = 0
    try:
        for event in YAML(typ="rt").parse(text):
            if isinstance(event, CollectionStartEvent):
                stack.append([event.anchor, 1])
                total += 1
                if len(stack) - 1 > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise UserError(f"{where}: YAML nested deeper than {MAX_DEPTH} levels (line {line}); refusing to read it")
            elif isinstance(event, CollectionEndEvent):
                anchor, size = stack.pop()
                if anchor is not None:
                    sizes[anchor] = size
                stack[-1][1] += size
            elif isinstance(event, ScalarEvent):
                if event.anchor is not None:
                    sizes[event.anchor] = 1
                stack[-1][1] += 1
                total += 1
            elif isinstance(event, AliasEvent):
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise UserError(f"{where}: more than {MAX_YAML_ALIASES} YAML aliases (*name); refusing to expand them")
                size = sizes.get(event.anchor, 1)
                stack[-1][1] += size
                total += size
            else:
                continue
            if total > MAX_YAML_NODES:
                raise UserError(
                    f"{where}: YAML expands to more than {MAX_YAML_NODES} nodes through its aliases (*name, <<: *name); "
                    "refusing to expand it"
                )
    except YAMLError:
        return  # the loader reports the syntax error with its position
