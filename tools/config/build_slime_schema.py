"""Build ``slime_schema.json``, every flag a slime launch accepts (development time only).

slime's ``train.py`` parses one command line with three parsers: slime's own arguments
(``slime/utils/arguments.py`` and the Megatron/SGLang glue beside it), Megatron-LM's
(``megatron/training/arguments.py``, partly generated from config dataclasses by
``ArgumentGroupFactory``), and SGLang's ``ServerArgs`` re-registered with a ``--sglang-``
prefix (plus the router's ``RouterArgs`` as ``--router-*``). All three ignore flags they
do not know, so a misspelt flag is silently dropped: rlmedic needs the full list to say
so. This script reads those argument definitions as *source text* (``ast``; nothing
upstream is imported or run) and writes a JSON table of flag name, type, choices,
default, ``nargs`` and action, which rlmedic ships as package data. The product only
reads the JSON; no upstream code is committed.

Pinned sources of the shipped file (re-run with the same versions to reproduce it)::

    slime       THUDM/slime @ 624b824a898ab0ec1fcb4d373004c7f3852bf515  (2026-08-21; the three
                argument files in ../shared/corpus/slime-src/)
    Megatron-LM NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553  (2026-08-22)
    SGLang      PyPI sglang==0.5.18  (built 2026-08-21; sglang/srt/server_args.py)
    router      PyPI sglang-router==0.3.2  (sglang_router/router_args.py)

To rebuild::

    git clone https://github.com/NVIDIA/Megatron-LM /tmp/megatron && git -C /tmp/megatron checkout d98e8a64dd
    pip download --no-deps -d /tmp/wheels sglang==0.5.18 sglang-router==0.3.2
    mkdir -p /tmp/sglang && for w in /tmp/wheels/*.whl; do unzip -o -q "$w" -d /tmp/sglang; done
    python tools/config/build_slime_schema.py --slime-src ../shared/corpus/slime-src \\
        --megatron-src /tmp/megatron --sglang-src /tmp/sglang -o tools/config/slime_schema.json

``--megatron-src``/``--sglang-src`` may be left out: the schema is then built from slime's
own files alone and says so in its ``sources``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PINS = {
    "slime": "THUDM/slime@624b824a898ab0ec1fcb4d373004c7f3852bf515",
    "megatron": "NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553",
    "sglang": "sglang==0.5.18 (PyPI)",
    "router": "sglang-router==0.3.2 (PyPI)",
}

#: SGLang ServerArgs fields slime does not re-register (slime sets them itself).
#: Read from slime's own ``skipped_args`` list when present; this is the fallback.
_VALUE_ACTIONS = {"store", "append", "extend"}
_UNKNOWN = object()


@dataclass
class Flag:
    """One option string and what argparse does with it."""

    name: str
    source: str
    dest: str = ""
    type: str = "str"  # int | float | str | bool (store_true/false) | any (a custom parser)
    choices: list[Any] | None = None
    default: Any = None
    nargs: Any = None  # None (one value) | 0 (a switch) | "?" | "*" | "+" | an int
    action: str = "store"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "dest": self.dest, "type": self.type, "action": self.action}
        if self.choices is not None:
            out["choices"] = self.choices
        if self.default is not None:
            out["default"] = self.default
        if self.nargs is not None:
            out["nargs"] = self.nargs
        return out


# --------------------------------------------------------------------------- evaluation helpers


class Scope:
    """Module-level constants of one or more source files, for resolving ``choices=NAME``."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}
        self.classes: dict[str, ast.ClassDef] = {}

    def add_module(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = self.eval(node.value)
                if value is not _UNKNOWN:
                    self.names[node.targets[0].id] = value
            elif isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, node)

    def eval(self, node: ast.AST | None, local: dict[str, Any] | None = None) -> Any:
        """A literal value, a known constant, or ``_UNKNOWN``."""
        if node is None:
            return _UNKNOWN
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        if isinstance(node, ast.Name):
            if local and node.id in local:
                return local[node.id]
            return self.names.get(node.id, _UNKNOWN)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [self.eval(e, local) for e in node.elts]
            return _UNKNOWN if any(i is _UNKNOWN for i in items) else list(items)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.eval(node.left, local), self.eval(node.right, local)
            if isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(left, str) and isinstance(right, str):
                return left + right
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.eval(node.operand, local)
            return -value if isinstance(value, (int, float)) else _UNKNOWN
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "sorted", "tuple", "set"):
            if node.args:
                value = self.eval(node.args[0], local)
                return list(value) if isinstance(value, (list, tuple, set)) else _UNKNOWN
        if isinstance(node, ast.JoinedStr):
            parts = []
            for part in node.values:
                if isinstance(part, ast.Constant):
                    parts.append(str(part.value))
                elif isinstance(part, ast.FormattedValue):
                    value = self.eval(part.value, local)
                    if value is _UNKNOWN:
                        return _UNKNOWN
                    parts.append(str(value))
            return "".join(parts)
        return _UNKNOWN

    def enum_members(self, name: str) -> list[str] | None:
        cls = self.classes.get(name)
        if cls is None or not any(isinstance(b, (ast.Name, ast.Attribute)) and "Enum" in ast.unparse(b) for b in cls.bases):
            return None
        return [t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]


