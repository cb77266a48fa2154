"""Compose: the answer from all of the evidence, for both engines.

Reads only :class:`~rlmedic.types.Evidence` (never a tool's name or its JSON keys) and
the knowledge base, in this order:

1. what the question asks for first (the edit to make, "was it healthy", the GPUs, the
   recovery plan), from :mod:`rlmedic.agent.intents`;
2. a known upstream issue that matches the user's exact error (cause, fix, fixed-in, cited);
3. the root cause with its evidence line, or "the run looks healthy" with what was checked;
4. GPU facts and advice, checkpoint facts and the recovery plan;
5. the fixes (exact config edits first) and the corrected config diff;
6. playbook cards ranked for the framework in play (AReaL keys for AReaL, slime flags for
   slime), minus the categories the question rules out; documents and threads;
7. which file to attach when the question needs evidence nobody gave.

:func:`ground` fills the structured fields of an :class:`Answer` (root cause, evidence
lines, fixes, diff, citations, findings) from the same evidence; the LLM loop uses it so
its structured answer holds only what a tool established.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from rlmedic.agent.events import Answer
from rlmedic.types import Citation, Evidence, Fix, severity_rank

#: A second card is mentioned when its score is at least this share of the best one.
RELATED_SHARE = 0.8
MAX_FIXES = 8


#: What the tools examine (Evidence.subject); search hits are knowledge, not a look at the run.
SUBJECTS = ("logs", "config", "gpus", "checkpoints")


# ---------------------------------------------------------------------- frameworks


#: verl's Hydra config roots (``actor_rollout_ref.rollout.n=8``, ``trainer.nnodes=2``); a dotted key under
#: one of them is verl's, not AReaL's (whose ``actor.``/``rollout.`` would match inside it).
_VERL_KEY = re.compile(
    r"\b(?:actor_rollout_ref|critic|trainer|reward_model|custom_reward_function|algorithm)(?:\.[a-z_][a-z0-9_]*)+"
    r"|\bdata\.(?:train_batch_size|max_prompt_length|max_response_length|train_files|val_files"
    r"|filter_overlong_prompts|truncation|reward_fn_key|prompt_key)\b"
    r"|\bverl\.trainer\.main_ppo\b")
_AREAL_KEY = re.compile(r"\b(?:actor|rollout|gconfig|saver|recover|cluster|sglang|train_dataset)\.[a-z_]+")
_SLIME_FLAG = re.compile(r"(?<![\w-])--[a-z]+(?:-[a-z]+)+")


def detect_framework(text: str) -> str:
    """``areal``, ``slime`` or ``verl`` when the text names one (and no other), else by its keys: verl's
    Hydra keys (``actor_rollout_ref.*``, ``trainer.*``, ...), dotted AReaL keys and slime/Megatron ``--flags``
    (the most frequent wins), else ``""``."""
    low = text.lower()
    named = {fw for fw in ("areal", "slime") if fw in low} | ({"verl"} if re.search(r"\bverl\b", low) else set())
    if len(named) == 1:
        return named.pop()
    verl = len(_VERL_KEY.findall(low))
    rest = _VERL_KEY.sub(" ", low)  # AReaL's actor./rollout. must not count inside a verl key
    areal = len(_AREAL_KEY.findall(rest))
    slime = len(_SLIME_FLAG.findall(rest)) + (2 if "megatron" in low and not areal and not verl else 0)
    counts = {"areal": areal, "slime": slime, "verl": verl}
    best = max(counts, key=counts.__getitem__)
    if counts[best] and sum(n == counts[best] for n in counts.values()) == 1:
        return best
    return ""


def framework_in_play(question: str, evidence: Sequence[Evidence]) -> str:
    """The question's own framework, else the one the evidence shows (logs, config, checkpoints)."""
    named = detect_framework(question)
    if named:
        return named
    seen = [fw for e in evidence for fw in e.frameworks if fw in ("areal", "slime", "verl")]
    return max(set(seen), key=seen.count) if seen else ""


