"""One tool registry for every front door: CLI, agent, MCP, web, Slack.

A tool is a plain typed function ``fn(ctx: ToolContext, **params) -> result``, registered
once with :func:`tool`, which also takes what every front door needs from it: the text a
model reads (``render``), the one-line outcome of a step (``step``), the attachment kinds it
reads (``reads``: which calls the attached files call for) and its evidence adapter
(``evidence``). Its docstring becomes the description a model reads, its typed
parameters become the JSON schema (``ctx`` never appears there). Front doors build the
:class:`ToolContext` (which paths may be read, how long the call may take) and call
:meth:`Registry.call`, which validates the arguments, runs the tool and passes the result
through **one** redaction step before anyone sees it: the result object itself, its JSON
form and the bounded text a model gets are all redacted here.

Tools never widen their own roots and never write: a path outside ``ctx.confinement`` is
refused with a message the caller (or model) can read.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import threading
import time
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.confine import Confinement, redact, redact_value
from rlmedic.errors import UserError

#: Characters of tool output a model sees per call (the CLI and JSON get everything).
DEFAULT_MAX_TEXT_CHARS = 4000
#: The most characters of arguments one call takes (JSON): a path or query is never this long, and a
#: model (or an MCP client) sending megabytes gets one short error instead of megabytes echoed back.
MAX_ARGUMENT_CHARS = 100_000
#: The most characters of an error line (errors can quote an argument).
MAX_ERROR_CHARS = 1000
#: The kinds of attached file the front doors tell apart (``rlmedic.agent.investigate.classify``), in the
#: order the calls they call for run: the environment first, then logs, GPU snapshots, configs (YAML),
#: launch scripts, checkpoint folders.
ATTACHMENT_KINDS = ("env", "log", "snapshot", "config", "script", "checkpoints")

class ToolTimeout(UserError):
    """The context's deadline passed or the caller cancelled the request."""


@dataclass
class ToolContext:
    """What a front door allows one request: readable roots, a deadline, output bounds.

    Built by the front door (CLI from the paths the user typed, web from the session's
    upload folder, Slack from its download folder, the agent from the conversation's
    attachments); never part of a tool's schema, so a model cannot change it.
    """

    confinement: Confinement
    deadline: float | None = None  # time.monotonic() after which tools stop
    cancel: threading.Event | None = None
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    index_dir: Path | None = None
    #: Inputs the front door opened itself and vouches for, by the name a tool is given for them:
    #: stdin and pipes the user typed, log text pasted into a question, the live windows ``watch``
    #: follows. Never part of a schema: a model can name them, not create them.
    streams: dict[str, Any] = field(default_factory=dict)
    _knowledge: Any = field(default=None, repr=False)

    @classmethod
    def for_roots(
        cls,
        roots: Iterable[str | os.PathLike[str]],
        *,
        env_roots: bool = True,
        deadline_s: float | None = None,
        index_dir: str | os.PathLike[str] | None = None,
        cancel: threading.Event | None = None,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    ) -> ToolContext:
        """A context that may read exactly ``roots`` (plus ``RLMEDIC_ALLOWED_ROOTS`` when ``env_roots``)."""
        confinement = Confinement.for_paths(roots) if env_roots else Confinement.exactly(roots)
        return cls(
            confinement=confinement,
            deadline=None if deadline_s is None else time.monotonic() + deadline_s,
            cancel=cancel,
            max_text_chars=max_text_chars,
            index_dir=Path(index_dir) if index_dir else None,
        )

    def check_time(self) -> None:
        """Raise :class:`ToolTimeout` when the request was cancelled or ran out of time."""
        if self.cancel is not None and self.cancel.is_set():
            raise ToolTimeout("cancelled")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ToolTimeout("the request ran out of time")

    def split_streams(self, names: Iterable[str]) -> tuple[list[str], list[Any]]:
        """``names`` split into paths (read through the confinement) and the vouched streams they name."""
        paths: list[str] = []
        streams: list[Any] = []
        for name in names:
            if name in self.streams:
                streams.append(self.streams[name])
            else:
                paths.append(name)
        return paths, streams

    def knowledge(self) -> Any:
        """The knowledge base (opened on first use; it loads the embedding model lazily)."""
        if self._knowledge is None:
            from rlmedic.knowledge.index import KnowledgeBase  # lazy: the layer below, heavy to import

            self._knowledge = KnowledgeBase(self.index_dir)
        return self._knowledge