def _type_name(node: ast.AST | None) -> str:
    if node is None:
        return "str"
    text = ast.unparse(node)
    return {"int": "int", "float": "float", "str": "str"}.get(text, "any")


def _jsonable(value: Any) -> Any:
    if value is _UNKNOWN:
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple, set)):
        items = [_jsonable(v) for v in value]
        return items
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return None


def _action_name(node: ast.AST | None) -> str:
    if node is None:
        return "store"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    text = ast.unparse(node)
    if text.endswith("BooleanOptionalAction"):
        return "boolean_optional"
    if "StoreTrue" in text:
        return "store_true"
    if "StoreFalse" in text:
        return "store_false"
    if "StoreConst" in text:
        return "store_const"
    return "custom"


def flag_from_call(call: ast.Call, scope: Scope, source: str, local: dict[str, Any] | None = None,
                   defaults_from: dict[str, Any] | None = None) -> list[Flag]:
    """The option strings of one ``add_argument(...)`` call."""
    names = [scope.eval(a, local) for a in call.args]
    names = [n for n in names if isinstance(n, str) and n.startswith("--")]
    if not names:
        return []
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    action = _action_name(kw.get("action"))
    dest = scope.eval(kw.get("dest"), local)
    dest = dest if isinstance(dest, str) else names[0][2:].replace("-", "_")
    default = scope.eval(kw.get("default"), local)
    if default is _UNKNOWN and isinstance(kw.get("default"), ast.Attribute) and defaults_from is not None:
        default = defaults_from.get(kw["default"].attr, _UNKNOWN)
    choices = scope.eval(kw.get("choices"), local) if "choices" in kw else None
    nargs = scope.eval(kw.get("nargs"), local) if "nargs" in kw else None
    if action in ("store_true", "store_false", "store_const", "count", "boolean_optional"):
        ftype, nargs = "bool", 0
        if action == "store_true" and default is _UNKNOWN:
            default = False
        if action == "store_false" and default is _UNKNOWN:
            default = True
    elif action == "custom":
        ftype, nargs = "any", nargs if nargs is not _UNKNOWN and nargs is not None else "?"
    else:
        ftype = _type_name(kw.get("type"))
    flags = []
    for name in names:
        flags.append(Flag(name=name, source=source, dest=dest, type=ftype,
                          choices=_jsonable(choices) if isinstance(choices, list) else None,
                          default=_jsonable(default), nargs=_jsonable(nargs), action=action))
        if action == "boolean_optional":
            flags.append(Flag(name="--no-" + name[2:], source=source, dest=dest, type="bool", nargs=0,
                              action="store_false"))
    return flags


def _is_add_argument(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("add_argument",))


def _local_constants(fn: ast.AST, scope: Scope) -> dict[str, Any]:
    """Simple ``NAME = literal`` assignments inside a function (e.g. ``prefix = "router-"``)."""
    local: dict[str, Any] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = scope.eval(node.value, local)
            if value is not _UNKNOWN:
                local[node.targets[0].id] = value
            elif isinstance(node.value, ast.IfExp):  # prefix = "router-" if use_router_prefix else ""
                body = scope.eval(node.value.body, local)
                if body is not _UNKNOWN:
                    local[node.targets[0].id] = body
    return local


