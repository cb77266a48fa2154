"""The shared vocabulary between layers: findings, fixes, citations.

Every tool returns these (or plain dicts made from them); every renderer (terminal,
JSON, Gradio, Slack) takes them. No layer parses another layer's prose.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

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
FRAMEWORKS: tuple[str, ...] = ("areal", "slime", "sglang", "generic")


def severity_rank(severity: str) -> int:
    """0 for critical ... 3 for info; lower is worse."""
    return SEVERITIES.index(severity)


@dataclass(frozen=True)
class Citation:
    """Where a claim comes from.

    ``kind`` is ``card`` (a playbook card id), ``doc`` (a document path with heading
    and line range) or ``log`` (a log file and line).
    """

    kind: Literal["card", "doc", "log"]
    ref: str
    section: str = ""
    lines: tuple[int, int] | None = None
    url: str = ""

    def __str__(self) -> str:
        if self.kind == "card":
            text = f"card:{self.ref}"
            return f"{text} ({self.section})" if self.section else text
        if self.kind == "log":
            return f"{self.ref}:{self.lines[0]}" if self.lines else self.ref
        text = self.ref
        if self.section:
            text += f" § {self.section}"
        if self.lines:
            text += f" (lines {self.lines[0]}-{self.lines[1]})"
        return text

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["lines"] = list(self.lines) if self.lines else None
        data["text"] = str(self)
        return data


@dataclass(frozen=True)
class Fix:
    """One change to make: a config key or flag (old -> new) or a plain action."""

    action: str
    key: str = ""
    old: Any = None
    new: Any = None
    why: str = ""
    citation: Citation | None = None

    def __str__(self) -> str:
        return self.action

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "key": self.key,
            "old": self.old,
            "new": self.new,
            "why": self.why,
            "citation": str(self.citation) if self.citation else None,
        }


@dataclass
class Finding:
    """Something a tool found, with the evidence that backs it."""

    id: str
    category: str
    severity: Severity
    summary: str
    file: str = ""
    line: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    fixes: list[Fix] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    card: str = ""
    root: int | None = None  # index of the root finding this one cascades from

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "category": self.category,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "evidence": self.evidence,
            "summary": self.summary,
            "fixes": [str(f) for f in self.fixes],
            "fix_details": [f.to_dict() for f in self.fixes],
            "citations": [str(c) for c in self.citations],
            "card": self.card,
            "root": self.root,
        }
