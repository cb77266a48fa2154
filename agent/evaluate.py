"""``rlmedic eval``: score an engine on troubleshooting cases.

Cases come as a JSONL file (the fields of ``../shared/cases/*.jsonl``: ``id``,
``user_input``, ``category``, ``must_mention``, ``expected_cause``, ``expected_fix``) or as
a folder of case folders, HolmesGPT-style::

    my-case/
      case.yaml        # user_prompt (or prompt.txt beside it), category, must_mention,
                       # expected_cause, expected_fix
      attachments/     # files attached to the question (logs, configs, snapshots...)

Per case: the category right, the share of must-mention terms in the answer, a citation
present, tool calls made, seconds. ``record`` saves each case's transcript (events and,
for the LLM engine, the conversation's messages) so a live run can be replayed in tests.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.errors import UserError


@dataclass
class Case:
    id: str
    question: str
    category: str = ""
    must_mention: list[str] = field(default_factory=list)
    expected_cause: str = ""
    expected_fix: str = ""
    attachments: list[Path] = field(default_factory=list)


@dataclass
class Score:
    id: str
    expected_category: str
    category: str
    category_right: bool
    mentioned: list[str]
    missed: list[str]
    cited: bool
    tool_calls: int
    seconds: float
    engine: str
    notices: list[str] = field(default_factory=list)

    @property
    def mention_share(self) -> float:
        total = len(self.mentioned) + len(self.missed)
        return len(self.mentioned) / total if total else 1.0


@dataclass
class Report:
    scores: list[Score]

    def totals(self) -> dict[str, Any]:
        n = len(self.scores)
        terms = sum(len(s.mentioned) + len(s.missed) for s in self.scores)
        return {
            "cases": n,
            "category_right": sum(s.category_right for s in self.scores),
            "must_mention_share": round(sum(len(s.mentioned) for s in self.scores) / terms, 4) if terms else 1.0,
            "cited": sum(s.cited for s in self.scores),
            "tool_calls": sum(s.tool_calls for s in self.scores),
            "seconds": round(sum(s.seconds for s in self.scores), 2),
        }

    def summary(self) -> str:
        t = self.totals()
        return (f"category {t['category_right']}/{t['cases']}, must-mention {t['must_mention_share']:.0%}, "
                f"cited {t['cited']}/{t['cases']}, {t['tool_calls']} tool calls, {t['seconds']:.1f} s")

    def to_dict(self) -> dict[str, Any]:
        return {"totals": self.totals(),
                "cases": [asdict(s) | {"mention_share": round(s.mention_share, 4)} for s in self.scores]}


def load_cases(path: Path) -> list[Case]:
    """Cases from a JSONL file, one case folder, or a folder of case folders."""
    path = Path(path)
    if path.is_file():
        cases = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise UserError(f"{path}:{n}: not JSON ({exc})") from None
            cases.append(_case(row, row.get("id") or f"case-{n}", []))
        return cases
    if not path.is_dir():
        raise UserError(f"{path}: no such file or folder")
    folders = [path] if _is_case_folder(path) else sorted(p for p in path.iterdir() if _is_case_folder(p))
    if not folders:
        raise UserError(f"{path}: no case.yaml or prompt.txt found")
    return [_folder_case(p) for p in folders]


def _is_case_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "case.yaml").is_file() or (path / "prompt.txt").is_file())


def _folder_case(folder: Path) -> Case:
    import yaml

    data = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8")) if (folder / "case.yaml").is_file() else {}
    data = data or {}
    if (folder / "prompt.txt").is_file():
        data.setdefault("user_prompt", (folder / "prompt.txt").read_text(encoding="utf-8").strip())
    attach_dir = folder / "attachments"
    attachments = sorted(p.resolve() for p in attach_dir.iterdir()) if attach_dir.is_dir() else []
    return _case(data, data.get("id") or folder.name, attachments)


def _case(row: dict[str, Any], case_id: str, attachments: list[Path]) -> Case:
    expected = row.get("expected") or {}
    question = row.get("user_prompt") or row.get("user_input") or row.get("prompt") or ""
    if not question:
        raise UserError(f"case {case_id}: no user_prompt / user_input")
    return Case(
        id=str(case_id),
        question=str(question),
        category=str(row.get("category") or expected.get("category") or ""),
        must_mention=[str(t) for t in (row.get("must_mention") or expected.get("must_mention") or [])],
        expected_cause=str(row.get("expected_cause") or expected.get("cause") or ""),
        expected_fix=str(row.get("expected_fix") or expected.get("fix") or ""),
        attachments=attachments,
    )


def score(case: Case, answer: Any, seconds: float) -> Score:
    """Compare one answer with the case's expectations (case-insensitive substring check)."""
    text = answer.answer.lower()
    mentioned = [t for t in case.must_mention if t.lower() in text]
    return Score(
        id=case.id, expected_category=case.category, category=answer.category,
        category_right=bool(case.category) and answer.category == case.category,
        mentioned=mentioned, missed=[t for t in case.must_mention if t not in mentioned],
        cited=bool(answer.citations), tool_calls=len(answer.tool_calls), seconds=round(seconds, 3),
        engine=answer.engine, notices=list(answer.notices),
    )


def run_case(case: Case, *, offline: bool, config: Any, kb: Any, record: Path | None = None) -> Score:
    from rlmedic.agent.engine import answer_events
    from rlmedic.agent.events import Final
    from rlmedic.registry import ToolContext

    ctx = ToolContext.for_roots([str(p) for p in case.attachments])
    transcript: dict[str, Any] = {"case": case.id, "question": case.question, "events": [], "messages": []}
    answer = None
    started = time.perf_counter()
    for event in answer_events(case.question, attachments=case.attachments, ctx=ctx, offline=offline, config=config,
                               kb=kb, transcript=transcript["messages"]):
        transcript["events"].append(event.to_dict())
        if isinstance(event, Final):
            answer = event.answer
    seconds = time.perf_counter() - started
    if answer is None:  # pragma: no cover - engines always end in Final
        raise RuntimeError(f"case {case.id}: no answer")
    if record is not None:
        record.mkdir(parents=True, exist_ok=True)
        (record / f"{case.id}.json").write_text(json.dumps(transcript, indent=1, default=str), encoding="utf-8")
    return score(case, answer, seconds)


def evaluate(cases: list[Case], *, offline: bool = True, config: Any = None, kb: Any = None,
             record: Path | None = None) -> Report:
    return Report([run_case(c, offline=offline, config=config, kb=kb, record=record) for c in cases])