def argparse_flags(tree: ast.Module, scope: Scope, source: str, *, defaults_from: dict[str, Any] | None = None,
                   prefix: str = "", skip: set[str] = frozenset()) -> list[Flag]:
    """Every ``*.add_argument(...)`` call in a module (each function's local constants resolved)."""
    flags: list[Flag] = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    seen: set[int] = set()
    for fn in functions:
        local = _local_constants(fn, scope)
        for node in ast.walk(fn):
            if _is_add_argument(node) and id(node) not in seen:
                seen.add(id(node))
                for flag in flag_from_call(node, scope, source, local, defaults_from):
                    if flag.dest in skip:
                        continue
                    if prefix:
                        flag.name = f"--{prefix}{flag.name[2:]}"
                        flag.dest = prefix.replace("-", "_") + flag.dest
                    flags.append(flag)
    return flags


# --------------------------------------------------------------------------- dataclass fields


def _unwrap(annotation: ast.AST) -> tuple[ast.AST, bool]:
    """``Optional[X]`` / ``X | None`` -> (X, True)."""
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) in ("Optional", "typing.Optional"):
        return annotation.slice, True
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        if ast.unparse(annotation.right) == "None":
            return annotation.left, True
        if ast.unparse(annotation.left) == "None":
            return annotation.right, True
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) in ("Union", "typing.Union"):
        elts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        rest = [e for e in elts if ast.unparse(e) != "None"]
        if len(rest) == 1:
            return rest[0], True
    return annotation, False


