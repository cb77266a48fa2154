"""The shared vocabulary between layers: findings, fixes, citations.

Every tool returns these (or plain dicts made from them); every renderer (terminal,
JSON, Gradio, Slack) takes them. No layer parses another layer's prose. ``str()`` is the
short text a terminal shows, ``to_dict()`` the JSON form, ``from_dict()`` reads a JSON form
back (a saved session), and a bad value (an unknown severity, a line range that is not two
numbers) is refused with one ``ValueError`` when the object is made.

They are plain keyword-only dataclasses, not pydantic models: every command imports this
module, and pydantic's import and model building cost each cold command ~0.15-0.25 s of CPU
(a third of a small ``diagnose``), for validation these few types do in a few lines.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

#: The category vocabulary shared by cards, log signatures, findings and cases.
CATEGORIES: tuple[str, ...] = (
    "oom_generation",
    "oom_training",
    "oom_weight_update",
    "sglang_crash",
    "sglang_connection",
    "nccl_timeout",
    "weight_sync",
    "nan_loss",
    "reward_collapse",
    "checkpoint_recovery",
    "config_constraint",
    "data_format",
    "ray_scheduling",
    "install_env",
    "performance",
    "other",
)

Severity = Literal["critical", "error", "warning", "info"]
SEVERITIES: tuple[str, ...] = ("critical", "error", "warning", "info")
FRAMEWORKS: tuple[str, ...] = ("areal", "slime", "verl", "sglang", "generic")


def severity_rank(severity: str) -> int:
    """0 for critical ... 3 for info; lower is worse."""
    return SEVERITIES.index(severity)


CitationKind = Literal["card", "doc", "log", "issue", "config"]
FixOp = Literal["set", "delete", "rename", "add_flag", "remove_flag", "remove_value", "action"]


def _one_of(owner: str, name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{owner}.{name}: {value!r} is not one of {', '.join(allowed)}")


def _known_fields(cls: type, data: Any) -> dict[str, Any]:
    """The entries of a JSON object that name a field of ``cls`` (derived keys such as ``text`` are dropped)."""
    if isinstance(data, cls):
        return {f.name: getattr(data, f.name) for f in dataclasses.fields(cls)}
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _each(owner: str, name: str, items: Any, kind: type) -> list[Any]:
    """``items`` as a list of ``kind``: each one already is, or is its JSON object."""
    if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
        raise ValueError(f"{owner}.{name}: expected a list of {kind.__name__}, got {type(items).__name__}")
    return [item if isinstance(item, kind) else kind.from_dict(item) for item in items]


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # a frozen dataclass's own __post_init__ may normalise its fields


_KINDS = get_args(CitationKind)
_OPS = get_args(FixOp)


@dataclass(frozen=True, kw_only=True)
class Citation:
    """Where a claim comes from.

    ``kind`` is ``card`` (a playbook card id), ``doc`` (a document path with heading and
    line range), ``log`` (a log file and line), ``issue`` (an upstream issue or thread) or
    ``config`` (a config file and line). ``str()`` is the terminal text; the JSON form
    (:meth:`to_dict`) keeps every field and adds that text as ``text``.
    """

    kind: CitationKind
    ref: str
    section: str = ""
    lines: tuple[int, int] | None = None
    url: str = ""

    def __post_init__(self) -> None:
        _one_of("Citation", "kind", self.kind, _KINDS)
        if self.lines is not None:
            lines = tuple(self.lines) if isinstance(self.lines, (list, tuple)) else ()
            if len(lines) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) for n in lines):
                raise ValueError(f"Citation.lines: expected two line numbers, got {self.lines!r}")
            _set(self, "lines", lines)

    @classmethod
    def from_dict(cls, data: Any) -> Citation:
        """A citation from its JSON form (``text`` is derived, not read)."""
        return cls(**_known_fields(cls, data))

    @classmethod
    def card(cls, card_id: str, section: str = "") -> Citation:
        return cls(kind="card", ref=card_id, section=section)

    @classmethod
    def doc(cls, page: str, section: str = "", lines: tuple[int, int] | None = None, url: str = "") -> Citation:
        return cls(kind="doc", ref=page, section=section, lines=lines, url=url)

    @classmethod
    def log(cls, file: str, line: int | None = None) -> Citation:
        return cls(kind="log", ref=file, lines=(line, line) if line is not None else None)

    @property
    def text(self) -> str:
        return str(self)

    def __str__(self) -> str:
        if self.kind == "card":
            text = f"card:{self.ref}"
            return f"{text} ({self.section})" if self.section else text
        if self.kind in ("log", "config"):
            return f"{self.ref}:{self.lines[0]}" if self.lines else self.ref
        text = self.ref
        if self.section:
            text += f" § {self.section}"
        if self.lines:
            text += f" (lines {self.lines[0]}-{self.lines[1]})"
        return text

    def to_dict(self) -> dict[str, Any]:
        """kind, ref, section, lines (a list or None), url, and ``text`` (what ``str()`` shows)."""
        return {"kind": self.kind, "ref": self.ref, "section": self.section,
                "lines": list(self.lines) if self.lines else None, "url": self.url, "text": str(self)}


def cite_dicts(citations: list[Citation] | tuple[Citation, ...]) -> list[dict[str, Any]]:
    """Citations in JSON: one object each, with ``text``."""
    return [c.to_dict() for c in citations]


@dataclass(frozen=True, kw_only=True)
class Fix:
    """One change to make: a config key or flag (``op`` set/delete/rename/add_flag/remove_flag) or a plain action.

    ``action`` is the one-line instruction; when empty, ``str()`` derives it from ``op``,
    ``key``, ``old`` and ``new``. ``key`` names an AReaL config key or a slime flag;
    ``framework`` tags a fix that applies to one framework only; ``rule`` names the
    config rule or remedy that proposed it.
    """

    action: str = ""
    op: FixOp = "action"
    key: str = ""
    old: Any = None
    new: Any = None
    why: str = ""
    framework: str = ""
    rule: str = ""
    citations: tuple[Citation, ...] = ()

    def __post_init__(self) -> None:
        _one_of("Fix", "op", self.op, _OPS)
        _set(self, "citations", tuple(_each("Fix", "citations", self.citations, Citation)))

    @classmethod
    def from_dict(cls, data: Any) -> Fix:
        """A fix from its field dict (``action`` as written; ``citations`` as objects)."""
        return cls(**_known_fields(cls, data))

    @property
    def citation(self) -> Citation | None:
        return self.citations[0] if self.citations else None

    @property
    def reason(self) -> str:
        return self.why

    def __str__(self) -> str:
        if self.action:
            return self.action
        if self.op == "action":
            return self.why
        if self.op in ("delete", "remove_flag"):
            return f"remove {self.key}"
        if self.op == "rename":
            return f"rename {self.key} to {self.new}"
        if self.op == "remove_value":
            return f"drop the value {self.old!r} after the switch {self.key}"
        return f"set {self.key} to {self.new}" + (f" (was {self.old})" if self.old is not None else "")

    def to_dict(self) -> dict[str, Any]:
        """The fix for JSON: ``reason`` repeats ``why`` and ``citation`` is the first of ``citations``."""
        return {
            "action": str(self),
            "op": self.op,
            "key": self.key,
            "old": self.old,
            "new": self.new,
            "why": self.why,
            "reason": self.why,
            "framework": self.framework,
            "rule": self.rule,
            "citation": self.citation.to_dict() if self.citation else None,
            "citations": cite_dicts(self.citations),
        }


@dataclass(kw_only=True)
class Finding:
    """Something a tool found, with the evidence that backs it.

    Log findings fill ``file``/``line``/``evidence``; config findings also ``key`` (the
    config key or flag), ``rule`` and ``suggestion`` (a "did you mean" value); their
    ``fixes`` are the edits that would resolve them. ``root`` is the index of the root
    finding a log finding cascades from.
    """

    id: str
    category: str = "other"
    severity: Severity
    summary: str
    file: str = ""
    line: int | None = None
    key: str = ""
    rule: str = ""
    suggestion: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    fixes: list[Fix] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    card: str = ""
    root: int | None = None

    def __post_init__(self) -> None:
        _one_of("Finding", "severity", self.severity, SEVERITIES)
        if not isinstance(self.evidence, dict):
            raise ValueError(f"Finding.evidence: expected an object, got {type(self.evidence).__name__}")
        self.fixes = _each("Finding", "fixes", self.fixes, Fix)
        self.citations = _each("Finding", "citations", self.citations, Citation)

    @classmethod
    def from_dict(cls, data: Any) -> Finding:
        """A finding from its field dict (what a saved session holds)."""
        return cls(**_known_fields(cls, data))

    @property
    def message(self) -> str:
        return self.summary

    @property
    def citation(self) -> Citation | None:
        return self.citations[0] if self.citations else None

    @property
    def fixable(self) -> bool:
        return bool(self.fixes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: ``fixes`` as one-line strings, ``fix_details`` and ``citations`` as objects;
        ``message`` repeats ``summary`` and ``citation`` is the first citation (the config contract)."""
        return {
            "id": self.id,
            "category": self.category,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "key": self.key,
            "rule": self.rule,
            "evidence": self.evidence,
            "summary": self.summary,
            "message": self.summary,
            "suggestion": self.suggestion or None,
            "fixes": [str(f) for f in self.fixes],
            "fix_details": [f.to_dict() for f in self.fixes],
            "fixable": self.fixable,
            "citation": self.citation.to_dict() if self.citation else None,
            "citations": cite_dicts(self.citations),
            "card": self.card,
            "root": self.root,
        }



