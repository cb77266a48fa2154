"""The result of a diagnosis: findings, the root's index, stats (and, for excerpts, hits and files).

Its own small module so that what only carries a diagnosis (a run folder's curves, the CLI's
renderer) does not import the log scanner with it: ``tools/logs/diagnose.py`` costs ~0.16 s to
import (its catalog, patterns and Hyperscan), a W&B run's diagnosis ~2 s in all (issue 28).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlmedic.types import Finding, severity_rank

if TYPE_CHECKING:
    from rlmedic.tools.logs.scan import FileInfo, Hit


@dataclass
class Diagnosis:
    """Findings (root first, then its cascades, then the rest), the root's index, stats."""

    findings: list[Finding]
    root: int | None
    stats: dict[str, Any] = field(default_factory=dict)
    #: For excerpts (not part of the JSON): the first hit of each finding, by "file:line",
    #: and each file's head and tail lines.
    hits: dict[str, Hit] = field(default_factory=dict, repr=False)
    files: list[FileInfo] = field(default_factory=list, repr=False)

    @property
    def root_finding(self) -> Finding | None:
        return self.findings[self.root] if self.root is not None else None

    def worst_severity(self) -> str | None:
        if not self.findings:
            return None
        return min((f.severity for f in self.findings), key=severity_rank)

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in self.findings], "root": self.root, "stats": self.stats}