def _field_default(value: ast.AST | None, scope: Scope) -> tuple[Any, dict[str, Any]]:
    """(default, argparse_meta) of a dataclass field's right-hand side."""
    if value is None:
        return _UNKNOWN, {}
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field", "msgspec.field"):
        kw = {k.arg: k.value for k in value.keywords if k.arg}
        default = scope.eval(kw.get("default")) if "default" in kw else _UNKNOWN
        if "default_factory" in kw:
            factory = ast.unparse(kw["default_factory"])
            default = {"list": [], "dict": {}}.get(factory, _UNKNOWN)
            if isinstance(kw["default_factory"], ast.Lambda):
                default = scope.eval(kw["default_factory"].body)
        meta: dict[str, Any] = {}
        metadata = kw.get("metadata")
        if isinstance(metadata, ast.Dict):
            for k, v in zip(metadata.keys, metadata.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                    for mk, mv in zip(v.keys, v.values, strict=True):
                        if isinstance(mk, ast.Constant):
                            meta[mk.value] = mv
        return default, meta
    return scope.eval(value), {}


def _type_info(annotation: ast.AST, scope: Scope) -> tuple[str, list[Any] | None, Any]:
    """(type, choices, nargs) the way Megatron's ArgumentGroupFactory / SGLang's dataclass CLI infer them."""
    inner, _optional = _unwrap(annotation)
    text = ast.unparse(inner)
    if text in ("int", "float", "str"):
        return text, None, None
    if text == "bool":
        return "bool", None, 0
    if isinstance(inner, ast.Subscript):
        head = ast.unparse(inner.value)
        if head in ("Literal", "typing.Literal"):
            elts = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
            values = [scope.eval(e) for e in elts]
            if all(v is not _UNKNOWN for v in values) and values:
                kind = {int: "int", float: "float", str: "str"}.get(type(values[0]), "any")
                return kind, values, None
        if head in ("list", "List", "typing.List"):
            elem = ast.unparse(inner.slice)
            return {"int": "int", "float": "float", "str": "str"}.get(elem, "any"), None, "+"
    members = scope.enum_members(text.rsplit(".", 1)[-1])
    if members is not None:
        return "str", members, None
    return "any", None, None


def _class_fields(name: str, scope: Scope, depth: int = 0) -> list[tuple[str, ast.AST, ast.AST | None]]:
    """(name, annotation, value) of a dataclass and its bases, base fields first, overrides last."""
    cls = scope.classes.get(name)
    if cls is None or depth > 8:
        return []
    out: list[tuple[str, ast.AST, ast.AST | None]] = []
    for base in cls.bases:
        out += _class_fields(ast.unparse(base).rsplit(".", 1)[-1], scope, depth + 1)
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if ast.unparse(node.annotation).startswith(("ClassVar", "InitVar")):
                continue
            if isinstance(node.value, ast.Call) and any(k.arg == "init" and ast.unparse(k.value) == "False"
                                                        for k in node.value.keywords):
                out = [f for f in out if f[0] != node.target.id]
                continue
            out = [f for f in out if f[0] != node.target.id] + [(node.target.id, node.annotation, node.value)]
    return out


def megatron_factory_flags(fn: ast.AST, call: ast.Call, scope: Scope) -> list[Flag]:
    """Flags ``ArgumentGroupFactory(Config, exclude=[...])`` generates from a Megatron config dataclass."""
    if not call.args:
        return []
    cls_name = ast.unparse(call.args[0]).rsplit(".", 1)[-1]
    local = _local_constants(fn, scope)
    exclude_node = next((k.value for k in call.keywords if k.arg == "exclude"), None)
    exclude = scope.eval(exclude_node, local) if exclude_node is not None else []
    exclude = set(exclude) if isinstance(exclude, list) else set()
    flags: list[Flag] = []
    for fname, annotation, value in _class_fields(cls_name, scope):
        if fname in exclude or fname.startswith("_"):
            continue
        default, meta = _field_default(value, scope)
        ftype, choices, nargs = _type_info(annotation, scope)
        action = "store"
        names = ["--" + fname.replace("_", "-")]
        if ftype == "bool":
            action = "store_true" if default is False or default is _UNKNOWN else "store_false"
            if action == "store_false":
                names = ["--no-" + fname.replace("_", "-"), "--disable-" + fname.replace("_", "-")]
        if meta:
            arg_names = scope.eval(meta.get("arg_names")) if "arg_names" in meta else None
            if isinstance(arg_names, list):
                names = [n for n in arg_names if isinstance(n, str)]
            if "type" in meta:
                ftype = _type_name(meta["type"])
            if "nargs" in meta:
                nargs = scope.eval(meta["nargs"])
                nargs = None if nargs is _UNKNOWN else nargs
            if "choices" in meta:
                value_choices = scope.eval(meta["choices"])
                choices = value_choices if isinstance(value_choices, list) else None
            if "default" in meta:
                default = scope.eval(meta["default"])
            if "action" in meta:
                action = _action_name(meta["action"])
                if action in ("store_true", "store_false", "store_const"):
                    ftype, nargs = "bool", 0
                elif action == "custom":
                    ftype = "any"
        if ftype == "bool" and action == "store":  # type=bool through metadata: a value flag
            ftype = "any"
        for name in names:
            flags.append(Flag(name=name, source="megatron", dest=fname, type=ftype, choices=_jsonable(choices),
                              default=_jsonable(default), nargs=_jsonable(nargs) if nargs is not _UNKNOWN else None,
                              action=action))
    return flags


def sglang_dataclass_flags(cls: ast.ClassDef, scope: Scope) -> tuple[list[Flag], dict[str, Any]]:
    """Flags SGLang's ``add_cli_args_from_dataclass`` derives from ``A[T, "help" | Arg(...)]`` fields,
    and every field's default (for ``default=ServerArgs.x`` in the manual calls)."""
    flags: list[Flag] = []
    defaults: dict[str, Any] = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        default, _ = _field_default(node.value, scope)
        defaults[name] = default
        ann = node.annotation
        if not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("A", "Annotated", "typing.Annotated")):
            continue
        parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        raw_type, meta_nodes = parts[0], parts[1:]
        meta: dict[str, ast.AST] | None = None
        for m in meta_nodes:
            if isinstance(m, ast.Call) and ast.unparse(m.func) == "Arg":
                meta = {k.arg: k.value for k in m.keywords if k.arg}
                break
            if isinstance(m, (ast.Constant, ast.JoinedStr)) and (not isinstance(m, ast.Constant) or isinstance(m.value, str)):
                meta = {}
                break
        if meta is None or ast.unparse(meta.get("no_cli", ast.Constant(False))) == "True":
            continue
        cli_name = scope.eval(meta["cli_name"]) if "cli_name" in meta else None
        cli_name = cli_name if isinstance(cli_name, str) else "--" + name.replace("_", "-")
        aliases = scope.eval(meta["aliases"]) if "aliases" in meta else []
        names = [cli_name] + ([a for a in aliases if isinstance(a, str)] if isinstance(aliases, list) else [])
        ftype, choices, nargs = _type_info(raw_type, scope)
        action = "store"
        if "action" in meta:
            action = _action_name(meta["action"])
            ftype, nargs = ("bool", 0) if action in ("store_true", "store_false", "store_const") else ("any", "?")
        elif ftype == "bool":
            action = "store_true"
        if "type_parser" in meta and action == "store":
            ftype = "any"
            if nargs == "+":
                nargs = None
        if "choices" in meta:
            value = scope.eval(meta["choices"])
            choices = list(value) if isinstance(value, (list, set, tuple)) else None
        if "nargs" in meta:
            value = scope.eval(meta["nargs"])
            nargs = value if value is not _UNKNOWN else nargs
        for flag_name in names:
            flags.append(Flag(name=flag_name, source="sglang", dest=name, type=ftype, choices=_jsonable(choices),
                              default=_jsonable(default), nargs=_jsonable(nargs), action=action))
    return flags, defaults


