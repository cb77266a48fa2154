"""What the evidence says about one inquiry, read once: the :class:`Case` every answer section reads.

Composition never looks at a tool's name or its JSON: it reads :class:`~rlmedic.types.Evidence`
through this view. The view decides the things several sections need alike: the framework in
play, the root finding and the findings that led to it, whether the run is healthy, whether the
attachments gave anything to diagnose at all, the config's values in effect, the known issues the
evidence backs, and what the question asks for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from rlmedic.agent.inquiry import Inquiry
from rlmedic.types import Evidence, Finding, severity_rank

#: What the tools examine (Evidence.subject); search hits are knowledge, not a look at the run.
SUBJECTS = ("logs", "config", "gpus", "checkpoints")

# ---------------------------------------------------------------------- frameworks

#: the framework a text is about, from names only one framework uses (tools/config/frameworks.py)
from rlmedic.tools.config.frameworks import detect as detect_framework  # noqa: E402

RL_FRAMEWORKS = frozenset({"areal", "slime", "verl"})


def framework_in_play(question: str, evidence: Sequence[Evidence]) -> str:
    """The question's own framework, else the one the evidence shows (logs, config, checkpoints)."""
    named = detect_framework(question)
    if named:
        return named
    seen = [fw for e in evidence for fw in e.frameworks if fw in RL_FRAMEWORKS]
    return max(set(seen), key=seen.count) if seen else ""


# ---------------------------------------------------------------------- the case


@dataclass(frozen=True)
class Case:
    """The evidence of one inquiry, as the sections read it."""

    evidence: tuple[Evidence, ...]
    framework: str
    leads: tuple[str, ...]  # what the question asks to see first (intents.yaml)
    needs: tuple[str, ...]  # "attach ..." lines for evidence the question needs and nobody gave
    ruled_out: frozenset[str]
    root: Finding | None
    root_ev: Evidence | None
    before_root: tuple[Finding, ...]  # findings of the root's kind that came before it (what led to it)
    cascades: tuple[Finding, ...]
    looked: tuple[Evidence, ...]  # evidence from a look at the run (logs, config, GPUs, checkpoints)
    healthy: bool
    nothing: bool  # files were given, and nothing in them can be diagnosed (empty, unrelated)
    finished: bool
    settings: dict[str, Any] = field(default_factory=dict)
    fresh: tuple[Evidence, ...] = ()  # this turn's evidence (a follow-up's new attachments)
    asks_problem: bool = True  # the question describes a problem (not only "did it finish?")

    @property
    def has_log(self) -> bool:
        return any(e.subject == "logs" for e in self.looked)

    def subject(self, name: str) -> list[Evidence]:
        return [e for e in self.evidence if e.subject == name]


def _nothing_in(e: Evidence) -> bool:
    """Whether a log look found nothing to go on: empty, or text with no run in it (no framework, no metric,
    no step, no finding beyond "empty")."""
    if e.subject != "logs":
        return False
    if e.verdict == "empty":
        return True
    real = [f for f in e.findings if f.id not in ("empty-log",)]
    return not real and not e.frameworks and not e.metrics and e.verdict in ("no-errors", "") and not e.healthy


def read_case(inq: Inquiry, evidence: Sequence[Evidence], *, fresh: Sequence[Evidence] = ()) -> Case:
    """The case the evidence makes for ``inq`` (pure: reads only its arguments and the intents file)."""
    from rlmedic.agent.intents import intents

    evidence = tuple(e for e in evidence if e is not None)
    rules = intents()
    asked = rules.asked(inq.question)
    framework = framework_in_play(inq.question, evidence)
    roots = [(e.root_finding, e) for e in evidence if e.root_finding is not None]
    if not roots:
        # the user's own description of the problem ("RSS grows every step") is the evidence there is:
        # a warning it matches leads, instead of a card that only shares its words
        roots = [(f, e) for e in evidence if e.subject == "question" for f in e.findings if f.severity == "warning"][:1]
    root, root_ev = roots[0] if roots else (None, None)
    looked = tuple(e for e in evidence if e.subject in SUBJECTS)
    healthy = bool(looked) and all(e.healthy for e in looked) and root is None
    logs = [e for e in looked if e.subject == "logs"]
    nothing = (bool(looked) and root is None and not healthy and all(_nothing_in(e) for e in looked))
    before: list[Finding] = []
    cascades: list[Finding] = []
    if root is not None and root_ev is not None:
        for f in root_ev.findings:
            if f is root:
                continue
            if f.root is not None:
                cascades.append(f)
            elif f.category == root.category and f.line and root.line and f.file == root.file and f.line < root.line:
                before.append(f)
        cascades += [f for e in evidence if e is not root_ev for f in e.findings if f.root is not None]
    settings: dict[str, Any] = {}
    for e in evidence:
        if e.subject == "config":
            settings.update(e.settings)
    have = {e.subject for e in looked}
    needs = tuple(dict.fromkeys(i.attach for i in asked
                                if i.attach and not (i.needs in have or (i.needs == "any" and have))))
    return Case(
        evidence=evidence, framework=framework, leads=tuple(i.lead for i in asked), needs=needs,
        ruled_out=frozenset(rules.ruled_out(inq.question)), root=root, root_ev=root_ev,
        before_root=tuple(before), cascades=tuple(cascades), looked=looked, healthy=healthy, nothing=nothing,
        finished=any(e.verdict == "finished" for e in logs), settings=settings, fresh=tuple(fresh),
        asks_problem=any(i.lead != "status" for i in asked) or not asked,
    )


def serious(findings: Sequence[Finding], worst: str = "warning") -> list[Finding]:
    return [f for f in findings if severity_rank(f.severity) <= severity_rank(worst)]