def fits(fix: Fix, framework: str) -> bool:
    """Whether ``fix`` applies to ``framework`` (untagged fixes apply everywhere; flags are slime's,
    keys under verl's config roots verl's, other dotted keys AReaL's)."""
    if not framework:
        return True
    if fix.framework:
        return fix.framework in (framework, "generic")
    key = fix.key.strip()
    if not key:
        return True
    if key.startswith("--"):
        return framework == "slime"
    if "." in key:
        return framework == ("verl" if _VERL_KEY.match(key.lower()) else "areal")
    return True


# ---------------------------------------------------------------------- grounding


def _log_citation(file: str, line: int | None) -> Citation:
    return Citation(kind="log", ref=file, lines=(line, line) if line else None)


def ground(answer: Answer, evidence: Iterable[Evidence]) -> Answer:
    """Fill ``answer``'s structured fields from the evidence, in order (config edits before generic advice)."""
    for ev in evidence:
        if ev is None:
            continue
        for c in ev.citations:
            answer.cite(c)
        root = ev.root_finding
        answer.findings.extend(f.to_dict() for f in (ev.findings + ev.advice))
        if root is None:  # no root cause here, but a warning that names its card still picks the card
            named = [f.card for f in ev.findings + ev.advice
                     if f.card and severity_rank(f.severity) <= severity_rank("warning")]
            answer.cards += [c for c in named[:1] if c not in answer.cards]
        if root is not None and not answer.root_cause:
            answer.category = root.category or answer.category
            answer.root_cause = root.summary
            if root.file and root.line:
                answer.evidence.append(f"{root.file}:{root.line}")
            if root.card:
                answer.cards.insert(0, root.card)
        known = {(f.key, str(f)) for f in answer.fixes}
        new = [f for f in ev.fixes if str(f) and (f.key, str(f)) not in known]
        if ev.diff:
            # exact config edits go before generic advice; a generic fix for the same key gives way
            answer.config_diff = ev.diff
            keys = {f.key for f in new if f.key}
            answer.fixes[:] = new + [f for f in answer.fixes if not (f.key and f.key in keys)]
        else:
            answer.fixes.extend(new)
    return answer