# --------------------------------------------------------------------------- sources


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def slime_flags(src: Path) -> tuple[list[Flag], dict[str, Any], set[str]]:
    """slime's own flags, the Megatron defaults slime resets (``reset_arg``), and the SGLang fields it skips."""
    flags: list[Flag] = []
    resets: dict[str, Any] = {}
    skipped: set[str] = set()
    for fname in ("slime_utils_arguments.py", "slime_backends_megatron_utils_arguments.py",
                  "slime_backends_sglang_utils_arguments.py"):
        path = src / fname
        if not path.exists():
            continue
        tree = _parse(path)
        scope = Scope()
        scope.add_module(tree)
        flags += argparse_flags(tree, scope, "slime")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "reset_arg" and len(node.args) >= 2:
                name = scope.eval(node.args[1])
                if isinstance(name, str):
                    kw = {k.arg: k.value for k in node.keywords if k.arg}
                    resets[name] = {"default": _jsonable(scope.eval(kw["default"])) if "default" in kw else None,
                                    "action": _action_name(kw.get("action")) if "action" in kw else None,
                                    "type": _type_name(kw["type"]) if "type" in kw else None}
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "skipped_args" for t in node.targets):
                value = scope.eval(node.value)
                if isinstance(value, list):
                    skipped |= set(value)
    return flags, resets, skipped


def megatron_flags(root: Path) -> list[Flag]:
    """Megatron-LM's training flags: explicit ``add_argument`` calls and dataclass-generated groups."""
    scope = Scope()
    for path in sorted((root / "megatron").rglob("*.py")):
        try:
            scope.add_module(_parse(path))
        except SyntaxError:
            continue
    tree = _parse(root / "megatron" / "training" / "arguments.py")
    scope.add_module(tree)
    flags = argparse_flags(tree, scope, "megatron")
    for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ArgumentGroupFactory"):
                flags += megatron_factory_flags(fn, node, scope)
    return flags


def sglang_flags(root: Path, skipped: set[str]) -> list[Flag]:
    """SGLang ServerArgs as slime registers them: ``--sglang-`` prefix, slime's skipped fields left out."""
    path = root / "sglang" / "srt" / "server_args.py"
    tree = _parse(path)
    scope = Scope()
    scope.add_module(tree)
    cls = scope.classes["ServerArgs"]
    fields_, defaults = sglang_dataclass_flags(cls, scope)
    add_cli = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    manual = argparse_flags(ast.Module(body=[add_cli], type_ignores=[]), scope, "sglang", defaults_from=defaults)
    out = []
    for flag in fields_ + manual:
        if flag.dest in skipped:
            continue
        flag.name = "--sglang-" + flag.name[2:]
        flag.dest = "sglang_" + flag.dest
        out.append(flag)
    return out


