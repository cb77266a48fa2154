"""``rlmedic eval``: score an engine on troubleshooting cases.

Cases come as a JSONL file (the fields of ``../shared/cases/*.jsonl``: ``id``,
``user_input``, ``category``, ``must_mention``, ``expected_cause``, ``expected_fix``) or as
a folder of case folders, HolmesGPT-style::

    my-case/
      case.yaml        # user_prompt (or prompt.txt beside it), category, must_mention,
                       # expected_cause, expected_fix
      attachments/     # files attached to the question (logs, configs, snapshots...)

Per case, judged on the answer the user reads (the model's text with the LLM engine, the
composed text offline): the category named in the text, the share of must-mention terms in
it, a citation it refers to; then tool calls and seconds. The tools' grounded part (the
structured category and the must-mention terms in the grounded block) is reported beside
it, so a model that wrote nothing useful no longer scores what the tools found. ``record`` saves each case's transcript (events and,
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
    split: str = ""  # "dev" or "heldout" for collected cases: report them side by side, tune on dev only
    framework: str = ""  # the case's RL framework (areal, slime, verl), when known: fixes of another cannot apply


#: How an answer names each category in words: every group must match (case-insensitive).
CATEGORY_WORDS: dict[str, tuple[str, ...]] = {
    "oom_generation": (r"out of memory|\boom\b|OutOfMemory", r"generat|rollout|sglang|vllm|inference|kv.?cache|engine"),
    "oom_training": (r"out of memory|\boom\b|OutOfMemory", r"train|backward|forward|actor|optimizer|micro.?batch|mb_spec|logp"),
    "oom_weight_update": (r"out of memory|\boom\b|OutOfMemory", r"weight.{0,12}(?:update|sync|transfer|broadcast)"),
    "sglang_crash": (r"sglang|inference engine|inference server|engine|server|scheduler",
                     r"crash|died|dies|exit|killed|segfault|abort|fail|error"),
    "sglang_connection": (r"connect|unreachable|refused|timed? ?out|disconnect|health|request", r"sglang|server|engine|router|http"),
    "nccl_timeout": (r"nccl|collective|all.?reduce|watchdog|process group", r"time.?out|timed out|watchdog|hang"),
    "weight_sync": (r"weight", r"sync|update|transfer|broadcast|load|mismatch"),
    "nan_loss": (r"\bnan\b|\binf\b|not a number|non-finite|grad.{0,10}norm|overflow",),
    "reward_collapse": (r"reward", r"zero|collapse|\b0\b|drop|constant|stuck"),
    "checkpoint_recovery": (r"checkpoint|resume|recover|save|load", ),
    "config_constraint": (r"config|constraint|must|divisible|flag|setting|option|argument|parameter",),
    "data_format": (r"data|dataset|field|column|key|format|prompt|sample|token",),
    "ray_scheduling": (r"\bray\b|placement|resource|actor|schedul",),
    "install_env": (r"version|install|import|mismatch|upgrade|downgrade|incompatib|build|wheel|cuda|driver",),
    "performance": (r"slow|throughput|performance|speed|latency|utili[sz]ation|faster",),
    "other": (r".",),
}


def names_category(text: str, category: str) -> bool:
    """Whether ``text`` names ``category`` in words (:data:`CATEGORY_WORDS`)."""
    import re

    groups = CATEGORY_WORDS.get(category)
    return bool(groups) and all(re.search(g, text, re.I) for g in groups)


#: Fixes the short answer shows (the rest is behind --verbose).
SHOWN_FIXES = 5
_RL = ("areal", "slime", "verl")
_RL_REPOS = {"areal": "areal", "slime": "slime", "verl": "verl", "trl": "trl"}


def inapplicable(answer: Any, framework: str, shown: int = SHOWN_FIXES) -> int:
    """The precision figure (goal 0): fixes shown that cannot apply to ``framework`` (tagged for another
    framework, a key shaped like another framework's, a key that framework's config does not have) and
    known issues of another RL framework cited in the text."""
    from rlmedic.agent.fit import key_framework
    from rlmedic.tools.config.keys import known_key

    if framework not in _RL:
        return 0
    bad = 0
    for fix in list(answer.fixes)[:shown]:
        key = (fix.key or "").strip()
        tag = fix.framework if fix.framework in _RL else ""
        shape = key_framework(key) if not fix.framework or fix.framework == "generic" else ""
        if (tag and tag != framework) or (shape and shape != framework) or (
                key and framework in ("areal", "slime") and known_key(framework, key) is False):
            bad += 1
    for n, c in enumerate(answer.citations, 1):
        if c.kind == "issue" and f"[{n}]" in answer.answer:
            theirs = _RL_REPOS.get(c.ref.split("#")[0].split("/")[-1].lower())
            bad += bool(theirs and theirs != framework)
    return bad


def refers_to_citation(text: str, citations: list[Any]) -> bool:
    """Whether the text refers to a source: a ``[n]`` marker of a real citation, or the citation itself."""
    import re

    numbers = {int(n) for n in re.findall(r"\[(\d{1,2})\]", text)}
    if any(1 <= n <= len(citations) for n in numbers):
        return True
    low = text.lower()
    for citation in citations:
        ref = str(getattr(citation, "ref", "") or "").lower()
        if ref and (ref in low or ref.split(":")[-1] in low and ":" in ref):
            return True
    return False


@dataclass
class Score:
    id: str
    expected_category: str
    category: str
    category_right: bool  # the answer's text names the expected category
    mentioned: list[str]
    missed: list[str]
    cited: bool  # the answer's text refers to a citation
    tool_calls: int
    seconds: float
    engine: str
    notices: list[str] = field(default_factory=list)
    split: str = ""
    grounded_category_right: bool = False  # the tools' structured category
    grounded_mentioned: list[str] = field(default_factory=list)  # must-mention terms in the grounded part
    wrong_fixes: int = 0  # fixes shown that cannot apply to the case's framework (inapplicable)
    lines: int = 0  # the answer's length in lines

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
            "grounded_category_right": sum(s.grounded_category_right for s in self.scores),
            "grounded_must_mention_share": round(sum(len(s.grounded_mentioned) for s in self.scores) / terms, 4) if terms else 1.0,
            "tool_calls": sum(s.tool_calls for s in self.scores),
            "seconds": round(sum(s.seconds for s in self.scores), 2),
            "wrong_fixes": sum(s.wrong_fixes for s in self.scores),
            "median_lines": sorted(s.lines for s in self.scores)[n // 2] if n else 0,
        }

    def splits(self) -> dict[str, Report]:
        """The report per case split (``dev``, ``heldout``), when the cases carry one."""
        names = sorted({s.split for s in self.scores if s.split})
        return {name: Report([s for s in self.scores if s.split == name]) for name in names}

    def summary(self) -> str:
        parts = self.splits()
        if len(parts) > 1:  # dev and held-out side by side: the gap is the generalisation figure
            return "\n".join(f"{name:8s} {len(r.scores):4d} cases  {r.summary()}" for name, r in parts.items())
        t = self.totals()
        return (f"answer: category {t['category_right']}/{t['cases']}, must-mention {t['must_mention_share']:.0%}, "
                f"cited {t['cited']}/{t['cases']}; tools: category {t['grounded_category_right']}/{t['cases']}, "
                f"must-mention {t['grounded_must_mention_share']:.0%}; wrong fixes {t['wrong_fixes']}, "
                f"median {t['median_lines']} lines; {t['tool_calls']} tool calls, {t['seconds']:.1f} s")

    def to_dict(self) -> dict[str, Any]:
        return {"totals": self.totals(), "splits": {n: r.totals() for n, r in self.splits().items()},
                "cases": [asdict(s) | {"mention_share": round(s.mention_share, 4)} for s in self.scores]}


def load_cases(path: Path, split: str = "") -> list[Case]:
    """Cases from a JSONL file, a folder of JSONL files, one case folder, or a folder of case folders.

    ``split`` keeps only the cases of that split (rows with ``"split": "dev"|"heldout"``).
    """
    cases = _load_cases(Path(path))
    if split:
        cases = [c for c in cases if c.split == split]
        if not cases:
            raise UserError(f"{path}: no case with split {split!r}")
    return cases


def _load_cases(path: Path) -> list[Case]:
    if path.is_dir() and not _is_case_folder(path) and not any(_is_case_folder(p) for p in path.iterdir()):
        files = sorted(path.glob("*.jsonl"))
        if files:
            return [case for f in files for case in _load_cases(f)]
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
        split=str(row.get("split") or ""),
        framework=str(row.get("framework") or expected.get("framework") or ""),
    )


def score(case: Case, answer: Any, seconds: float) -> Score:
    """Compare one answer with the case's expectations (case-insensitive substring checks).

    The answer's text is what counts: with a model, that is the model's own words, so a
    model that ignored what the tools found scores low although the grounded part is right.
    """
    from rlmedic.agent.compose import grounded_text

    text = answer.answer.lower()
    grounded = grounded_text(answer).lower()
    mentioned = [t for t in case.must_mention if t.lower() in text]
    return Score(
        id=case.id, expected_category=case.category, category=answer.category,
        category_right=bool(case.category) and names_category(answer.answer, case.category),
        mentioned=mentioned, missed=[t for t in case.must_mention if t not in mentioned],
        cited=refers_to_citation(answer.answer, list(answer.citations)), tool_calls=len(answer.tool_calls),
        seconds=round(seconds, 3), engine=answer.engine, notices=list(answer.notices),
        split=case.split,
        grounded_category_right=bool(case.category) and answer.category == case.category,
        grounded_mentioned=[t for t in case.must_mention if t.lower() in grounded],
        wrong_fixes=inapplicable(answer, case.framework), lines=len(answer.answer.splitlines()),
    )


def run_case(case: Case, *, offline: bool, config: Any, kb: Any, record: Path | None = None) -> Score:
    from rlmedic.agent.events import Final
    from rlmedic.agent.session import Session

    session = Session(offline=offline, config=config, kb=kb, persist=False, prefix=f"eval-{case.id}")
    session.attach(*case.attachments)
    transcript: dict[str, Any] = {"case": case.id, "question": case.question, "events": [], "messages": []}
    answer = None
    started = time.perf_counter()
    for event in session.ask(case.question, transcript=transcript["messages"]):
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