UpstreamStatus = Literal["after_yours", "in_yours", "unknown"]


@dataclass(kw_only=True)
class UpstreamFix:
    """A commit in a framework's public history that likely fixed the user's failure.

    Found by :mod:`rlmedic.knowledge.history` from the traceback's frames and words. ``matched``
    says what tied it to the failure (``function verl/workers/actor.py:update_policy``,
    ``file ...``, ``module ...``, ``message``); ``release`` is the first release tag that
    contains it ("" = not released yet); ``status`` compares it with ``yours`` (the user's
    version of ``package``): ``after_yours`` (the fix is newer than what runs), ``in_yours``
    (already there: look elsewhere) or ``unknown``; ``strong`` says it may lead an answer.
    """

    repo: str
    commit: str
    subject: str
    pr: int | None = None
    date: str = ""  # YYYY-MM-DD
    release: str = ""
    matched: str = ""
    score: float = 0.0
    package: str = ""
    yours: str = ""
    status: UpstreamStatus = "unknown"
    strong: bool = False

    def __post_init__(self) -> None:
        _one_of("UpstreamFix", "status", self.status, get_args(UpstreamStatus))

    @classmethod
    def from_dict(cls, data: Any) -> UpstreamFix:
        """A fix from its JSON form (``url`` is derived, not read)."""
        return cls(**_known_fields(cls, data))

    @property
    def ref(self) -> str:
        """``owner/repo#N`` for a merged PR, ``owner/repo@sha7`` otherwise."""
        return f"{self.repo}#{self.pr}" if self.pr else f"{self.repo}@{self.commit[:10]}"

    @property
    def url(self) -> str:
        if "/" not in self.repo:
            return ""
        if self.pr:
            return f"https://github.com/{self.repo}/pull/{self.pr}"
        return f"https://github.com/{self.repo}/commit/{self.commit}"

    @property
    def citation(self) -> Citation:
        return Citation(kind="issue", ref=self.ref, section=self.subject[:120], url=self.url)

    def to_dict(self) -> dict[str, Any]:
        """repo, pr, commit, subject, date, release, matched, score (and package, yours, status, strong, url)."""
        data = dataclasses.asdict(self)
        data["score"] = round(self.score, 3)
        data["url"] = self.url
        return data