def router_flags(root: Path) -> list[Flag]:
    """sglang-router's RouterArgs with ``use_router_prefix=True, exclude_host_port=True`` (``--router-*``)."""
    path = root / "sglang_router" / "router_args.py"
    tree = _parse(path)
    scope = Scope()
    scope.add_module(tree)
    cls = scope.classes["RouterArgs"]
    defaults = {n.target.id: _field_default(n.value, scope)[0] for n in cls.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    add_cli = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    flags = argparse_flags(ast.Module(body=[add_cli], type_ignores=[]), scope, "router", defaults_from=defaults)
    # the prefix is a parameter: resolve it the way slime calls it
    out = []
    for flag in flags:
        if not flag.name.startswith("--router-"):
            if flag.name in ("--host", "--port"):
                continue  # exclude_host_port=True
            flag.name = "--router-" + flag.name[2:]
        out.append(flag)
    return out


def build(slime_src: Path, megatron_src: Path | None, sglang_src: Path | None) -> dict[str, Any]:
    own, resets, skipped = slime_flags(slime_src)
    groups: list[list[Flag]] = []
    sources = {"slime": PINS["slime"]}
    if megatron_src is not None:
        groups.append(megatron_flags(megatron_src))
        sources["megatron"] = PINS["megatron"]
    if sglang_src is not None:
        groups.append(sglang_flags(sglang_src, skipped))
        sources["sglang"] = PINS["sglang"]
        if (sglang_src / "sglang_router" / "router_args.py").exists():
            groups.append(router_flags(sglang_src))
            sources["router"] = PINS["router"]
    flags: dict[str, dict[str, Any]] = {}
    for group in groups + [own]:  # slime's own definitions win (it registers them last or resets them)
        for flag in group:
            flags[flag.name] = flag.to_json()
    for name, reset in resets.items():
        entry = flags.setdefault(name, {"source": "slime", "dest": name[2:].replace("-", "_"), "type": reset["type"] or "str",
                                        "action": "store"})
        if reset["action"] in ("store_true", "store_false"):
            entry.update(type="bool", nargs=0, action=reset["action"])
        if reset["type"]:
            entry["type"] = reset["type"]
        entry.pop("default", None)
        if reset["default"] is not None:
            entry["default"] = reset["default"]
        elif reset["action"] == "store_true":
            entry["default"] = False
        entry["source"] = entry["source"] + "+slime-default"
    counts: dict[str, int] = {}
    for entry in flags.values():
        key = entry["source"].split("+")[0]
        counts[key] = counts.get(key, 0) + 1
    return {
        "about": "Flags slime's train.py accepts, generated by tools/config/build_slime_schema.py from the "
                 "argument definitions of the pinned sources; do not edit by hand.",
        "sources": sources,
        "counts": dict(sorted(counts.items())),
        "flags": dict(sorted(flags.items())),
    }


def dumps(schema: dict[str, Any]) -> str:
    """JSON with one flag per line: small, and diffs well when upstream adds a flag."""
    head = {k: v for k, v in schema.items() if k != "flags"}
    lines = [json.dumps(head, indent=1)[:-2] + ',\n "flags": {']
    items = list(schema["flags"].items())
    for i, (name, entry) in enumerate(items):
        lines.append(f"  {json.dumps(name)}: {json.dumps(entry, separators=(',', ':'))}" + ("," if i < len(items) - 1 else ""))
    lines.append(" }\n}\n")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slime-src", type=Path, required=True, help="folder with slime's three argument files")
    parser.add_argument("--megatron-src", type=Path, help="a Megatron-LM checkout at the pinned commit")
    parser.add_argument("--sglang-src", type=Path, help="the unpacked sglang (and sglang-router) wheels")
    parser.add_argument("-o", "--output", type=Path, default=Path(__file__).with_name("slime_schema.json"))
    args = parser.parse_args(argv)
    schema = build(args.slime_src, args.megatron_src, args.sglang_src)
    args.output.write_text(dumps(schema), encoding="utf-8")
    print(f"{args.output}: {len(schema['flags'])} flags ({', '.join(f'{k} {v}' for k, v in schema['counts'].items())})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
