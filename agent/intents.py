"""What a question asks for and what it rules out (``intents.yaml``, validated on load).

The composer leads an answer with what the question asks (the edit to make, whether the
run was healthy, the GPUs, the recovery plan, the root cause), says which file to attach
when the evidence for it is missing, and drops cards of the categories the question rules
out ("memory is fine" -> no OOM cards). Data, not code: patterns live in the YAML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rlmedic.errors import UserError
from rlmedic.types import CATEGORIES

SUBJECTS = ("logs", "config", "gpus", "checkpoints", "any")
LEADS = ("fixes", "status", "gpus", "plan", "cause")
PATH = Path(__file__).with_name("intents.yaml")


@dataclass(frozen=True)
class Intent:
    id: str
    lead: str
    needs: str
    attach: str
    patterns: tuple[re.Pattern[str], ...]

    def matches(self, question: str) -> bool:
        return any(p.search(question) for p in self.patterns)


@dataclass(frozen=True)
class Intents:
    intents: tuple[Intent, ...]
    rule_out: tuple[tuple[frozenset[str], tuple[re.Pattern[str], ...]], ...]

    def asked(self, question: str) -> list[Intent]:
        """The intents the question shows, in file order."""
        return [i for i in self.intents if i.matches(question)]

    def ruled_out(self, question: str) -> set[str]:
        """Categories the question says are not the problem."""
        out: set[str] = set()
        for categories, patterns in self.rule_out:
            if any(p.search(question) for p in patterns):
                out |= categories
        return out


def _compile(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.I)
    except re.error as exc:
        raise UserError(f"{where}: bad pattern {pattern!r}: {exc}") from None


def parse(data: object, where: str = str(PATH)) -> Intents:
    """Validate the YAML mapping; one clear error naming the entry on a mistake."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a mapping with intents, rule_out, negations")
    intents = []
    for n, item in enumerate(data.get("intents") or []):
        at = f"{where}: intents[{n}]"
        if not isinstance(item, dict) or not item.get("id") or not item.get("patterns"):
            raise UserError(f"{at}: needs id and patterns")
        if item.get("lead") not in LEADS or item.get("needs") not in SUBJECTS:
            raise UserError(f"{at}: lead must be one of {LEADS}, needs one of {SUBJECTS}")
        intents.append(Intent(str(item["id"]), item["lead"], item["needs"], str(item.get("attach") or ""),
                              tuple(_compile(p, at) for p in item["patterns"])))
    negations = data.get("negations") or []
    if not negations or not all(isinstance(p, str) and "{topic}" in p for p in negations):
        raise UserError(f"{where}: negations must be patterns with {{topic}}")
    rules = []
    for n, item in enumerate(data.get("rule_out") or []):
        at = f"{where}: rule_out[{n}]"
        cats = item.get("categories") if isinstance(item, dict) else None
        if not cats or any(c not in CATEGORIES for c in cats) or not item.get("topics"):
            raise UserError(f"{at}: needs topics and categories from the shared vocabulary")
        pats = tuple(_compile(neg.replace("{topic}", f"(?:{t})"), at) for t in item["topics"] for neg in negations)
        rules.append((frozenset(cats), pats))
    return Intents(tuple(intents), tuple(rules))


@lru_cache(maxsize=1)
def intents() -> Intents:
    import yaml

    return parse(yaml.safe_load(PATH.read_text(encoding="utf-8")))