@dataclass(kw_only=True)
class Evidence:
    """What one tool call established, in the shared vocabulary (the one interface composition reads).

    Every tool result is turned into this once, in the registry (each tool names its
    adapter at registration), so the offline engine, the LLM loop's grounding and the
    session's memory read findings, fixes, citations, a recovery ``plan`` (checkpoints),
    ``advice`` (GPUs), a corrected-config ``diff`` and the ``versions`` seen without
    knowing which tool produced them. ``checked`` says in one line what was looked at
    ("2 log files, 4 812 lines"), ``healthy`` is True when a check looked and found
    nothing wrong (a clean run is an answer, not the absence of one).
    """

    tool: str = ""
    subject: str = ""  # what was examined: logs | config | gpus | checkpoints | knowledge | question
    call: str = ""  # the call's identity (tool + arguments), so a follow-up reuses it
    findings: list[Finding] = field(default_factory=list)  # root first when there is one
    root: int | None = None  # index of the root finding in ``findings``
    fixes: list[Fix] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)
    advice: list[Finding] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)  # short statements of state (a leftover pid, a damaged save)
    diff: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    #: commits in a framework's history that match the failure (rlmedic sync-code), best first
    upstream_fixes: list[UpstreamFix] = field(default_factory=list)
    frameworks: list[str] = field(default_factory=list)
    checked: str = ""
    healthy: bool = False
    verdict: str = ""  # the tool's own word on the run when it has one: failed, finished, healthy, no-errors, ...
    #: the attached config's values in effect (its own scalars, then the defaults of the keys the playbook's
    #: fixes name): a fix whose value is already in effect, or past it, does not apply
    settings: dict[str, Any] = field(default_factory=dict)
    #: metric series seen in the logs, by concept (reward, response_length, ...): key, first/last/max and steps
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    at: float = 0.0  # when it was established (time.time()): a file changed since means look again

    def __post_init__(self) -> None:
        self.findings = _each("Evidence", "findings", self.findings, Finding)
        self.advice = _each("Evidence", "advice", self.advice, Finding)
        self.fixes = _each("Evidence", "fixes", self.fixes, Fix)
        self.citations = _each("Evidence", "citations", self.citations, Citation)
        self.upstream_fixes = _each("Evidence", "upstream_fixes", self.upstream_fixes, UpstreamFix)

    @classmethod
    def from_dict(cls, data: Any) -> Evidence:
        """Evidence from its :meth:`to_dict` form (a saved session's)."""
        return cls(**_known_fields(cls, data))

    def to_dict(self) -> dict[str, Any]:
        """Every field, nested objects as their field dicts (tuples as lists once through JSON):
        what a saved session holds and :meth:`from_dict` reads back."""
        return dataclasses.asdict(self)

    @property
    def root_finding(self) -> Finding | None:
        if self.root is not None and 0 <= self.root < len(self.findings):
            return self.findings[self.root]
        return None

    @property
    def empty(self) -> bool:
        return not (self.findings or self.fixes or self.citations or self.plan or self.advice or self.facts
                    or self.diff or self.healthy or self.upstream_fixes)