def grounded_text(answer: Any) -> str:
    """What the tools established, as plain text: printed after a model's prose.

    The model's text is its own; this block is not: root cause with its evidence lines,
    the fixes (exact keys, old -> new), the config diff and numbered sources, all from
    tool results and citations. Empty when the tools established nothing. With a model, the
    engine composed the full offline answer from the same evidence (``Answer.grounded``):
    that is shown, known issue and cards included.
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


# ---------------------------------------------------------------------- composing


def compose(question: str, evidence: Sequence[Evidence], kb: Any, *, history: Sequence[dict[str, Any]] = (),
            texts: Sequence[str] = ()) -> Answer:
    """The offline answer: structured fields from :func:`ground`, text in the order above.

    ``texts`` are the attached logs' text: a known issue whose error string is in them (or in the
    question) leads with its cause, fix and the release that fixed it; the versions they and the
    evidence show decide whether that fix is already in the user's release.
    """
    from rlmedic.agent.intents import intents

    evidence = [e for e in evidence if e is not None]
    rules = intents()
    asked = rules.asked(question)
    ruled_out = rules.ruled_out(question)
    framework = framework_in_play(question, evidence)
    topic = _topic(question, history)
    roots = [e.root_finding for e in evidence if e.root_finding is not None]
    root = roots[0] if roots else None
    answer = Answer(answer="", engine="offline")
    # a known issue that explains the root error leads, cited first
    known = _known_matches(question, texts, evidence, framework, kb)
    first = [m for m in _leading(known) if _same_stack(m, framework) and _explains(m, root, [*texts, question])][:1]
    known_lead = _known_text(known, answer) if first else []
    answer = ground(answer, evidence)
    answer.fixes = [f for f in answer.fixes if fits(f, framework)]
    logs = [e for e in evidence if e.subject == "logs"]
    # what the tools looked at (not the question's own text, not search hits)
    looked = [e for e in evidence if e.subject in SUBJECTS]
    healthy = bool(looked) and all(e.healthy for e in looked) and root is None
    has_log = bool(logs)
    leads = [i.lead for i in asked]
    sections: dict[str, list[str]] = {}

    # the user's own documents that outrank every card lead when no attached log decides
    lead_docs = [] if has_log else _leading_documents(topic, kb)
    doc_lines = []
    if lead_docs:
        from rlmedic.knowledge.retrieve import key_sentences

        for doc in lead_docs:
            where = doc.source + (f" § {doc.section}" if doc.section else "")
            doc_lines.append(f"From your documents ({where}) [{answer.cite(doc.citation)}]: {key_sentences(doc, question)}")

    sections["known"] = known_lead
    if first:  # this exact bug is known: its fixes lead, and an exact match decides the category
        # after the exact edits to the user's own config (those are certain), before generic advice
        exact = {str(f) for e in evidence if e.diff for f in e.fixes}
        mine = [f for f in answer.fixes if str(f) in exact]
        shown = exact | {str(f) for f in first[0].fixes}
        answer.fixes = mine + [f for f in first[0].fixes if str(f) not in exact and fits(f, framework)] + \
            [f for f in answer.fixes if str(f) not in shown]
        if first[0].how in ("exact", "regex"):
            answer.category = first[0].record.category

    cause: list[str] = []
    root_ev = next((e for e in evidence if e.root_finding is root), None) if root is not None else None
    if root is not None:
        label = {"config": "config", "gpus": "GPUs", "checkpoints": "checkpoints"}.get(root_ev.subject if root_ev else "", "log")
        where = f" [{answer.cite(_log_citation(root.file, root.line))}]" if root.file and root.line else ""
        cause.append(f"From the {label}: {root.summary.rstrip('.')}{where}.")
        excerpt = str(root.evidence.get("excerpt") or "").strip()
        if excerpt:
            cause.append("  Evidence: " + " | ".join(line.strip() for line in excerpt.splitlines()[:3] if line.strip()))
        cascades = [f for e in evidence for f in e.findings if f.root is not None and f is not root]
        if cascades:
            cause.append(f"  {len(cascades)} later error(s) on other ranks or files follow from it "
                         f"(e.g. {cascades[0].summary.split('. ')[0]} at {cascades[0].file}:{cascades[0].line}).")
    finished = any(e.verdict == "finished" for e in logs)
    if healthy and logs:
        status = [("The run finished cleanly" if finished else "The run looks healthy")
                  + ": no error and no failure signature in the logs."]
    elif healthy:
        status = ["No problem found in what was checked (" + ", ".join(sorted({e.subject for e in looked})) + ")."]
    else:
        status = []
    if logs and root is None and not healthy and not [f for e in logs for f in e.findings if f.severity != "info"]:
        status = ["No error was found in the logs, but they show no training progress to judge the run by."]
    if evidence and (healthy or "status" in leads):
        status.append("What was checked: " + "; ".join(e.checked for e in evidence if e.checked) + ".")
    warnings = [fact for e in logs for fact in e.facts]
    if healthy and warnings:
        status.append("Worth a look (warnings, not failures): " + "; ".join(warnings[:3]))
    sections["cause"] = cause
    sections["status"] = status

    gpu_lines: list[str] = []
    for e in (e for e in evidence if e.subject == "gpus"):
        serious = [a for a in e.advice if severity_rank(a.severity) <= severity_rank("warning")]
        for a in serious:
            ref = f" [{answer.cite(a.citation)}]" if a.citation else ""
            gpu_lines.append(f"GPU check: {a.summary}{ref}" + (f" Do: {a.fixes[0]}." if a.fixes else ""))
        if not serious:
            gpu_lines.append("GPU check: nothing left over and no fault on the GPUs.")
        gpu_lines += [f"  {fact}" for fact in e.facts[:8]]
        gpu_lines += [f"  note: {a.summary}" for a in e.advice if a.severity == "info" and a.id != "gpu-in-use"][:3]
    sections["gpus"] = gpu_lines

    plan_lines: list[str] = []
    for e in (e for e in evidence if e.subject == "checkpoints"):
        for f in e.findings:
            if f is not root and severity_rank(f.severity) <= severity_rank("warning"):
                plan_lines.append(f"Checkpoints: {f.summary.rstrip('.')}.")
        plan_lines += [f"  {fact}" for fact in e.facts]
        if e.plan:
            plan_lines.append("Recovery plan: " + e.plan[0])
            plan_lines += [f"  - {step}" for step in e.plan[1:12]]
    sections["plan"] = plan_lines

    config_lines: list[str] = []
    for e in (e for e in evidence if e.subject == "config"):
        for f in e.findings:
            if f is not root and severity_rank(f.severity) <= severity_rank("warning"):
                ref = f" [{answer.cite(f.citation)}]" if f.citation else ""
                where = f"{f.key}: " if f.key else ""
                config_lines.append(f"Config check ({f.severity}): {where}{f.summary.rstrip('.')}{ref}.")
        config_lines += [f"  {fact}" for fact in e.facts]
    sections["config"] = config_lines[:8]
    # the root cause is told where its subject is told (a damaged save heads the checkpoint facts)
    home = {"checkpoints": "plan", "gpus": "gpus"}.get(root_ev.subject if root_ev else "", "cause")
    if home != "cause":
        sections[home][:0], sections["cause"] = sections["cause"], []

    # cards: retrieval on the question and the topic, for the framework in play, minus what is ruled out
    query = f"{topic} {root.summary}" if root is not None else topic  # a root without a card still steers the search
    skip_cards = healthy and not _asks_problem(question, asked)
    if skip_cards:
        answer.cards = []  # a warning's card is no cause of a healthy run
    cards = _cards(query, answer, kb, framework, ruled_out, skip=skip_cards)
    card_lines: list[str] = []
    card_fix_texts: set[str] = set()
    if cards:
        best, best_score = cards[0]
        answer.category = answer.category or best.category
        label = "Likely cause (playbook)" if root is None else "Background (playbook)"
        card_lines.append(f"{label}: {best.title} [{answer.cite(best.citation)}].")
        card_lines.append("Why it happens: " + " ".join(c.rstrip(".") + "." for c in best.causes[:2]))
        shown = {str(f) for f in answer.fixes}
        extra = [f for f in best.fixes if fits(f, framework) and str(f) not in shown]
        answer.fixes += extra
        card_fix_texts = {str(f) for f in extra}
        for card, score in cards[1:3]:
            if score >= RELATED_SHARE * best_score:
                card_lines.append(f"Also check: {card.title} [{answer.cite(card.citation)}].")
        answer.cards = list(dict.fromkeys(answer.cards + [c.id for c, _ in cards]))
    elif root is None and not evidence and not lead_docs:
        card_lines.append("No playbook card matches this question closely, and no log or file was given.")
    if ruled_out:
        card_lines.append("Left out as you ruled it out: " + ", ".join(sorted(ruled_out)) + ".")

    fix_lines: list[str] = []
    if answer.fixes:
        fix_lines.append("What to change (most effective first):")
        for i, fix in enumerate(answer.fixes[:MAX_FIXES], 1):
            text = str(fix)
            tag = f" [{fix.framework}]" if fix.framework and not framework else ""
            ref = f" [{answer.cite(fix.citation)}]" if fix.citation else ""
            if not ref and text in card_fix_texts and cards:
                ref = f" [{answer.cite(cards[0][0].citation)}]"
            why = f": {fix.why.rstrip('.')}" if fix.why and fix.key and fix.why not in text else ""
            fix_lines.append(f"  {i}. {text}{why}{tag}{ref}")
    if answer.config_diff:
        fix_lines += ["Corrected config (diff):", answer.config_diff.rstrip()]
    sections["fixes"] = fix_lines

    # what the question needs and nobody attached
    have = {e.subject for e in looked}
    needs = [i.attach for i in asked if i.attach and not (i.needs in have or (i.needs == "any" and have))]
    sections["needs"] = [f"To answer this exactly, {text}." for text in dict.fromkeys(needs)]

    more: list[str] = []
    retrieve = kb is not None and root is None and not healthy and kb.has_documents()
    docs = [d for d in (kb.search(topic, 3, kind="doc") if retrieve else []) if d.id not in {x.id for x in lead_docs}]
    if docs:
        more.append("Documentation: " + ", ".join(f"[{answer.cite(d.citation)}]" for d in docs) + ".")
    if known and not first and not skip_cards:  # demoted (fixed in the user's release) and merely similar records
        more += _known_text(known, answer)
        near = known[0]  # the nearest one's cause: what to compare with what you see (cited like the others)
        more.append(f"  In {near.record.source} [{answer.cite(near.citation)}]: {near.record.cause.strip()}")

    order = ["cause", "status", "gpus", "plan", "config", "fixes"]
    for lead in reversed(leads):  # what the question asks goes first, after a known issue that explains it
        order.remove(lead)
        order.insert(0, lead)
    order.insert(1 if history and order[0] == "fixes" else 0, "known")
    if history and "fixes" in leads and sections["fixes"]:
        # a follow-up about the edit: the edit first, the earlier diagnosis in one line
        sections["cause"] = sections["cause"][:1]
        card_lines = [line for line in card_lines if not line.startswith(("Why it happens", "Background"))]
    answer.details = [line for name in ("known", "status", "gpus", "plan", "config") for line in sections[name]]
    answer.needs = list(sections["needs"])
    lines = list(doc_lines)
    for name in order:
        lines += sections[name]
    lines += card_lines + more + sections["needs"]
    if answer.citations:
        lines += ["", "Sources:"] + [f"  [{i}] {c}" + (f" <{c.url}>" if c.url else "")
                                     for i, c in enumerate(answer.citations, 1)]
    if healthy and not answer.category:
        answer.category = ""
    answer.summary = (f"Known issue {first[0].record.source}: {first[0].record.title}" if first else
                      answer.root_cause or ((status[0] if status else "") if healthy else "")
                      or (cards[0][0].title if cards else ""))
    answer.answer = "\n".join(lines)
    return answer


def _asks_problem(question: str, asked: Sequence[Any]) -> bool:
    """A question that describes a problem of its own (not only "did it finish?")."""
    return any(i.lead != "status" for i in asked) or not asked


def _topic(question: str, history: Sequence[dict[str, Any]]) -> str:
    """The retrieval text: a short follow-up carries the thread's earlier question and conclusion."""
    if not history or len(question.split()) > 25:
        return question
    last = history[-1]
    return " ".join(x for x in (question, str(last.get("question") or "")[:400], str(last.get("summary") or "")) if x)