@dataclass
class ToolResult:
    """A tool call's outcome, already redacted.

    ``value`` is the tool's result object (for renderers that want the types), ``data``
    its JSON form, ``text`` the bounded form for a model, ``error`` one line when
    ``ok`` is false.
    """

    name: str
    ok: bool
    value: Any = None
    data: Any = None
    text: str = ""
    error: str = ""
    seconds: float = 0.0
    arguments: dict[str, Any] = field(default_factory=dict)
    #: served from :mod:`rlmedic.toolcache` (same arguments, same file contents)
    cached: bool = False
    evidence: Any = None  # rlmedic.types.Evidence: what the call established, in the shared vocabulary

    def unwrap(self) -> Any:
        """The value, or the tool's error raised as a :class:`UserError` (for the CLI: one line, exit 2)."""
        if not self.ok:
            raise UserError(self.error)
        return self.value

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "arguments": self.arguments, "data": self.data,
                "error": self.error or None, "seconds": round(self.seconds, 3)}


@dataclass
class Tool:
    """A registered tool: the function, its description, its parameter model and text renderer."""

    name: str
    fn: Callable[..., Any]
    description: str
    render: Callable[[Any], str] | None = None
    #: the parameter naming the files the result depends on alone: results are cached by their content
    cache_paths: str = ""
    evidence: Callable[[Any], Any] | None = None  # result -> rlmedic.types.Evidence
    #: the result's JSON form -> one line saying what the call found (web, Slack and chat steps)
    step: Callable[[Any], str] | None = None
    #: parameter -> the attachment kinds it takes (:data:`ATTACHMENT_KINDS`); see :meth:`Registry.plan`
    reads: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: what a model calls it for, a phrase after its name (``for logs``): the system prompt's and the MCP
    #: server's list of tools (:meth:`Registry.guide`) are made of these
    use: str = ""
    #: name -> (annotation, default or ``...``), from the signature (checked when the tool registers)
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict, repr=False)
    _params: type | None = field(default=None, repr=False)

    @property
    def params(self) -> type:
        """A pydantic model of the parameters (ctx excluded), built when first asked for: a command calls
        one tool, and building all eleven models cost every cold command ~10 ms."""
        if self._params is None:
            self._params = _params_model(self.name, self.fields)
        return self._params

    def step_line(self, data: Any) -> str:
        """One line saying what a successful call found: the tool's ``step``, or ``done``."""
        return (self.step(data) if self.step is not None and data is not None else "") or "done"

    def takes_many(self, param: str) -> bool:
        """Whether ``param`` is a list (one call takes every attachment) rather than one value."""
        return typing.get_origin(_bare(self.fields[param][0])) is list

    def bind(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Every parameter's value for a call: ``arguments`` checked against the signature, defaults filled in.

        Arguments that already are what the signature declares (a ``str`` for ``str``, a list of
        ``str`` for ``list[str]``, within its :class:`Param` bounds) are taken as they are, with no
        pydantic: a command line's call is always such, and importing pydantic costs a cold
        command ~0.15 s. Anything else (a model's ``"5"`` for an ``int``, a wrong type, an unknown
        name) goes through the pydantic model (:attr:`params`), which converts it or raises
        ``ValidationError``: one set of rules, the fast path only ever accepting what pydantic
        accepts unchanged (``tests/test_registry_bind.py`` checks that on random values).
        """
        if set(arguments) <= set(self.fields):
            values: dict[str, Any] = {}
            for name, (hint, default) in self.fields.items():
                if name in arguments:
                    if not _as_declared(hint, arguments[name]):
                        break
                    values[name] = arguments[name]
                elif default is ...:
                    break
                else:
                    values[name] = default
            else:
                return values
        params = self.params.model_validate(arguments)
        return {name: getattr(params, name) for name in self.fields}

    @property
    def summary(self) -> str:
        """The first paragraph of the description, on one line (what a tool list shows)."""
        return " ".join(self.description.split("\n\n", 1)[0].split())

    @property
    def guide_line(self) -> str:
        """Its name and what it is for, as the system prompt lists it: ``"`diagnose` for logs (...)"``."""
        return f"`{self.name}` {self.use or '(' + self.summary.rstrip('.') + ')'}"

    @property
    def schema(self) -> dict[str, Any]:
        """JSON schema of the parameters, as a model or an MCP client receives it."""
        schema = self.params.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return schema


class Registry:
    """The set of tools; :data:`REGISTRY` holds the built-in ones.

    ``load`` (called once, on first use) registers the tools: for :data:`REGISTRY` a plain
    import of :mod:`rlmedic.tools.toolset`, deferred so that importing this module (for
    :class:`ToolContext`, :func:`bounded`) stays cheap."""

    def __init__(self, load: Callable[[], None] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._pending_load = load
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ registration

    def register(self, fn: Callable[..., Any], *, name: str | None = None,
                 render: Callable[[Any], str] | None = None, cache_paths: str = "",
                 evidence: Callable[[Any], Any] | None = None, step: Callable[[Any], str] | None = None,
                 reads: dict[str, str | tuple[str, ...]] | None = None, use: str = "") -> Tool:
        tool_name = name or fn.__name__
        if tool_name in self._tools:
            raise ValueError(f"tool {tool_name!r} is registered twice")
        description = inspect.cleandoc(fn.__doc__ or "")
        if not description:
            raise ValueError(f"tool {tool_name!r} needs a docstring: it is the description a model reads")
        kinds = {param: (k,) if isinstance(k, str) else tuple(k) for param, k in (reads or {}).items()}
        names = _param_fields(fn, tool_name)
        entry = Tool(name=tool_name, fn=fn, description=description, render=render, cache_paths=cache_paths,
                     evidence=evidence, step=step, reads=kinds, use=" ".join(use.split()), fields=names)
        if cache_paths and cache_paths not in names:
            raise ValueError(f"tool {tool_name!r}: cache_paths names no parameter {cache_paths!r}")
        for param, taken in kinds.items():
            if param not in names:
                raise ValueError(f"tool {tool_name!r}: reads names no parameter {param!r}")
            unknown = [k for k in taken if k not in ATTACHMENT_KINDS]
            if unknown or not taken:
                raise ValueError(f"tool {tool_name!r}: {param!r} reads unknown attachment kinds {unknown}; "
                                 f"the kinds are: {', '.join(ATTACHMENT_KINDS)}")
        self._tools[tool_name] = entry
        return entry

    def _load(self) -> None:
        if self._pending_load is not None:
            with self._lock:
                load, self._pending_load = self._pending_load, None
                if load is not None:
                    load()

    def tools(self) -> list[Tool]:
        """Every tool: those that read attachments first, in the order of their kinds
        (:data:`ATTACHMENT_KINDS`: ``diagnose`` leads the logs), then the others as registered."""
        self._load()
        last = len(ATTACHMENT_KINDS)

        def rank(t: Tool) -> int:
            return min((ATTACHMENT_KINDS.index(k) for k in next(iter(t.reads.values()))), default=last) if t.reads else last

        return sorted(self._tools.values(), key=rank)  # stable: registration order within a rank

    def guide(self) -> list[str]:
        """Each tool with what it is for, in :meth:`tools` order: ``"`diagnose` for logs (...)"``.

        The system prompt and the MCP server's instructions name the tools with these, so a tool
        added in its own file is named there too. A tool without ``use`` is named with its summary.
        """
        return [t.guide_line for t in self.tools()]

    def get(self, name: str) -> Tool | None:
        self._load()
        return self._tools.get(name)

    def plan(self, attached: Iterable[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
        """The calls that attached files call for, from each tool's ``reads``.

        ``attached`` is ``(kind, path)`` in the order the files were attached. The first entry
        of a tool's ``reads`` is what the tool is called for: a list parameter takes every
        attachment of one kind in one call (a call per kind: a YAML config and a launch script are
        not compared), a single-valued one makes one call per attachment.
        Its further entries add context to each call: a list parameter gets every attachment
        of its kinds (possibly none), a single-valued one the attachment of its kinds when there
        is exactly one (more would be a guess). A call whose arguments the tool would refuse
        (too few files for it) is not planned. Calls run in the order of :meth:`tools` (the
        tool's first kind in :data:`ATTACHMENT_KINDS`, then registration), one tool's in the order attached.
        """
        attached = list(attached)
        planned: list[tuple[str, dict[str, Any]]] = []
        for entry in self.tools():
            if not entry.reads:
                continue
            (param, kinds), *context = entry.reads.items()
            groups = ([[path for kind, path in attached if kind == k] for k in kinds] if entry.takes_many(param)
                      else [[path] for kind, path in attached if kind in kinds])
            for group in (g for g in groups if g):
                args: dict[str, Any] = {param: group if entry.takes_many(param) else group[0]}
                for other, other_kinds in context:
                    paths = [path for kind, path in attached if kind in other_kinds]
                    if entry.takes_many(other):
                        args[other] = paths
                    elif len(paths) == 1:
                        args[other] = paths[0]
                try:
                    entry.bind(args)
                except Exception:  # noqa: BLE001 - pydantic.ValidationError: the tool would refuse the call
                    continue
                planned.append((entry.name, args))
        return planned

    # ------------------------------------------------------------------ calls

    def call(self, name: str, arguments: dict[str, Any] | None, ctx: ToolContext, *, catch_bugs: bool = True,
             use_cache: bool = True) -> ToolResult:
        """Validate ``arguments``, run the tool inside ``ctx``, redact everything it returns.

        User errors (a path outside the roots, a missing file, bad arguments, an unknown
        tool) come back as ``ok=False`` with one readable line. With ``catch_bugs`` (the
        default, for models and servers) any other exception does too; the CLI passes
        ``catch_bugs=False`` so a bug keeps its traceback. ``use_cache=False`` skips the
        content-keyed result cache (a one-shot command would only pay for hashing).
        """
        started = time.monotonic()
        arguments = dict(arguments or {})
        shown_args = bounded_value(redact_value(arguments))
        name = bounded(str(name), 100)
        entry = self.get(name)
        if entry is None:
            known = ", ".join(sorted(self._tools))
            return ToolResult(name, False, error=f"unknown tool {name!r}; the tools are: {known}", arguments=shown_args)
        size = len(json.dumps(arguments, default=str))
        if size > MAX_ARGUMENT_CHARS:
            return ToolResult(name, False, arguments=shown_args, seconds=time.monotonic() - started,
                              error=f"{name}: arguments too large ({size} characters; at most {MAX_ARGUMENT_CHARS})")
        try:
            params = entry.bind(arguments)
        except Exception as exc:  # pydantic.ValidationError
            return ToolResult(name, False, error=_error(_validation_message(name, exc)), arguments=shown_args,
                              seconds=time.monotonic() - started)
        cache_key = self._cache_key(entry, params, ctx) if use_cache else None
        if cache_key:
            from rlmedic.toolcache import TOOL_CACHE

            hit = TOOL_CACHE.get(cache_key)
            if hit is not None:
                value, data, text = hit
                return ToolResult(name, True, value=value, data=data, text=text, arguments=shown_args,
                                  seconds=time.monotonic() - started, cached=True,
                                  evidence=_evidence(entry, value, shown_args))
        try:
            ctx.check_time()
            value = entry.fn(ctx, **params)
        except UserError as exc:
            return ToolResult(name, False, error=_error(str(exc)), arguments=shown_args, seconds=time.monotonic() - started)
        except Exception as exc:
            if not catch_bugs:
                raise
            return ToolResult(name, False, error=_error(f"internal error in {name}: {type(exc).__name__}: {exc}"),
                              arguments=shown_args, seconds=time.monotonic() - started)
        value = redact_value(value)  # the result object itself, for renderers that take types
        data = redact_value(to_jsonable(value))
        text = bounded(redact(entry.render(value) if entry.render else _default_text(data)), ctx.max_text_chars)
        if cache_key and self._cache_key(entry, params, ctx) == cache_key:  # the files did not change meanwhile
            from rlmedic.toolcache import TOOL_CACHE

            TOOL_CACHE.put(cache_key, value, data, text)
        return ToolResult(name, True, value=value, data=data, text=text, arguments=shown_args,
                          seconds=time.monotonic() - started, evidence=_evidence(entry, value, shown_args))

    @staticmethod
    def _cache_key(entry: Tool, params: dict[str, Any], ctx: ToolContext) -> str | None:
        """The content-keyed cache entry of this call (see :mod:`rlmedic.toolcache`), or None: not cacheable."""
        if not entry.cache_paths:
            return None
        from rlmedic.toolcache import TOOL_CACHE

        if not TOOL_CACHE.enabled():
            return None
        paths = params[entry.cache_paths] or []
        if any(str(p) in ctx.streams for p in paths):
            return None  # a stream (stdin, pasted text) is read once: nothing to key it by
        arguments = {"args": params, "max_text_chars": ctx.max_text_chars,
                     # caps and engine choices change results: RLMEDIC_MAX_SCAN_BYTES, RLMEDIC_SCAN_ENGINE, ...
                     "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("RLMEDIC_"))}
        return TOOL_CACHE.key(entry.name, arguments, [str(p) for p in paths], ctx.confinement)


def _builtin_tools() -> None:
    """Register the built-in tools: importing the module that defines them runs their ``@tool``."""
    from rlmedic.tools import toolset  # noqa: F401


REGISTRY = Registry(_builtin_tools)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None,
         render: Callable[[Any], str] | None = None, cache_paths: str = "",
         evidence: Callable[[Any], Any] | None = None, step: Callable[[Any], str] | None = None,
         reads: dict[str, str | tuple[str, ...]] | None = None, use: str = "") -> Any:
    """Register ``fn`` in :data:`REGISTRY` (``@tool`` or ``@tool(render=..., evidence=...)``); returns ``fn`` unchanged.

    ``render`` is the result as the bounded text a model reads (default: its JSON).
    ``cache_paths`` names the parameter holding the files the result depends on alone
    (nothing else: no clock, no GPU, no index): such results are cached by file content.
    ``evidence`` turns the tool's result into :class:`rlmedic.types.Evidence`, the one
    interface answers are composed from; a tool without one contributes nothing to an answer.
    ``step`` turns the result's JSON form into the one line the web app, Slack and the chat
    show for the step (default ``done``). ``reads`` maps parameters to the attachment kinds
    they take (:data:`ATTACHMENT_KINDS`), first the one the tool is called for: with it, the
    agent runs the tool on attached files by itself (:meth:`Registry.plan`). ``use`` says what a model
    calls it for, after its name (``for logs``): the system prompt lists the tools so (:meth:`Registry.guide`).
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        REGISTRY.register(f, name=name, render=render, cache_paths=cache_paths, evidence=evidence, step=step,
                          reads=reads, use=use)
        return f

    return wrap(fn) if fn is not None else wrap


def _evidence(entry: Tool, value: Any, arguments: dict[str, Any]) -> Any:
    """The tool's Evidence for an (already redacted) result, tagged with the call's identity."""
    from rlmedic.types import Evidence

    evidence = entry.evidence(value) if entry.evidence else Evidence()
    evidence.tool = entry.name
    evidence.call = call_key(entry.name, arguments)
    evidence.at = time.time()
    return evidence


def call_key(name: str, arguments: dict[str, Any]) -> str:
    """A call's identity (tool and redacted arguments): the same call later reuses its evidence."""
    return name + json.dumps(redact_value(dict(arguments)), sort_keys=True, default=str)


# ---------------------------------------------------------------------- schema


def _param_fields(fn: Callable[..., Any], tool_name: str) -> dict[str, tuple[Any, Any]]:
    """``fn``'s parameters after ``ctx``: name -> (type, default or ``...``); checked when a tool registers."""
    hints = typing.get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].name != "ctx":
        raise ValueError(f"tool {tool_name!r}: the first parameter must be ctx: ToolContext")
    fields: dict[str, Any] = {}
    for p in params[1:]:
        if p.name not in hints:
            raise ValueError(f"tool {tool_name!r}: parameter {p.name!r} needs a type")
        fields[p.name] = (hints[p.name], ... if p.default is inspect.Parameter.empty else p.default)
    return fields


@dataclass(frozen=True)
class Param:
    """What a tool says of one parameter, in ``Annotated[type, Param(...)]``: the description a model
    reads in the JSON schema and the bounds a value must keep (``ge``/``le`` for numbers,
    ``min_length``/``max_length`` for strings and lists). The registry turns it into pydantic's
    ``Field`` when it builds the schema; tools do not import pydantic."""

    description: str = ""
    ge: float | None = None
    le: float | None = None
    min_length: int | None = None
    max_length: int | None = None

    def field(self) -> Any:
        from pydantic import Field

        bounds = {k: v for k, v in dataclasses.asdict(self).items() if k != "description" and v is not None}
        return Field(description=self.description or None, **bounds)

    def holds(self, value: Any) -> bool:
        """Whether ``value`` (already of the declared type) keeps these bounds."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (self.ge is None or value >= self.ge) and (self.le is None or value <= self.le)
        if isinstance(value, (str, list, dict)):
            return ((self.min_length is None or len(value) >= self.min_length)
                    and (self.max_length is None or len(value) <= self.max_length))
        return True


def _bare(hint: Any) -> Any:
    """A hint without its ``Annotated`` metadata."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint


#: The types the fast path of :meth:`Tool.bind` takes as they are (exact types: a bool is not an int).
_EXACT = (str, int, float, bool)


def _exactly(kind: type, value: Any) -> bool:
    """``value`` is of type ``kind`` itself; a string also encodes to UTF-8 (pydantic refuses lone
    surrogates in some strings: those go to it, which decides as it always did)."""
    if type(value) is not kind:
        return False
    if kind is str and not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            return False
    return True


def _as_declared(hint: Any, value: Any) -> bool:
    """Whether ``value`` already is what ``hint`` declares, within its :class:`Param` bounds, so that
    pydantic would take it unchanged. False means "ask pydantic", not "invalid"."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        inner, *meta = typing.get_args(hint)
        # other metadata (a pydantic Field, a validator) is pydantic's to apply
        return all(isinstance(m, Param) and m.holds(value) for m in meta) and _as_declared(inner, value)
    if hint is type(None):
        return value is None
    if hint in _EXACT:
        return _exactly(hint, value)
    if origin is typing.Union or origin is types.UnionType:
        return any(_as_declared(arm, value) for arm in typing.get_args(hint))
    if origin is typing.Literal:
        return any(type(value) is type(choice) and value == choice for choice in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return type(value) is list and item in _EXACT and all(_exactly(item, v) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint) or (Any, Any)
        return (type(value) is dict and key in _EXACT and item in _EXACT
                and all(_exactly(key, k) and _exactly(item, v) for k, v in value.items()))
    return False


def _params_model(tool_name: str, params: dict[str, tuple[Any, Any]]) -> type:
    """A pydantic model of a tool's parameters (:attr:`Tool.fields`: types and defaults from its
    signature; each :class:`Param` becomes pydantic's ``Field``)."""
    from pydantic import ConfigDict, create_model

    fields = {}
    for name, (hint, default) in params.items():
        if typing.get_origin(hint) is typing.Annotated:
            inner, *meta = typing.get_args(hint)
            hint = typing.Annotated[(inner, *(m.field() if isinstance(m, Param) else m for m in meta))]
        fields[name] = (hint, default)
    model_name = "".join(part.title() for part in tool_name.split("_")) + "Params"
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)


