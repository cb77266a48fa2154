"""AReaL YAML configs: round-trip loading, minimal edits, and the schema check.

Parsing uses ruamel.yaml's round-trip loader, which keeps comments, key order and
each key's line and column. Edits are applied as *surgical text patches* at those
positions (change one scalar, insert one key, rename or delete one key), so a
corrected config differs from the user's file only on the lines that changed and an
unedited config dumps back byte for byte. After every patch the text is parsed again
and the edit verified.

The schema (``areal_schema.json``) is generated from AReaL's configuration
reference by ``build_areal_schema.py``; the product never reads the docs.
"""

from __future__ import annotations

import difflib
import functools
import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.confine import Confinement
from rlmedic.errors import UserError
from rlmedic.tools.config.editable import EditableText
from rlmedic.tools.config.rules import config_finding
from rlmedic.tools.citations import doc_citation
from rlmedic.types import Finding

DATA = Path(__file__).parent
SCHEMA_PATH = DATA / "areal_schema.json"
REFERENCE_DOC = "AReaL docs/en/cli_reference.md"

_MISSING = object()
_INTERP = re.compile(r"\$\{([^${}]+)\}")


class ConfigEditError(Exception):
    """A patch could not be applied as text (internal; callers see UserError)."""


def _by_hand_on_lookup_error(method: Any) -> Any:
    """An edit whose dotted key does not address one node (``"a.b": 1`` is one key with a dot in
    its name, not ``a`` then ``b``) is a :class:`UserError` asking for a hand edit, not a KeyError."""

    @functools.wraps(method)
    def wrapper(self: ArealConfig, key: str, *args: Any) -> Any:
        try:
            return method(self, key, *args)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as exc:
            raise UserError(f"{self.path}: cannot edit {key} as text (a key with a dot in its name, or not a mapping "
                            f"on the way: {type(exc).__name__}); edit it by hand") from exc

    return wrapper