def _cards(topic: str, answer: Answer, kb: Any, framework: str, ruled_out: set[str],
           *, skip: bool = False, k: int = 3) -> list[tuple[Any, float]]:
    """The root finding's card when the evidence named one, else a search; filtered by framework and rule-outs."""
    from rlmedic.knowledge.cards import card_by_id

    if skip:
        return []
    out: list[tuple[Any, float]] = []
    for card_id in answer.cards[:1]:
        card = card_by_id(card_id)
        if card and card.category not in ruled_out and _card_fits(card, framework):
            out.append((card, 1.0))
    search = (lambda: kb.search(topic, k + 4, kind="card")) if kb is not None else (lambda: [])
    if out:
        named = out[0][0]
        if framework and framework not in named.frameworks:
            hits = search()
            # a generic root card: the same problem's card for the framework in play leads (its keys), the generic follows
            own = [c for c in (card_by_id(h.card_id) for h in hits)
                   if c is not None and framework in c.frameworks and c.category == named.category]
            out = [(own[0], 1.0), *out] if own else out
        return out
    for hit in search():
        card = card_by_id(hit.card_id)
        if card is None or card.category in ruled_out:
            continue
        if not _card_fits(card, framework):
            continue
        out.append((card, hit.score))
    return out[:k]


def _card_fits(card: Any, framework: str) -> bool:
    """A card written for other frameworks only (AReaL keys for a verl run) is left for a search instead."""
    return not framework or not card.frameworks or framework in card.frameworks or "generic" in card.frameworks


