"""The shared vocabulary between layers: findings, fixes, citations.

Every tool returns these (or plain dicts made from them); every renderer (terminal,
JSON, Gradio, Slack) takes them. No layer parses another layer's prose. They are
pydantic models so that a front door (JSON, MCP, a web page) gets validation, a JSON
schema and ``model_dump`` for free; ``str()`` stays the short text a terminal shows.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

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


class Citation(BaseModel):
    """Where a claim comes from.

    ``kind`` is ``card`` (a playbook card id), ``doc`` (a document path with heading and
    line range), ``log`` (a log file and line), ``issue`` (an upstream issue or thread) or
    ``config`` (a config file and line). ``str()`` is the terminal text; the JSON form
    (:meth:`to_dict`) keeps every field and adds that text as ``text``.
    """

    model_config = ConfigDict(frozen=True)

    kind: CitationKind
    ref: str
    section: str = ""
    lines: tuple[int, int] | None = None
    url: str = ""

    @classmethod
    def card(cls, card_id: str, section: str = "") -> Citation:
        return cls(kind="card", ref=card_id, section=section)

    @classmethod
    def doc(cls, page: str, section: str = "", lines: tuple[int, int] | None = None, url: str = "") -> Citation:
        return cls(kind="doc", ref=page, section=section, lines=lines, url=url)

    @classmethod
    def log(cls, file: str, line: int | None = None) -> Citation:
        return cls(kind="log", ref=file, lines=(line, line) if line is not None else None)

    @computed_field  # type: ignore[prop-decorator]
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
        data = self.model_dump()
        data["lines"] = list(self.lines) if self.lines else None
        return data


def cite_dicts(citations: list[Citation] | tuple[Citation, ...]) -> list[dict[str, Any]]:
    """Citations in JSON: one object each, with ``text``."""
    return [c.to_dict() for c in citations]


class Fix(BaseModel):
    """One change to make: a config key or flag (``op`` set/delete/rename/add_flag/remove_flag) or a plain action.

    ``action`` is the one-line instruction; when empty, ``str()`` derives it from ``op``,
    ``key``, ``old`` and ``new``. ``key`` names an AReaL config key or a slime flag;
    ``framework`` tags a fix that applies to one framework only; ``rule`` names the
    config rule or remedy that proposed it.
    """

    model_config = ConfigDict(frozen=True)

    action: str = ""
    op: FixOp = "action"
    key: str = ""
    old: Any = None
    new: Any = None
    why: str = ""
    framework: str = ""
    rule: str = ""
    citations: tuple[Citation, ...] = ()

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


class Finding(BaseModel):
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
    evidence: dict[str, Any] = Field(default_factory=dict)
    fixes: list[Fix] = Field(default_factory=list)
    citations: list[Citation] = Field(default_factory=list)
    card: str = ""
    root: int | None = None

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


class UpstreamFix(BaseModel):
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
        data = self.model_dump()
        data["score"] = round(self.score, 3)
        data["url"] = self.url
        return data


class Evidence(BaseModel):
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
    findings: list[Finding] = Field(default_factory=list)  # root first when there is one
    root: int | None = None  # index of the root finding in ``findings``
    fixes: list[Fix] = Field(default_factory=list)
    citations: list[Citation] = Field(default_factory=list)
    plan: list[str] = Field(default_factory=list)
    advice: list[Finding] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)  # short statements of state (a leftover pid, a damaged save)
    diff: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
    #: commits in a framework's history that match the failure (rlmedic sync-code), best first
    upstream_fixes: list[UpstreamFix] = Field(default_factory=list)
    frameworks: list[str] = Field(default_factory=list)
    checked: str = ""
    healthy: bool = False
    verdict: str = ""  # the tool's own word on the run when it has one: failed, finished, healthy, no-errors, ...
    #: the attached config's values in effect (its own scalars, then the defaults of the keys the playbook's
    #: fixes name): a fix whose value is already in effect, or past it, does not apply
    settings: dict[str, Any] = Field(default_factory=dict)
    #: metric series seen in the logs, by concept (reward, response_length, ...): key, first/last/max and steps
    metrics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    at: float = 0.0  # when it was established (time.time()): a file changed since means look again

    @property
    def root_finding(self) -> Finding | None:
        if self.root is not None and 0 <= self.root < len(self.findings):
            return self.findings[self.root]
        return None

    @property
    def empty(self) -> bool:
        return not (self.findings or self.fixes or self.citations or self.plan or self.advice or self.facts
                    or self.diff or self.healthy or self.upstream_fixes)
