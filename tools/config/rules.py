"""Config rules: the declarative table (``config_rules.yaml``), its entry types, the lint context.

The table holds each rule's id, severity, summary and citations, and the remedies per
failure phase; :mod:`rlmedic.tools.config.checks` holds the code that computes a rule's
message and proposed change; :mod:`rlmedic.tools.config.fix` applies the changes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rlmedic.errors import UserError
from rlmedic.tools.citations import citation_from
from rlmedic.types import Citation, Finding, Fix, FixOp, severity_rank

if TYPE_CHECKING:  # pragma: no cover
    from rlmedic.confine import Confinement
    from rlmedic.tools.gpu.advice import ModelSpec
    from rlmedic.tools.gpu.snapshot import GpuSnapshot

RULES_PATH = Path(__file__).parent / "config_rules.yaml"

#: Where a relative or /tmp fileroot moves by default: the network-volume mount the
#: cloud seed uses (RunPod mounts volumes at /workspace). ``--fileroot`` overrides it.
DEFAULT_PERSISTENT_ROOT = "/workspace/outputs"
SPOT_RECOVER_FREQ_SECS = 3600
LONG_RUN_REQUEST_TIMEOUT = 7200
LONG_RUN_REQUEST_RETRIES = 5


def config_finding(key: str, message: str, severity: str, *, rule: str = "", line: int | None = None,
                   suggestion: str = "", citation: Citation | None = None, citations: Iterable[Citation] = (),
                   fixes: Iterable[Fix] = ()) -> Finding:
    """A rule or schema violation as a Finding: ``key`` is the config key or flag, ``fixes`` the edits that resolve it."""
    cites = list(citations) or ([citation] if citation else [])
    return Finding(
        id=f"config:{rule or 'schema'}:{key}", category="config_constraint", severity=severity,  # type: ignore[arg-type]
        summary=message, key=key, rule=rule, line=line, suggestion=suggestion, fixes=list(fixes), citations=cites,
        card=next((c.ref for c in cites if c.kind == "card"), ""),
    )


# --------------------------------------------------------------------------- the table


class _Cited:
    """A rule or a remedy: its id and citations stamp the changes it proposes."""

    id: str
    citations: tuple[Citation, ...]

    @property
    def citation(self) -> Citation | None:
        return self.citations[0] if self.citations else None

    def change(self, key: str, old: Any, new: Any, reason: str, op: FixOp = "set") -> Fix:
        """An edit this rule or remedy proposes, stamped with its id and citations."""
        return Fix(key=key, old=old, new=new, why=reason, rule=self.id, op=op, citations=self.citations)


@dataclass(frozen=True)
class Rule(_Cited):
    id: str
    framework: str
    severity: str
    summary: str
    citations: tuple[Citation, ...]
    spot_severity: str = ""
    seed: str = ""
    needs: tuple[str, ...] = ()
    check: str = ""

    def severity_for(self, ctx: LintContext) -> str:
        return self.spot_severity if (self.spot_severity and ctx.is_spot) else self.severity

    def problem(self, ctx: LintContext, key: str, message: str, *, line: int | None = None,
                changes: list[Fix] | None = None, severity: str | None = None) -> Finding:
        fixes = [dataclasses.replace(c, rule=c.rule or self.id, citations=c.citations or self.citations)
                 for c in changes or []]
        return config_finding(key, message, severity or self.severity_for(ctx), rule=self.id, line=line,
                              citations=self.citations, fixes=fixes)


@dataclass(frozen=True)
class Remedy(_Cited):
    id: str
    framework: str
    phase: str
    citations: tuple[Citation, ...]
    key: str = ""
    flag: str = ""
    action: str = ""
    #: applied along with the phase's first change instead of offered as an alternative
    also: bool = False


_SEVERITIES = ("critical", "error", "warning", "info")


@functools.cache
def _table(path: str | None = None) -> dict[str, Any]:
    with open(path or RULES_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def parse_rules(known_checks: Collection[str], path: str | None = None) -> dict[str, Rule]:
    """The rules table, validated against the checks that exist: unknown fields, severities or checks fail loudly."""
    data = _table(path)
    rules: dict[str, Rule] = {}
    allowed = {"id", "framework", "severity", "spot_severity", "summary", "seed", "citations", "needs", "check"}
    for raw in data.get("rules", []):
        extra = set(raw) - allowed
        if extra:
            raise UserError(f"config rule {raw.get('id')}: unknown field(s) {', '.join(sorted(extra))}")
        rid = raw["id"]
        if rid in rules:
            raise UserError(f"config rule {rid}: duplicate id")
        for sev_key in ("severity", "spot_severity"):
            if raw.get(sev_key) and raw[sev_key] not in _SEVERITIES:
                raise UserError(f"config rule {rid}: bad {sev_key} {raw[sev_key]!r}")
        check = raw.get("check") or rid.replace("-", "_")
        if check not in known_checks:
            raise UserError(f"config rule {rid}: no check named {check!r}")
        if not raw.get("citations"):
            raise UserError(f"config rule {rid}: every rule needs a citation")
        rules[rid] = Rule(
            id=rid, framework=raw["framework"], severity=raw["severity"], summary=raw["summary"],
            citations=tuple(citation_from(c) for c in raw["citations"]), spot_severity=raw.get("spot_severity", ""),
            seed=raw.get("seed", ""), needs=tuple(raw.get("needs", ())), check=check,
        )
    return rules


def load_remedies(path: str | None = None) -> dict[str, dict[str, list[Remedy]]]:
    """Remedies per framework and failure phase, most effective first."""
    data = _table(path).get("remedies", {})
    out: dict[str, dict[str, list[Remedy]]] = {}
    for framework, phases in data.items():
        for phase, entries in phases.items():
            out.setdefault(framework, {})[phase] = [
                Remedy(
                    id=e["id"], framework=framework, phase=phase,
                    citations=tuple(citation_from(c) for c in e.get("citations", [])),
                    key=e.get("key", ""), flag=e.get("flag", ""), action=e.get("action", ""), also=bool(e.get("also")),
                )
                for e in entries
            ]
    return out


# --------------------------------------------------------------------------- context


#: Log finding -> failure phase, when the finding carries no evidence["phase"].
_CATEGORY_PHASE = {"oom_generation": "generation", "oom_training": "training", "oom_weight_update": "weight_update",
                   "sglang_connection": "connection", "sglang_crash": "connection"}
_CARD_PHASE = {"oom-initialization": "initialization", "oom-data-transfer": "data_transfer",
               "oom-colocated": "colocated", "oom-consumer-gpu": "colocated",
               "sglang-disconnect-long-run": "connection", "weight-sync-timeout": "connection"}
#: Findings that show the run lives on preemptible machines or failed to resume.
_SPOT_CARDS = {"spot-interruption", "recovery-config-changed", "no-checkpoints-found", "recover-checkpoint-invalid",
               "checkpoints-not-on-persistent-volume", "wandb-running-but-stopped", "training-crash-no-error"}


@dataclass
class LintContext:
    """What a check may use besides the config itself."""

    snapshot: GpuSnapshot | None = None
    findings: list[Finding] = field(default_factory=list)
    spot: bool = False
    model: ModelSpec | None = None
    fileroot: str = ""  # where to move a relative/ephemeral fileroot; default DEFAULT_PERSISTENT_ROOT
    confinement: Confinement | None = None

    @property
    def is_spot(self) -> bool:
        return self.spot or any(f.card in _SPOT_CARDS for f in self.findings)

    @property
    def phases(self) -> list[str]:
        """Failure phases seen in the log, in the order of their first finding (root first)."""
        ordered = sorted(self.findings, key=lambda f: (f.root is not None, 0))
        seen: list[str] = []
        for finding in ordered:
            phase = finding_phase(finding)
            if phase and phase not in seen:
                seen.append(phase)
        return seen

    def saw(self, *, categories: tuple[str, ...] = (), cards: tuple[str, ...] = ()) -> bool:
        return any(f.category in categories or f.card in cards for f in self.findings)


def finding_phase(finding: Finding) -> str:
    if finding.card in _CARD_PHASE:
        return _CARD_PHASE[finding.card]
    phase = str(finding.evidence.get("phase") or "")
    if finding.category.startswith("oom") and phase:
        return phase
    return _CATEGORY_PHASE.get(finding.category, phase if finding.category.startswith("oom") else "")


# --------------------------------------------------------------------------- value helpers


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.replace("_", ""))
        except ValueError:
            return None
    return None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def _sort(problems: list[Finding]) -> list[Finding]:
    return sorted(problems, key=lambda p: (severity_rank(p.severity), p.line or 0, p.key))