def _leading_documents(question: str, kb: Any) -> list[Any]:
    """The user's indexed documents ranked above every card for this question (one scale)."""
    from rlmedic.knowledge.retrieve import leading_documents

    if kb is None or not kb.has_documents():
        return []
    return leading_documents(kb.search(question, 6))


def _known_matches(question: str, texts: Sequence[str], evidence: Sequence[Evidence], framework: str,
                   kb: Any) -> list[Any]:
    """Known-issue records (and synced threads, as records) matching the logs and the question, best first;
    versions read from the texts plus those the evidence carries."""
    from rlmedic.knowledge.known import match
    from rlmedic.versions import read_versions

    carried = {p: v for e in evidence for p, v in e.versions.items()}
    versions = {**carried, **read_versions(question, *texts)} if carried else None  # None: the matcher reads them
    return match(list(texts), question=question, versions=versions, kb=kb, k=3)


#: Words that make a log line an error line (a known issue may lead on it when no root was found).
ERROR_WORDS = re.compile(r"(?i)error|exception|traceback|fail|fatal|abort|assert|killed|timed? ?out|\bnan\b|\binf\b|"
                         r"hang|stuck|\boom\b|out of memory|refused|denied|cannot|can't|unable|invalid|not found|"
                         r"no such|segmentation|core dumped|exited|deprecat|warn")