def _validation_message(name: str, exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return f"{name}: bad arguments: {exc}"
    parts = []
    for err in errors()[:5]:
        where = ".".join(str(x) for x in err.get("loc", ())) or "arguments"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return f"{name}: bad arguments: " + "; ".join(parts)


# ---------------------------------------------------------------------- redaction and forms


def to_jsonable(value: Any) -> Any:
    """The JSON form of a tool result: its ``to_dict()``, a pydantic dump, a dataclass, or itself."""
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return value.to_dict()
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value


def _default_text(data: Any) -> str:
    if isinstance(data, str):
        return data
    return json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))


def _error(text: str) -> str:
    """An error line as it leaves the registry: bounded first (a huge argument quoted), then redacted."""
    return redact(bounded(text, MAX_ERROR_CHARS))


def bounded_value(value: Any, limit: int = 300, _depth: int = 0) -> Any:
    """``value`` fit to show and keep (tool arguments in events, answers, logs): long strings cut,
    long lists and dicts shortened, nesting bounded."""
    if isinstance(value, str):
        return bounded(value, limit)
    if _depth > 6:
        return "..."
    if isinstance(value, dict):
        return {bounded(str(k), 100): bounded_value(v, limit, _depth + 1) for k, v in list(value.items())[:20]}
    if isinstance(value, (list, tuple)):
        return [bounded_value(v, limit, _depth + 1) for v in list(value)[:20]]
    return value


def bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with a note saying how much was left out (redact first)."""
    if limit <= 0 or len(text) <= limit:
        return text
    note = f"\n[... {len(text) - limit} more characters not shown]"
    return text[: max(0, limit - len(note))] + note