# --------------------------------------------------------------------------- YAML I/O


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.representer.add_representer(type(None), lambda rep, _d: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    return yaml


def _parse(text: str, where: str) -> Any:
    """The round-trip tree of ``text``, within :mod:`rlmedic.bounded`'s limits; bad YAML is a :class:`UserError`."""
    from ruamel.yaml.error import YAMLError

    from rlmedic.bounded import check_yaml

    check_yaml(text, where)
    try:
        data = _yaml().load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: invalid YAML{at} ({problem})") from exc
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        # a tag whose value does not convert (`!!float x`, `!!bool maybe`, `!!timestamp 2020-99-99`)
        raise UserError(f"{where}: invalid YAML (a value does not match its tag: {exc})") from exc
    if data is None:
        from ruamel.yaml.comments import CommentedMap

        data = CommentedMap()
    if not hasattr(data, "items"):
        raise UserError(f"{where}: an AReaL config must be a YAML mapping at the top level")
    return data


def format_scalar(value: Any) -> str:
    """A Python value as a YAML scalar in the style AReaL configs use."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if ("e" in text or "." in text or "inf" in text or "nan" in text) else text + ".0"
    text = str(value)
    if text == "" or re.search(r"[:#{}\[\],&*!|>'\"%@`]|^\s|\s$|^[-?]", text) or text.lower() in (
        "null", "true", "false", "yes", "no", "on", "off", "~",
    ) or re.fullmatch(r"[-+]?(\d[\d_]*)?(\.\d*)?([eE][-+]?\d+)?", text):
        return json.dumps(text)
    return text


# --------------------------------------------------------------------------- config


@dataclass
class ArealConfig(EditableText):
    """One AReaL YAML file: its text, its round-trip tree, and edits made to it."""

    path: str
    original: str
    text: str = ""
    data: Any = None

    def __post_init__(self) -> None:
        if not self.text:
            self.text = self.original
        if self.data is None:
            self.data = _parse(self.text, self.path)

    # ---- reading

    def node(self, key: str) -> Any:
        """The raw (unresolved) value at a dotted key, or raise KeyError."""
        node = self.data
        for part in _split(key):
            if isinstance(node, list):
                node = node[int(part)]
            elif hasattr(node, "items") and part in node:
                node = node[part]
            else:
                raise KeyError(key)
        return node

    def has(self, key: str) -> bool:
        try:
            self.node(key)
        except (KeyError, IndexError, ValueError):
            return False
        return True

    def value(self, key: str) -> Any:
        """The value in effect: the config's own (interpolations resolved), else AReaL's documented
        default for the key (``None`` when it has none). Rules read this, so a key left out is
        judged by what AReaL will actually use."""
        if self.has(key):
            return self.get(key)
        # under a section the file leaves out whose default is null (actor.rejection_sampling), nothing
        # is in effect: the section's own field defaults apply only once the section is written
        parts = key.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if not self.has(prefix):
                spec = describe_field(prefix)
                if spec and spec.get("type") == "object" and spec.get("nullable") and spec.get("default") is None:
                    return None
        return default_of(key)

    def get(self, key: str, default: Any = None, *, resolve: bool = True) -> Any:
        """The value at ``key`` with ``${a.b}`` interpolations resolved (OmegaConf style)."""
        try:
            value = self.node(key)
        except (KeyError, IndexError, ValueError):
            return default
        return self._resolve(value, set()) if resolve else value

    def _resolve(self, value: Any, seen: set[str]) -> Any:
        if not isinstance(value, str) or "${" not in value:
            return _plain(value)
        whole = _INTERP.fullmatch(value.strip())
        if whole:
            ref = whole.group(1).strip()
            if ":" in ref or ref in seen:  # resolvers (${oc.env:X}) and cycles stay as written
                return str(value)
            try:
                target = self.node(ref)
            except (KeyError, IndexError, ValueError):
                return str(value)
            return self._resolve(target, seen | {ref})

        def sub(match: re.Match[str]) -> str:
            ref = match.group(1).strip()
            if ":" in ref or ref in seen or not self.has(ref):
                return match.group(0)
            resolved = self._resolve(self.node(ref), seen | {ref})
            return match.group(0) if isinstance(resolved, (dict, list)) else str(resolved)

        return _INTERP.sub(sub, str(value))

    def line(self, key: str) -> int | None:
        """1-based line of ``key`` in the current text, if present."""
        parts = _split(key)
        try:
            parent = self.node(".".join(parts[:-1])) if len(parts) > 1 else self.data
            if isinstance(parent, list):
                return parent.lc.item(int(parts[-1]))[0] + 1
            return parent.lc.key(parts[-1])[0] + 1
        except (KeyError, IndexError, ValueError, AttributeError, TypeError):
            return None

    def dotted_keys(self) -> Iterator[str]:
        """Every dotted key of the file (mappings inside lists use the item index)."""
        yield from _walk_keys(self.data, "")

    def copy(self) -> ArealConfig:
        return ArealConfig(path=self.path, original=self.original, text=self.text)

    # ---- editing (text patches, verified by re-parsing)

    @_by_hand_on_lookup_error
    def set(self, key: str, value: Any) -> None:
        """Set a scalar at ``key``; missing parent mappings are created. ``dict`` values set each leaf."""
        if isinstance(value, dict):
            for sub, sub_value in value.items():
                self.set(f"{key}.{sub}", sub_value)
            return
        lines = self.text.splitlines(keepends=True)
        parts = _split(key)
        if self.has(key) and self._written_here(parts):
            lines = self._replace_value(lines, parts, value)
        else:
            lines = self._insert_key(lines, parts, value)
        self._commit("".join(lines), key, value)

    @_by_hand_on_lookup_error
    def delete(self, key: str) -> None:
        """Remove ``key`` and everything under it."""
        if not self.has(key):
            return
        parts = _split(key)
        parent = self.node(".".join(parts[:-1])) if len(parts) > 1 else self.data
        if isinstance(parent, list) or getattr(parent, "fa", None) is not None and parent.fa.flow_style():
            raise UserError(f"{self.path}: cannot delete {key} (inside a list or a flow mapping); edit it by hand")
        if not self._written_here(parts):
            raise UserError(f"{self.path}: {key} comes from a YAML merge (<<: *anchor); edit it by hand")
        start, col = parent.lc.key(parts[-1])
        end = _block_end(self.text.splitlines(keepends=True), start, col)
        lines = self.text.splitlines(keepends=True)
        del lines[start:end]
        text = "".join(lines)
        data = _parse(text, self.path)
        self.text, self.data = text, data
        if self.has(key):
            raise UserError(f"{self.path}: could not delete {key}")

    @_by_hand_on_lookup_error
    def rename(self, key: str, new_name: str) -> None:
        """Rename the last part of ``key`` in place, keeping its value, comments and position."""
        parts = _split(key)
        parent = self.node(".".join(parts[:-1])) if len(parts) > 1 else self.data
        if isinstance(parent, list) or not self._written_here(parts):
            raise UserError(f"{self.path}: cannot rename {key} as text (a list item or a YAML merge); edit it by hand")
        row, col = parent.lc.key(parts[-1])
        lines = self.text.splitlines(keepends=True)
        old = parts[-1]
        if not lines[row][col:].startswith(old):
            raise UserError(f"{self.path}: cannot rename {key} as text; edit it by hand")
        lines[row] = lines[row][:col] + new_name + lines[row][col + len(old) :]
        text = "".join(lines)
        data = _parse(text, self.path)
        self.text, self.data = text, data
        new_key = ".".join([*parts[:-1], new_name])
        if not self.has(new_key):
            raise UserError(f"{self.path}: could not rename {key} to {new_name}")

    def _written_here(self, parts: list[str]) -> bool:
        """False when the key only comes in through a YAML merge (``<<: *anchor``): it is then set
        locally, which overrides the merged value for this mapping alone."""
        parent = self.node(".".join(parts[:-1])) if len(parts) > 1 else self.data
        return isinstance(parent, list) or parts[-1] in _local_keys(parent)

    def _commit(self, text: str, key: str, value: Any) -> None:
        data = _parse(text, self.path)
        check = ArealConfig(path=self.path, original=self.original, text=text, data=data)
        if _plain(check.get(key, _MISSING, resolve=False)) != _plain(value):
            raise UserError(f"{self.path}: could not set {key} to {value!r} as a text edit; edit it by hand")
        self.text, self.data = text, data

    def _replace_value(self, lines: list[str], parts: list[str], value: Any) -> list[str]:
        parent = self.node(".".join(parts[:-1])) if len(parts) > 1 else self.data
        current = parent[int(parts[-1])] if isinstance(parent, list) else parent[parts[-1]]
        if hasattr(current, "items") or isinstance(current, list):
            raise UserError(f"{self.path}: {'.'.join(parts)} is a section, not a single value")
        if isinstance(parent, list):
            row, col = parent.lc.item(int(parts[-1]))
        else:
            (krow, kcol), (row, col) = parent.lc.key(parts[-1]), parent.lc.value(parts[-1])
            line = lines[krow]
            colon = _key_colon(line, kcol)
            if row != krow:  # empty value (`key:`) -> ruamel points at the next token
                rest = line[colon + 1 :]
                comment = _comment_start(rest)
                lines[krow] = line[: colon + 1] + " " + format_scalar(value) + (
                    ("  " + rest[comment:].lstrip()) if comment is not None else "\n" if line.endswith("\n") else ""
                )
                return lines
        line = lines[row]
        flow = getattr(parent, "fa", None) is not None and parent.fa.flow_style()
        end = _scalar_end(line, col, flow=flow)
        if end is None:
            raise UserError(f"{self.path}: {'.'.join(parts)} spans several lines; edit it by hand")
        new = format_scalar(value)
        old_quote = line[col] if line[col] in "\"'" else ""
        if old_quote and isinstance(value, str) and not new.startswith(('"', "'")):
            new = json.dumps(value) if old_quote == '"' else "'" + value.replace("'", "''") + "'"
        lines[row] = line[:col] + new + line[end:]
        return lines

    def _insert_key(self, lines: list[str], parts: list[str], value: Any) -> list[str]:
        # Deepest existing mapping on the path; create the rest beneath it.
        depth = 0
        node = self.data
        while depth < len(parts) - 1:
            child = _child(node, parts[depth])
            if child is _MISSING:
                break
            if not hasattr(child, "items") and not (isinstance(child, list) and depth + 1 < len(parts) - 1):
                blocker = ".".join(parts[: depth + 1])
                raise UserError(f"{self.path}: cannot create {'.'.join(parts)}: {blocker} is not a mapping")
            node = child
            depth += 1
        if isinstance(node, list):
            raise UserError(f"{self.path}: cannot add items to the list {'.'.join(parts[:depth])}; edit it by hand")
        if getattr(node, "fa", None) is not None and node.fa.flow_style() and len(node):
            raise UserError(f"{self.path}: {'.'.join(parts[:depth]) or 'top level'} is a flow mapping; edit it by hand")
        local = _local_keys(node)
        if depth == 0:
            indent, step = 0, _indent_step(self.data)
            at = _last_content_line(lines) + 1
        elif not local:  # only merged keys (`<<: *anchor`): add right below the merge line
            row, indent, step = node.lc.line, node.lc.col, _indent_step(self.data)
            at = row + 1
        else:
            row, col = node.lc.key(local[0])
            indent = col
            step = _indent_step(self.data)
            at = _block_end(lines, *node.lc.key(local[-1]))
            # keep trailing blank lines/comments of the block after the new key
            while at > row + 1 and not lines[at - 1].strip():
                at -= 1
        new_lines = []
        for offset, part in enumerate(parts[depth:-1]):
            new_lines.append(" " * (indent + offset * step) + f"{part}:\n")
        leaf_indent = indent + (len(parts) - 1 - depth) * step
        new_lines.append(" " * leaf_indent + f"{parts[-1]}: {format_scalar(value)}\n")
        if at > 0 and at <= len(lines) and not lines[at - 1].endswith("\n"):
            lines[at - 1] += "\n"
        return lines[:at] + new_lines + lines[at:]


def _local_keys(node: Any) -> list[Any]:
    """Keys written in this mapping itself, in order (not those merged in with ``<<: *anchor``)."""
    where = node.lc.data or {}
    return [k for k in node if k in where]


def _plain(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """ruamel scalar subclasses -> plain Python values (for comparisons and JSON).

    A node reached again through a YAML alias is converted once and shared (``memo``, by
    node id), so an aliased subtree costs its size once, not once per alias.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if hasattr(value, "items") or isinstance(value, list):
        memo = {} if memo is None else memo
        if id(value) in memo:
            return memo[id(value)]
        if hasattr(value, "items"):
            out: Any = memo.setdefault(id(value), {})
            out.update((str(k), _plain(v, memo)) for k, v in value.items())
        else:
            out = memo.setdefault(id(value), [])
            out.extend(_plain(v, memo) for v in value)
        return out
    return value


def _child(node: Any, part: str) -> Any:
    if isinstance(node, list):
        return node[int(part)] if part.isdigit() and int(part) < len(node) else _MISSING
    if hasattr(node, "items") and part in node:
        return node[part]
    return _MISSING


def _split(key: str) -> list[str]:
    return [p for p in key.split(".") if p != ""] if key else []


def _walk_keys(node: Any, prefix: str, seen: set[int] | None = None) -> Iterator[str]:
    """Dotted keys under ``node``; a mapping or list reached again through a YAML alias is not walked again."""
    seen = set() if seen is None else seen
    if hasattr(node, "items") or isinstance(node, list):
        if id(node) in seen:
            return
        seen.add(id(node))
    if hasattr(node, "items"):
        for k, v in node.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            yield path
            yield from _walk_keys(v, path, seen)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk_keys(v, f"{prefix}.{i}", seen)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _block_end(lines: list[str], start: int, key_col: int | None = None) -> int:
    """Index after the last line that belongs to the key on line ``start`` (its nested block).

    ``key_col`` is the key's column (differs from the line's indent for ``- key:`` items).
    A sequence written at the key's own indent (``key:`` then ``- item``) belongs to it.
    """
    base = _indent(lines[start]) if key_col is None else key_col
    starts_item = lines[start].lstrip().startswith("- ") and key_col is None
    end = start + 1
    last_content = start
    while end < len(lines):
        line = lines[end]
        if _is_content(line):
            indent = _indent(line)
            if indent < base:
                break
            if indent == base and not (line.lstrip().startswith("- ") and not starts_item):
                break
            last_content = end
        end += 1
    return last_content + 1


def _last_content_line(lines: list[str]) -> int:
    for i in range(len(lines) - 1, -1, -1):
        if _is_content(lines[i]):
            return i
    return -1


def _indent_step(data: Any) -> int:
    for key, value in data.items():
        if hasattr(value, "items") and len(value) and not (value.fa.flow_style()):
            col = value.lc.key(next(iter(value)))[1]
            if col > data.lc.key(key)[1]:
                return col - data.lc.key(key)[1]
    return 2


def _key_colon(line: str, start: int) -> int:
    """Column of the ':' that ends the key starting at ``start``."""
    if line[start] in "\"'":
        quote = line[start]
        close = line.index(quote, start + 1)
        return line.index(":", close)
    return line.index(":", start)


def _comment_start(text: str) -> int | None:
    match = re.search(r"(^|\s)#", text)
    return None if match is None else match.start() + (1 if match.group(1) else 0)


def _scalar_end(line: str, col: int, flow: bool = False) -> int | None:
    """End column of the one-line scalar starting at ``col``; None for block/multi-line scalars.

    Inside a flow collection (``{a: 1, b: 2}``) a plain scalar also ends at ``,``, ``}`` or ``]``.
    """
    body = line.rstrip("\r\n")
    if col >= len(body):
        return None
    first = body[col]
    if first in "|>":
        return None
    if first in "\"'":
        i = col + 1
        while i < len(body):
            if first == "'" and body[i] == "'" and i + 1 < len(body) and body[i + 1] == "'":
                i += 2
                continue
            if first == '"' and body[i] == "\\":
                i += 2
                continue
            if body[i] == first:
                return i + 1
            i += 1
        return None
    rest = body[col:]
    comment = _comment_start(rest)
    value = rest if comment is None else rest[:comment]
    if flow:
        stop = re.search(r"[,}\]]", value)
        value = value if stop is None else value[: stop.start()]
    return col + len(value.rstrip())


# --------------------------------------------------------------------------- loading


def parse_areal_config(text: str, path: str = "<string>") -> ArealConfig:
    return ArealConfig(path=path, original=text)


def load_areal_config(path: str | os.PathLike[str], *, confinement: Confinement) -> ArealConfig:
    """Read an AReaL YAML file through confinement (read-only)."""
    return parse_areal_config(confinement.read_text(path, whole=True), str(path))


def roundtrip_dump(config: ArealConfig) -> str:
    """Emit the config through ruamel's round-trip dumper (used when a text patch is impossible)."""
    out = io.StringIO()
    _yaml().dump(config.data, out)
    return out.getvalue()


# --------------------------------------------------------------------------- schema


@functools.cache
def load_schema(path: str | None = None) -> dict[str, Any]:
    """The shipped schema of AReaL's config dataclasses (see ``build_areal_schema.py``)."""
    schema_path = Path(path) if path else SCHEMA_PATH
    with open(schema_path, encoding="utf-8") as fh:
        return json.load(fh)


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str
    default: Any = None
    required: bool = False
    nullable: bool = False
    choices: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()  # nested config class anchors
    items_sections: tuple[str, ...] = ()
    line: int | None = None


@dataclass
class Scope:
    """The set of config classes that may describe one mapping (a union keeps the check lenient)."""

    sections: tuple[str, ...]
    fields: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    removed: dict[str, str] = field(default_factory=dict)  # removed name -> field that replaced it


def _scope(schema: dict[str, Any], sections: tuple[str, ...]) -> Scope:
    scope = Scope(sections=sections)
    all_sections = schema["sections"]
    for anchor in sections:
        for name, spec in all_sections[anchor]["fields"].items():
            scope.fields.setdefault(name, []).append(spec)
            target = spec.get("section")
            if target and all_sections.get(target, {}).get("replaces_removed"):
                for removed in all_sections[target]["replaces_removed"]:
                    scope.removed[removed] = name
    return scope


def _type_ok(spec: dict[str, Any], value: Any) -> bool:
    if value is None:
        return True  # null is common for "disabled"; AReaL's own files use it for non-Optional fields too
    if isinstance(value, str) and "${" in value:
        return True
    kind = spec.get("type")
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return not hasattr(value, "items") and not isinstance(value, list)
    if kind == "object":
        return hasattr(value, "items")
    if kind == "list":
        return isinstance(value, list)
    if kind == "dict":
        return hasattr(value, "items")
    return True


def _suggest(name: str, candidates: list[str]) -> str | None:
    matches = difflib.get_close_matches(name, candidates, n=1, cutoff=0.8)
    return matches[0] if matches else None


def check_schema(config: ArealConfig, schema: dict[str, Any] | None = None) -> list[Finding]:
    """Unknown keys (with "did you mean"), removed keys, wrong types and invalid choices."""
    schema = schema or load_schema()
    problems: list[Finding] = []
    root = _scope(schema, tuple(schema["root_sections"]))
    _check_mapping(config, config.data, root, "", schema, problems, set())
    return problems


def _section_span(section: dict[str, Any]) -> tuple[int | None, int | None]:
    """Lines of a section in the reference: its heading to the last row of its table."""
    last = max((f.get("line") or 0 for f in section["fields"].values()), default=0)
    return section.get("line"), last or section.get("line")


def _section_citation(schema: dict[str, Any], anchors: tuple[str, ...]) -> Any:
    section = schema["sections"][anchors[0]]
    return doc_citation(REFERENCE_DOC, section["title"], _section_span(section))


def _check_mapping(
    config: ArealConfig, node: Any, scope: Scope, prefix: str, schema: dict[str, Any], problems: list[Finding],
    seen: set[int],
) -> None:
    """Check one mapping against its scope; a mapping reached again through a YAML alias (``seen``) is checked once."""
    if id(node) in seen:
        return
    seen.add(id(node))
    for raw_key, value in node.items():
        key = str(raw_key)
        path = f"{prefix}.{key}" if prefix else key
        specs = scope.fields.get(key)
        if specs is None:
            problems.append(_unknown_key(config, key, value, path, scope, schema))
            continue
        spec = specs[0]
        plain = _plain(value)
        if not any(_type_ok(s, plain) for s in specs):
            problems.append(
                config_finding(
                    key=path,
                    message=f"{path} should be {_describe_type(spec)}, got {type(plain).__name__} {plain!r}",
                    severity="error",
                    citation=_field_citation(schema, scope, key),
                    rule="schema-type",
                    line=config.line(path),
                )
            )
            continue
        choices = spec.get("choices")
        if choices and isinstance(plain, str) and "${" not in plain and plain not in choices:
            close = _suggest(plain, list(choices))
            problems.append(
                config_finding(
                    key=path,
                    message=f"{path}: {plain!r} is not one of {', '.join(choices)}"
                    + (f"; did you mean {close!r}?" if close else ""),
                    severity="error",
                    citation=_field_citation(schema, scope, key),
                    rule="schema-choice",
                    line=config.line(path),
                    suggestion=close or "",
                )
            )
        nested = tuple(dict.fromkeys(s["section"] for s in specs if s.get("section")))
        if nested and hasattr(value, "items"):
            _check_mapping(config, value, _scope(schema, nested), path, schema, problems, seen)
        items = tuple(dict.fromkeys(s["items_section"] for s in specs if s.get("items_section")))
        if items and isinstance(value, list):
            item_scope = _scope(schema, items)
            for i, item in enumerate(value):
                if hasattr(item, "items"):
                    _check_mapping(config, item, item_scope, f"{path}.{i}", schema, problems, seen)


def _describe_type(spec: dict[str, Any]) -> str:
    kind = spec.get("type", "any")
    return {"boolean": "true/false", "integer": "an integer", "float": "a number", "string": "a string",
            "object": "a mapping", "list": "a list", "dict": "a mapping"}.get(kind, kind)


def _field_citation(schema: dict[str, Any], scope: Scope, key: str) -> Any:
    for anchor in scope.sections:
        section = schema["sections"][anchor]
        if key in section["fields"]:
            return doc_citation(REFERENCE_DOC, f"{section['title']}: {key}", _section_span(section))
    return _section_citation(schema, scope.sections)


def _unknown_key(config: ArealConfig, key: str, value: Any, path: str, scope: Scope, schema: dict[str, Any]) -> Finding:
    line = config.line(path)
    citation = _section_citation(schema, scope.sections)
    top = "." not in path
    if key in scope.removed:
        replacement = scope.removed[key]
        return config_finding(
            key=path,
            message=f"{path} was removed from AReaL; it is replaced by {_sibling(path, replacement)}",
            severity="error",
            citation=citation,
            rule="schema-removed",
            line=line,
            suggestion=replacement,
        )
    candidates = list(scope.fields) + list(scope.removed)
    close = _suggest(key, candidates)
    if close and _plausible(close, value, scope, schema):
        if close in scope.removed:
            replacement = scope.removed[close]
            # never "did you mean X" for an X that no longer exists: point at what replaced it
            message = (
                f"{path} is not an AReaL option (it looks like {close}, which AReaL removed); "
                f"use {_sibling(path, replacement)} instead"
            )
        else:
            message = f"{path} is not an AReaL option; did you mean {_sibling(path, close)!r}?"
        return config_finding(
            key=path, message=message, severity="error", citation=citation, rule="schema-typo", line=line, suggestion=close
        )
    elsewhere = _known_elsewhere(key, schema)
    if elsewhere and not top:
        message = f"{path} is not an option of this section (it exists under {', '.join(elsewhere)})"
        return config_finding(key=path, message=message, severity="warning", citation=citation, rule="schema-misplaced", line=line)
    if top:
        message = (
            f"{path} is not in AReaL's config reference; fine only if your training script's config class defines it"
        )
        return config_finding(key=path, message=message, severity="info", citation=citation, rule="schema-unknown", line=line)
    return config_finding(
        key=path,
        message=f"{path} is not in AReaL's config reference for this section; AReaL will reject it unless a custom config class adds it",
        severity="warning",
        citation=citation,
        rule="schema-unknown",
        line=line,
    )


def _sibling(path: str, name: str) -> str:
    parts = path.split(".")
    return ".".join([*parts[:-1], name])


def _plausible(candidate: str, value: Any, scope: Scope, schema: dict[str, Any]) -> bool:
    """Is ``candidate`` a believable correction given the value's shape?

    ``econfig: {domain: airline, ...}`` is one edit away from ``gconfig`` but shares none
    of its fields: that is a custom section, not a typo.
    """
    if candidate in scope.removed:
        return not hasattr(value, "items")
    specs = scope.fields.get(candidate, [])
    plain = _plain(value)
    if not any(_type_ok(s, plain) for s in specs):
        return False
    nested = [s["section"] for s in specs if s.get("section")]
    if nested and isinstance(plain, dict) and plain:
        known = set()
        for anchor in nested:
            known |= set(schema["sections"][anchor]["fields"])
        overlap = sum(1 for k in plain if k in known)
        return overlap * 2 >= len(plain)
    return True


def _known_elsewhere(key: str, schema: dict[str, Any]) -> list[str]:
    titles = [
        s["title"] for anchor, s in schema["sections"].items() if key in s["fields"] and anchor not in schema["root_sections"]
    ]
    return sorted(set(titles))[:3]


def describe_field(key: str, schema: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Schema entry for a dotted key (first matching class), e.g. for defaults in advice."""
    schema = schema or load_schema()
    scope = _scope(schema, tuple(schema["root_sections"]))
    spec: dict[str, Any] | None = None
    for part in _split(key):
        if part.isdigit():
            continue
        specs = scope.fields.get(part)
        if not specs:
            return None
        spec = specs[0]
        nested = tuple(dict.fromkeys(s.get("section") or s.get("items_section") for s in specs if s.get("section") or s.get("items_section")))
        if nested:
            scope = _scope(schema, nested)
    return spec


def default_of(key: str, fallback: Any = None) -> Any:
    spec = describe_field(key)
    if spec is None or spec.get("required"):
        return fallback
    return spec.get("default", fallback)


# --------------------------------------------------------------------------- backend strings

INFERENCE_BACKENDS = {"sglang": "dtp", "vllm": "dtp"}
TRAIN_BACKENDS = {"fsdp": "dtc", "megatron": "dtpce", "archon": "dtpce"}
_DIMS = re.compile(r"([dtpce])(\d+)")


@dataclass(frozen=True)
class ParallelSpec:
    """One engine's parallelism, e.g. ``sglang:d2t4`` -> backend sglang, d=2, t=4 (8 GPUs)."""

    backend: str
    d: int = 1
    t: int = 1
    p: int = 1
    c: int = 1
    e: int = 1
    order: str = "d"  # the dimension letters in the order the user wrote them
    hybrid: bool = False
    raw: str = ""

    @property
    def world(self) -> int:
        """GPUs this engine needs: d x t x p x c (expert parallelism reuses the mesh)."""
        return self.d * self.t * self.p * self.c

    def with_dims(self, **dims: int) -> ParallelSpec:
        """A copy with some dimensions changed, written in the user's order (new dims appended)."""
        if self.hybrid:
            raise ValueError("hybrid (attn|ffn) backends are not rewritten automatically")
        values = {k: getattr(self, k) for k in "dtpce"}
        values.update(dims)
        order = self.order + "".join(k for k in "dtpce" if k not in self.order and values[k] != 1)
        text = "".join(f"{k}{values[k]}" for k in order if k in self.order or values[k] != 1)
        return ParallelSpec(backend=self.backend, order=order, raw=f"{self.backend}:{text}", **values)


def _parse_dims(text: str, backend: str, allowed: str) -> dict[str, Any]:
    text = text.strip()
    if not text or _DIMS.sub("", text):
        raise ValueError(f"cannot read parallel dimensions {text!r} (expected letters d/t/p/c/e with sizes, e.g. d4t2)")
    found: dict[str, int] = {}
    order = ""
    for letter, size in _DIMS.findall(text):
        if letter in found:
            raise ValueError(f"dimension {letter!r} appears twice in {text!r}")
        if letter not in allowed and int(size) != 1:
            raise ValueError(f"{backend} does not support the {letter!r} dimension (supported: {', '.join(allowed)})")
        if int(size) < 1:
            raise ValueError(f"dimension {letter}{size} must be at least 1")
        found[letter] = int(size)
        order += letter
    return {**found, "order": order}


def parse_backend(value: str) -> ParallelSpec:
    """Parse ``<backend>:<dims>`` (also ``megatron:(attn:...|ffn:...)``); raise ValueError when malformed."""
    text = str(value).strip()
    if ":" not in text:
        if text.lower() in {**INFERENCE_BACKENDS, **TRAIN_BACKENDS}:
            # the backend is named; what is missing is how many GPUs it gets and how they are split
            raise ValueError(f"the backend {text.lower()!r} has no parallel dimensions "
                             f"(write e.g. '{text.lower()}:d4'; the dimensions say how many GPUs and how they split)")
        raise ValueError("missing the backend prefix (write e.g. 'sglang:d4' or 'fsdp:d4t2'; bare dimensions are no longer accepted)")
    backend, dims = text.split(":", 1)
    backend = backend.strip().lower()
    allowed = {**INFERENCE_BACKENDS, **TRAIN_BACKENDS}.get(backend)
    if allowed is None:
        raise ValueError(f"unknown backend {backend!r} (known: {', '.join(sorted({**INFERENCE_BACKENDS, **TRAIN_BACKENDS}))})")
    dims = dims.strip()
    if dims.startswith("("):
        if backend not in ("megatron", "archon"):
            raise ValueError(f"{backend} does not support the hybrid (attn|ffn) syntax")
        match = re.fullmatch(r"\(\s*attn:([^|]+)\|\s*ffn:([^)]+)\)", dims)
        if not match:
            raise ValueError("hybrid syntax is megatron:(attn:<dims>|ffn:<dims>)")
        attn = _parse_dims(match.group(1), backend, "dtpc")
        ffn = _parse_dims(match.group(2), backend, "dtpe")
        if attn.get("p", 1) != ffn.get("p", 1):
            raise ValueError("pipeline size (p) must be the same for attn and ffn")
        spec = ParallelSpec(backend=backend, hybrid=True, raw=text, **attn)
        ffn_world = ffn.get("d", 0) * ffn.get("t", 1) * ffn.get("p", 1) * ffn.get("e", 1)
        if ffn.get("d") and ffn_world != spec.world:
            raise ValueError(f"attn world size {spec.world} differs from ffn world size {ffn_world}")
        return spec
    return ParallelSpec(backend=backend, raw=text, **_parse_dims(dims, backend, allowed))


def parse_allocation_mode(value: str) -> tuple[ParallelSpec | None, ParallelSpec | None]:
    """Legacy ``allocation_mode``: ``sglang:d4p1t1+d4p1t1``, ``sglang.d2t2+d4``, or a training-only ``d8``."""
    text = str(value).strip()
    if not text:
        return None, None
    parts = [p.strip() for p in text.split("+")]
    if len(parts) > 2 or not all(parts):
        raise ValueError("expected '<inference>+<training>' (e.g. sglang:d4p1t1+d4p1t1)")

    def one(part: str, default: str) -> ParallelSpec:
        match = re.match(r"^([a-z]+)[.:](.+)$", part)
        if match:
            return parse_backend(f"{match.group(1)}:{match.group(2)}")
        return parse_backend(f"{default}:{part}")

    if len(parts) == 1:
        match = re.match(r"^([a-z]+)[.:]", parts[0])
        if match and match.group(1) in INFERENCE_BACKENDS:
            return one(parts[0], "sglang"), None
        return None, one(parts[0], "fsdp")
    gen = one(parts[0], "sglang")
    if gen.backend not in INFERENCE_BACKENDS:
        raise ValueError(f"the part before '+' is the inference engine; {gen.backend!r} is a training backend")
    train = one(parts[1], "fsdp")
    if train.backend not in TRAIN_BACKENDS:
        raise ValueError(f"the part after '+' is the training engine; {train.backend!r} is an inference backend")
    return gen, train