#: A matched line this many lines after the root's line belongs to the root's traceback.
TRACEBACK_LINES = 40


def _explains(m: Any, root: Any, texts: Sequence[str] = ()) -> bool:
    """Whether a certain known-issue match is about the root error (it then leads): there is no root,
    the record's category is the root's, or the line it matched is the root's own or follows it
    within its traceback (a crash line, then the exception that names the bug)."""
    if root is None:
        # no failure in the evidence (texts end with the question): a record leads only on an error line
        # or on the user's own words,
        # never on a metric or progress line of a run that may be healthy
        line = (m.matched or "").strip()
        return bool(line) and (any(line in t for t in texts[-1:]) or ERROR_WORDS.search(line) is not None)
    if m.record.category == root.category:
        return True
    line = (m.matched or "").strip()[:80]
    if not line:
        return False
    if line in str(root.evidence.get("excerpt") or "") + " " + root.summary:
        return True
    if not root.line:
        return False
    for text in texts:
        for n, candidate in enumerate(text.splitlines(), 1):
            if line in candidate:
                if 0 <= n - root.line <= TRACEBACK_LINES:
                    return True
                break
    return False


#: The RL frameworks: a bug in one of them is not the user's when they run another.
RL_FRAMEWORKS = frozenset({"areal", "slime", "verl"})


def _same_stack(m: Any, framework: str) -> bool:
    """Whether a known issue can be the user's: a record of another RL framework (a verl bug for an AReaL
    run) never leads; records of shared parts (SGLang, vLLM, Megatron, torch, NCCL, Ray) always can."""
    theirs = set(m.record.frameworks) & RL_FRAMEWORKS
    return framework not in RL_FRAMEWORKS or not theirs or framework in theirs


def _leading(matches: Sequence[Any]) -> list[Any]:
    from rlmedic.knowledge.known import leading

    return leading(matches)


def _known_text(matches: Sequence[Any], answer: Answer) -> list[str]:
    from rlmedic.knowledge.known import known_lines

    return known_lines(matches, answer.cite)
