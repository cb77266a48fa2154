"""Compose: the answer derived from the evidence, for both engines; the specific before the generic.

``compose(inquiry, evidence)`` reads the evidence once (:func:`rlmedic.agent.case.read_case`),
decides what can be said and what applies, and joins the sections of
:mod:`rlmedic.agent.sections` (each a pure function) in the order the question asks for:

1. a known upstream issue, only when its error string, pattern or exception is in the evidence and
   its framework agrees (at most two related ones, each saying what matched);
2. what failed, with the marked evidence line and at most two lines of its context, and the values
   the attached config sets for the settings involved; or the verdict: healthy, finished, or
   "nothing to diagnose here" (never a cause taken from cards without evidence);
3. GPU facts, the checkpoint recovery plan, the config's own errors;
4. what to change: the fixes that can apply (:mod:`rlmedic.agent.fit`: not another framework's,
   not a key the config does not have, not a value already in effect), exact edits from the
   value in effect first, at most five, and the corrected-config diff;
5. the team's own documents that match the question and the root's evidence, then playbook cards
   (the likely cause only when nothing more specific exists; background otherwise);
6. which file to attach when the question needs evidence nobody gave.

A follow-up answers its own question: what it asks for leads, and what the thread established is
referred to in one line. The short answer is about 40 lines for one root; the rest is in
``Answer.more`` (``--verbose``, a collapsible block on the web page, a second Slack message).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from rlmedic.agent import sections as S
from rlmedic.agent.case import (  # noqa: F401 - re-exported: the vocabulary of frameworks lives with the case
    RL_FRAMEWORKS, SUBJECTS, Case, detect_framework, framework_in_play, read_case)
from rlmedic.agent.events import Answer
from rlmedic.agent.fit import APPLIED, CARD, KNOWN, LEADING, OTHER, ROOT, candidates, key_framework, rank
from rlmedic.agent.inquiry import Inquiry
from rlmedic.types import Citation, Evidence, Fix

#: A related known issue's error string may be claimed by at most this many records (a rarer string is evidence).
RELATED_SHARED = 3
#: A second card is mentioned when its score is at least this share of the best one.
RELATED_SHARE = 0.8
#: Fixes kept in the structured answer (the text shows five, the rest behind --verbose).
MAX_FIXES = 8


def fits(fix: Fix, framework: str) -> bool:
    """Whether ``fix`` applies to ``framework`` by its tag and its key's shape (the config's own keys and
    values are checked by :func:`rlmedic.agent.fit.contradiction`)."""
    if not framework:
        return True
    if fix.framework:
        return fix.framework in (framework, "generic")
    shape = key_framework(fix.key)
    return not shape or shape == framework


# ---------------------------------------------------------------------- composing


def compose(inq: Inquiry, evidence: Sequence[Evidence], *, fresh: Sequence[Evidence] = ()) -> Answer:
    """The offline answer (and the grounded part of a model's): text and structured fields from ``evidence``.

    ``fresh`` is the evidence this turn gathered (a follow-up's new attachments); the rest came from
    earlier turns of the thread.
    """
    case = read_case(inq, evidence, fresh=fresh)
    kb = inq.kb()
    texts = list(inq.texts or ())
    follow = inq.follow_up
    # a follow-up about the thread's root (its cause, what to change, a bare "why?") draws on it; another
    # question gets its own answer, and the root is referred to in one line
    fresh_root = any(e is case.root_ev for e in case.fresh)
    repeat_root = case.root is not None and (not follow or fresh_root or bool({"cause", "fixes"} & set(case.leads))
                                             or (not case.leads and len(inq.question.split()) <= 6))
    show_cause = case.root is not None and (not follow or fresh_root or "cause" in case.leads)
    about_failure = not follow or repeat_root

    # a follow-up on another subject does not show the known issue again, but the framework it names holds
    # for the whole thread (a log that names none, whose error only verl's record has, is a verl run)
    lead_known, related = _known(inq, case, texts, kb)
    named_by = lead_known
    if follow and not repeat_root:
        lead_known, related = None, []
    if case.nothing and (lead_known is not None or related):  # a known error string is something to go on
        case = dataclasses.replace(case, nothing=False)
    if not case.framework and named_by is not None:  # an error only one framework's record has names it
        theirs = set(named_by.record.frameworks) & RL_FRAMEWORKS
        repo = RL_REPOS.get(str(named_by.record.source).split("#")[0].split("/")[-1].lower(), "")
        named = theirs if len(theirs) == 1 else ({repo} & RL_FRAMEWORKS)
        if named:
            case = dataclasses.replace(case, framework=named.pop())
            related = [m for m in related if same_stack(m, case.framework)]
    cards = _cards(inq, case, kb, follow=follow, repeat_root=repeat_root)
    docs, docs_lead = _docs(inq, case, kb)

    # what to change: exact edits on the root's settings first, nothing the evidence rules out
    root_keys = _root_keys(case, cards)
    groups: list[tuple[int, Sequence[Fix]]] = []
    asked_fixes = not follow or "fixes" in case.leads or repeat_root  # else the thread's edits are not repeated
    for e in case.evidence:
        if e.diff and asked_fixes:
            groups.append((APPLIED, e.fixes))
    if case.root is not None and repeat_root:
        groups.append((ROOT, [f for b in case.before_root for f in b.fixes] + list(case.root.fixes)))
    elif case.root is None and case.asks_problem and not follow:  # no failure: the warnings' own fixes
        groups.append((ROOT, [x for e in case.looked for f in e.findings if f.severity == "warning" for x in f.fixes]))
    if lead_known is not None:
        groups.append((LEADING, lead_known.fixes))
    for e in case.evidence:
        if not e.diff and e is not case.root_ev and asked_fixes:
            groups.append((OTHER, e.fixes))
    if cards:
        groups.append((CARD, cards[0][0].fixes))
    for m in related:
        groups.append((KNOWN, [f for f in m.fixes if f.key]))
    chosen, _dropped = rank(candidates(groups, root_keys), case.framework, case.settings, limit=MAX_FIXES,
                            has_root=case.root is not None and repeat_root) \
        if not case.nothing and not (case.healthy and not case.asks_problem) else ([], [])
    diff = next((e.diff for e in case.evidence if e.diff), "") if asked_fixes else ""

    # a follow-up that asks something else of the thread's root (what to change first): the known issue and the
    # playbook's why were told before; they stay for --verbose, and the answer to the new question leads
    told = follow and not show_cause and case.root is not None and bool(case.leads)
    parts: dict[str, S.Section] = {
        "known": S.known(inq, case, lead_known, related, brief=told),
        "cause": S.failed(inq, case) if (show_cause or case.root is None) else S.Section("cause"),
        "gpus": S.gpus(inq, case),
        "plan": S.plan(inq, case),
        "config": S.config(inq, case),
        "fixes": S.fixes(inq, case, chosen, diff, card_cite=cards[0][0].citation if cards else None),
    }
    order = ["cause", "gpus", "plan", "config", "fixes"]
    for lead in reversed(case.leads):  # what the question asks goes first
        if lead in order:
            order.remove(lead)
            order.insert(0, lead)
    # a known issue that is this exact bug leads; demoted or related ones follow the run's own evidence
    order.insert(0 if lead_known is not None and not told else len(order), "known")
    if about_failure:  # a fix upstream already made for this traceback, after the user's version
        from rlmedic.agent import upstream as U

        parts["upstream"] = U.section(case.evidence)
        order.insert(1, "upstream")
    # the root is told where its subject is told (a damaged newest save heads the checkpoint facts)
    home = {"checkpoints": "plan", "gpus": "gpus"}.get(case.root_ev.subject if case.root_ev else "", "")
    if home and parts["cause"]:
        c, h = parts["cause"], parts[home]
        parts[home] = S.Section(home, c.lines + h.lines, c.more + h.more)
        parts["cause"] = S.Section("cause")
    card_lead = not case.looked and case.root is None and not docs_lead
    playbook = S.background(inq, case, cards, lead=card_lead or (follow and not repeat_root and not _answered(parts, case)),
                            told=told)
    if card_lead and "fixes" in order:  # a question alone: the likely cause, then what to change
        parts["cards"] = playbook
        at = order.index("fixes")
        order.insert(at + 1 if "fixes" in case.leads else at, "cards")  # "what should I set?": the edit first
        playbook = S.Section("cards")
    tail = [S.documents(inq, case, docs, leading=bool(docs_lead)), playbook, S.needs(inq, case)]
    head: list[S.Section] = []
    if follow and not repeat_root and cards:  # what the thread's files already show about the new question
        head.append(S.related_findings(inq, case, cards[0][0].category))
    if follow and not show_cause:  # what the thread established, in one line, after the new answer
        tail.insert(len(tail) - 1, S.earlier(inq, case))
    if docs_lead and not case.looked:
        head, tail = head + [tail[0]], tail[1:]  # a question alone: the team's own doc outranks every card
    short = head + [parts[name] for name in order] + tail
    if case.ruled_out:
        short.append(S.Section("ruled", (S.Line("Left out as you ruled it out: " + ", ".join(sorted(case.ruled_out)) + "."),)))
    if not any(s.lines for s in short) and not case.looked:
        short.append(S.Section("none", (S.Line("No playbook card matches this question closely, and no log or file was given."),)))

    answer = Answer(answer="", engine="offline")
    text, more = _render(short, answer)
    answer.answer = text
    answer.more = more
    answer.fixes = list(chosen)
    if about_failure:
        from rlmedic.agent import upstream as U

        answer.upstream_fixes = U.upstream_dicts(case.evidence)
    answer.config_diff = diff
    _structured(answer, case, lead_known, cards)
    answer.details = [line.text for name in ("known", "gpus", "plan", "config") for line in parts[name].lines]
    if case.root is None:
        answer.details = [line.text for line in parts["cause"].lines] + answer.details
    answer.needs = [line.text for line in S.needs(inq, case).lines]
    first = next((s.lines[0].text for s in short if s.lines), "")
    answer.summary = (f"Known issue {lead_known.record.source}: {lead_known.record.title}" if lead_known is not None
                      else answer.root_cause or (_plain(first) if (case.healthy or case.nothing) else "")
                      or (cards[0][0].title if cards else "") or _plain(first))
    return answer


def _plain(text: str) -> str:
    return re.sub(r"\s*\{cite\}", "", text).strip()


def _answered(parts: dict[str, S.Section], case: Case) -> bool:
    """Whether a follow-up's asked-for sections say anything (else the playbook answers the new question)."""
    return any(parts[lead] for lead in case.leads if lead in parts)


def _root_keys(case: Case, cards: Sequence[tuple[Any, float]]) -> set[str]:
    """The settings the root acts on: keys of its own fixes, of what led to it, and of its card's fixes."""
    keys: set[str] = set()
    if case.root is None:
        return keys
    for f in (case.root, *case.before_root):
        keys |= {x.key for x in f.fixes if x.key}
    if cards and cards[0][0].category == case.root.category:
        keys |= {x.key for x in cards[0][0].fixes if x.key}
    return keys


def _structured(answer: Answer, case: Case, lead_known: Any, cards: Sequence[tuple[Any, float]]) -> None:
    """Category, root cause, its evidence lines, findings and cards: the JSON fields, from the same case."""
    root = case.root
    for e in case.evidence:
        answer.findings.extend(f.to_dict() for f in (e.findings + e.advice))
    if root is not None:
        answer.category = root.category or ""
        answer.root_cause = root.summary
        if root.file and root.line:
            answer.evidence.append(f"{root.file}:{root.line}")
        answer.evidence += [f"{f.file}:{f.line}" for f in case.before_root if f.file and f.line]
        if root.card:
            answer.cards.append(root.card)
    if lead_known is not None and lead_known.how in ("exact", "regex"):
        answer.category = lead_known.record.category
    if cards and not case.healthy:
        answer.category = answer.category or cards[0][0].category
        answer.cards = list(dict.fromkeys(answer.cards + [c.id for c, _ in cards]))
    if case.healthy:
        answer.category = answer.category if root is not None else ""


def _render(sections: Sequence[S.Section], answer: Answer) -> tuple[str, str]:
    """The short text (with its sources) and the verbose rest; citations numbered in order of appearance."""

    def text_of(line: S.Line) -> str:
        marks = " ".join(f"[{answer.cite(c)}]" for c in line.cites)
        if "{cite}" in line.text:
            return line.text.replace("{cite}", marks) if marks else line.text.replace(" {cite}", "").replace("{cite}", "")
        return f"{line.text} {marks}" if marks else line.text

    short = [text_of(line) for s in sections for line in s.lines]
    shown = len(answer.citations)
    more = [text_of(line) for s in sections for line in s.more]
    if answer.citations[:shown]:
        short += ["", "Sources:"] + [_source(i, c) for i, c in enumerate(answer.citations[:shown], 1)]
    if answer.citations[shown:]:
        more += ["", "More sources:"] + [_source(i, c) for i, c in enumerate(answer.citations[shown:], shown + 1)]
    return "\n".join(short), "\n".join(more)


def _source(i: int, c: Citation) -> str:
    return f"  [{i}] {c}" + (f" <{c.url}>" if c.url else "")


# ---------------------------------------------------------------------- knowledge the answer draws on


def _known(inq: Inquiry, case: Case, texts: list[str], kb: Any) -> tuple[Any, list[Any]]:
    """The known issue that explains the root (or None) and at most two related ones; each backed by the
    evidence (an error string, a pattern or an exception and its message) and of the framework in play."""
    from rlmedic.knowledge.known import match
    from rlmedic.knowledge.known.answer import leading
    from rlmedic.versions import read_versions

    if case.healthy and not case.asks_problem:
        return None, []
    carried = {p: v for e in case.evidence for p, v in e.versions.items()}
    versions = {**carried, **read_versions(inq.question, *texts)} if carried else None
    matches = match(texts, question=inq.question, versions=versions, kb=kb, k=4)
    # evidence, not words: an error string few records share, a record's own pattern, or the exception with
    # most of its message's words; never a similarity of words alone
    backed = [m for m in matches if m.how != "similar" and same_stack(m, case.framework)
              and (m.certain or m.how == "exception" or m.shared <= RELATED_SHARED)]
    elsewhere = [f for f in case.cascades if f.category != getattr(case.root, "category", None)]
    lead = next((m for m in leading(backed) if _explains(m, case.root, [*texts, inq.question], elsewhere)), None)
    return lead, [m for m in backed if m is not lead][:2]


def _cards(inq: Inquiry, case: Case, kb: Any, *, follow: bool, repeat_root: bool, k: int = 3) -> list[tuple[Any, float]]:
    """Playbook cards whose preconditions hold: the root's own card (and its framework's twin), or, for a
    question asked alone or a follow-up's new question, a search; never for a run with nothing to diagnose
    or a healthy run the question does not doubt."""
    from rlmedic.knowledge.cards import card_by_id

    if case.nothing or (case.healthy and not case.asks_problem):
        return []
    out: list[tuple[Any, float]] = []
    named = [case.root.card] if case.root is not None and case.root.card and repeat_root else []
    if case.root is None and case.looked:  # warnings only: the card a warning names
        named = [f.card for e in case.looked for f in e.findings + e.advice if f.card][:1]
    search = (lambda q: kb.search(q, k + 4, kind="card")) if kb is not None else (lambda q: [])
    query = inq.question if (follow and not repeat_root) else _topic(inq)
    if case.root is not None and repeat_root:
        query = f"{query} {case.root.summary}"
    for card_id in named:
        card = card_by_id(card_id)
        if not card or card.category in case.ruled_out:
            continue
        if case.framework and case.framework not in card.frameworks:
            # the same problem's card for the framework in play leads (its keys); a generic one follows
            own = [c for c in (card_by_id(h.card_id) for h in search(query))
                   if c is not None and case.framework in c.frameworks and c.category == card.category]
            out += [(own[0], 1.0)] if own else []
        if _card_fits(card, case.framework):
            out.append((card, 1.0))
    if out:
        return out
    if (case.root is not None and repeat_root) or (case.looked and not follow):
        return []  # a root without a card, or files with nothing specific: no card is guessed
    hits = [(card_by_id(h.card_id), h.score) for h in search(query)]
    hits = [(c, s) for c, s in hits if c is not None and c.category not in case.ruled_out and _card_fits(c, case.framework)]
    if not hits:
        return []
    best = hits[0][1]
    hits = [(c, s) for c, s in hits if s >= RELATED_SHARE * best]
    # among cards that match about as well, the one a finding in the thread's files names comes first
    named_by_files = {f.card for e in case.looked for f in e.findings if f.card}
    hits.sort(key=lambda cs: cs[0].id not in named_by_files)
    return hits[:k]


def _card_fits(card: Any, framework: str) -> bool:
    """A card written for other frameworks only (AReaL keys for a verl run) is left out."""
    return not framework or not card.frameworks or framework in card.frameworks or "generic" in card.frameworks


def _topic(inq: Inquiry) -> str:
    """The retrieval text: a very short follow-up with no intent of its own carries the thread's last question."""
    q = inq.question
    if not inq.history or len(q.split()) > 6:
        return q
    last = inq.history[-1]
    return " ".join(x for x in (q, str(last.get("question") or "")[:400]) if x)


def _docs(inq: Inquiry, case: Case, kb: Any) -> tuple[list[Any], list[Any]]:
    """The team's indexed documents for the question and the root's evidence, and those that outrank every card."""
    from rlmedic.knowledge.retrieve import leading_documents

    if kb is None or case.nothing or (case.healthy and not case.asks_problem):
        return [], []
    try:
        if not kb.has_documents():
            return [], []
        query = inq.question
        if case.root is not None:
            line = str(case.root.evidence.get("line_text") or "")
            query = f"{query}\n{case.root.summary}\n{line}"[:2000]
        ranked = kb.search(query, DOC_RANKS)
    except Exception:  # noqa: BLE001 - no index: the answer goes on without documents
        return [], []
    docs = [d for d in ranked if d.kind == "doc"][:3]
    return docs, leading_documents(ranked)


#: A team document shows when it ranks among this many results of the one mixed ranking (cards and documents).
DOC_RANKS = 10


#: Words that make a log line an error line (a known issue may lead on it when no root was found).
ERROR_WORDS = re.compile(r"(?i)error|exception|traceback|fail|fatal|abort|assert|killed|timed? ?out|\bnan\b|\binf\b|"
                         r"hang|stuck|\boom\b|out of memory|refused|denied|cannot|can't|unable|invalid|not found|"
                         r"no such|segmentation|core dumped|exited|deprecat|warn")
#: A matched line this many lines after the root's line belongs to the root's traceback.
TRACEBACK_LINES = 40


def _explains(m: Any, root: Any, texts: Sequence[str] = (), elsewhere: Sequence[Any] = ()) -> bool:
    """Whether a certain known-issue match is about the root error (it then leads): there is no root,
    the record's category is the root's, or the line it matched is the root's own or follows it
    within its traceback (a crash line, then the exception that names the bug). A line of a cascade
    (``elsewhere``: the findings of another category than the root's, an NCCL watchdog after an OOM,
    shown around the root as context) is about that cascade, not the root: told by the cascade's own
    signature, so it holds in the head and tail of a big log too, whose lines are not numbered as the file's."""
    if root is None:
        # no failure in the evidence (texts end with the question): a record leads only on an error line
        # or on the user's own words, never on a metric or progress line of a run that may be healthy
        line = (m.matched or "").strip()
        return bool(line) and (any(line in t for t in texts[-1:]) or ERROR_WORDS.search(line) is not None)
    if m.record.category == root.category:
        return True
    line = (m.matched or "").strip()[:80]
    if not line:
        return False
    if any(_signature_matches(f.id, m.matched or "") for f in elsewhere):
        return False
    # where the line is first in each text (file)
    ats = [n for n in (next((n for n, c in enumerate(text.splitlines(), 1) if line in c), None) for text in texts)
           if n is not None]
    if line in str(root.evidence.get("excerpt") or "") + " " + root.summary:
        return True
    return bool(root.line) and any(0 <= n - root.line <= TRACEBACK_LINES for n in ats)


def _signature_matches(signature_id: str, line: str) -> bool:
    """Whether the log signature ``signature_id`` (a finding's id) matches ``line``; False for ids that
    name no signature (a metric finding, a config rule)."""
    from rlmedic.tools.logs.signatures import builtin_catalog

    sig = builtin_catalog().by_id.get(signature_id)
    return sig is not None and bool(line) and sig.match(line)


#: Repositories of RL training frameworks (the part before ``#`` of a record's source, lowercased): a bug
#: filed there belongs to that framework, whatever shared parts its record also names.
RL_REPOS = {"areal": "areal", "realhf": "areal", "slime": "slime", "verl": "verl", "trl": "trl", "rl": "nemo-rl",
            "openrlhf": "openrlhf", "rllm": "rllm", "roll": "roll", "skyrl": "skyrl"}


def same_stack(m: Any, framework: str) -> bool:
    """Whether a known issue can be the user's: a record of another RL framework (a verl bug for an AReaL
    run, a TRL bug for a verl run) never shows; records of shared parts (SGLang, vLLM, Megatron, torch,
    NCCL, Ray) can."""
    if framework not in RL_FRAMEWORKS:
        return True
    theirs = set(m.record.frameworks) & RL_FRAMEWORKS
    repo = RL_REPOS.get(str(getattr(m.record, "source", "")).split("#")[0].split("/")[-1].lower())
    if repo and repo != framework:
        return False
    return not theirs or framework in theirs


_same_stack = same_stack  # the name tests and older callers use


# ---------------------------------------------------------------------- the model's part


def grounded_text(answer: Any) -> str:
    """What the tools established, as plain text: printed after a model's prose.

    The model's text is its own; this block is not. With a model, the engine composed the full
    offline answer from the same evidence (``Answer.grounded``): that is shown. Otherwise the
    structured fields (root cause, evidence lines, fixes, diff, numbered sources). Empty when the
    tools established nothing.
    """
    if getattr(answer, "grounded", ""):
        return "\n".join(["", "-" * 24, "What rlmedic established without the model:", answer.grounded.rstrip()])
    lines: list[str] = []
    if answer.root_cause:
        lines.append(f"Root cause (from the tools): {answer.root_cause}")
        if answer.category:
            lines.append(f"  category: {answer.category}")
        for where in answer.evidence[:5]:
            lines.append(f"  evidence: {where}")
    if answer.fixes:
        lines.append("Fixes (from the tools):")
        lines += [f"  {i}. {fix}" for i, fix in enumerate(answer.fixes[:8], 1)]
    if answer.config_diff:
        lines += ["Corrected config (diff):", answer.config_diff.rstrip()]
    if answer.citations:
        lines.append("Sources:")
        lines += [f"  [{i}] {c}" + (f" <{c.url}>" if getattr(c, "url", "") else "") for i, c in enumerate(answer.citations, 1)]
    if not lines:
        return ""
    return "\n".join(["", "-" * 24, *lines])
