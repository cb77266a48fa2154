"""Whether a model's final reply may stand as the answer, and how it must be led.

Three ways a small model's reply is worse than the offline answer although it is text:

- :func:`degenerate`: a repetition loop ("the the the ...", one line over and over),
  thousands of characters that say nothing; the run falls back to the offline answer;
- :func:`asks_back`: a question to the user for what rlmedic already has ("could you
  share the log?" with the log attached); when the evidence answers it, it is no answer;
- :func:`contradiction`: a confident cause that the tools' root cause contradicts
  (NCCL blamed on an out-of-memory log); the answer then says so first and leads with
  the tools' root, the model's text following as its own, unverified.

All three are judged on the text alone with cheap checks (compression, a few patterns,
the category vocabulary of :mod:`rlmedic.agent.evaluate`), never on a second model call.
"""

from __future__ import annotations

import re
import zlib

#: Below this many characters a reply is too short to judge as a loop.
_LOOP_MIN_CHARS = 400
#: zlib ratio under which a reply is mostly repetition (prose compresses to 0.3-0.6).
_LOOP_RATIO = 0.12
#: One unit of up to 60 characters repeated this many times in a row is a loop.
_LOOP_REPEATS = 12
_REPEAT = re.compile(r"(.{1,60}?)(?:\s*\1){%d,}" % (_LOOP_REPEATS - 1), re.S)


def degenerate(text: str) -> bool:
    """Whether ``text`` is a repetition loop rather than an answer (whole or its tail)."""
    text = text.strip()
    if len(text) < _LOOP_MIN_CHARS:
        return False
    raw = text.encode("utf-8", "replace")
    if len(zlib.compress(raw, 6)) / len(raw) < _LOOP_RATIO:
        return True
    tail = text[-4000:]  # a loop after a sensible start: the tail repeats one unit
    match = _REPEAT.search(tail)
    return match is not None and len(match.group(0)) >= _LOOP_MIN_CHARS / 2 and len(match.group(1).strip()) > 0


_ASK = re.compile(
    r"\b(?:could|can|would|will)\s+you\s+(?:please\s+)?(?:share|provide|attach|paste|send|upload|post|give|show)"
    r"|\bplease\s+(?:share|provide|attach|paste|send|upload|post)"
    r"|\b(?:i|we)\s+(?:would\s+)?need\s+(?:to\s+see\s+)?(?:the|your|more|a)\b"
    r"|\b(?:i\s+)?(?:can(?:no|')?t|could\s*n[o']?t|am\s+unable\s+to|do\s*n[o']?t\s+have\s+access\s+to)\s+"
    r"(?:read|see|access|open)\s+(?:the|your)",
    re.I)
#: What the question back asks for: something rlmedic reads (the attachment, its log or config).
_ASKED_FOR = re.compile(r"\b(?:log|logs|file|output|traceback|error|config|script|stack|trace|details|snapshot)\b", re.I)


def asks_back(text: str) -> bool:
    """Whether ``text`` is a request to the user for evidence instead of an answer.

    Short replies only: a long answer that ends with "could you share your config?" has
    answered; one that is mostly the question has not.
    """
    text = text.strip()
    if not text or len(text) > 700:
        return False
    return _ASK.search(text) is not None and _ASKED_FOR.search(text) is not None


#: Causes precise enough that naming one is a claim (category -> how a text names it). Loose
#: categories ("config", "data", "performance") are not here: naming them contradicts nothing.
_CAUSES: dict[str, str] = {
    "oom": r"out of (?:\w+ ){0,2}memory|\boom\b|outofmemory|memory (?:error|exhaust)",
    "nccl": r"\bnccl\b|collective|all.?reduce|all.?gather|watchdog|process group|\bgloo\b",
    "nan": r"\bnan\b|non-finite|\binf\b|not a number|loss (?:explod|diverg)",
    "sglang": r"\bsglang\b|inference (?:server|engine)|rollout (?:server|engine)|\bvllm\b",
    "reward": r"reward.{0,40}(?:collaps|zero|drop|constant|stuck)",
    "weights": r"weight.{0,12}(?:sync|update|transfer|broadcast)",
    # "nothing is wrong" is a claim too: against a root cause the tools found, it ignores them
    "healthy": r"\bno (?:errors?|problems?|issues?|failures?)\b(?! (?:in|with) (?:the )?(?:rollout|sglang|engine))|"
               r"(?:looks|seems|is|was|ran) (?:healthy|fine|normal|ok)\b|nothing (?:wrong|abnormal|unusual)|"
               r"completed successfully|finished successfully",
}
#: Which of those names each category of the shared vocabulary.
_FAMILY = {"oom_generation": "oom", "oom_training": "oom", "oom_weight_update": "oom", "nccl_timeout": "nccl",
           "nan_loss": "nan", "sglang_crash": "sglang", "sglang_connection": "sglang", "reward_collapse": "reward",
           "weight_sync": "weights"}
_CAUSE_LINE = re.compile(r"^\s*(?:\**)?(?:root\s+cause|cause|diagnosis)\b[^:\n]*:\s*(.+)$", re.I | re.M)
_NEXT_PART = re.compile(r"\b(?:fix(?:es)?|solution|sources?|evidence)\s*:", re.I)


def claimed_cause(text: str) -> str:
    """The part of ``text`` that states the cause: its ``Root cause:`` line, else its first paragraph
    (either up to a following ``Fix:``)."""
    match = _CAUSE_LINE.search(text)
    cause = match.group(1) if match else text.strip().split("\n\n", 1)[0]
    return _NEXT_PART.split(cause, 1)[0][:600]


def contradiction(text: str, category: str) -> str:
    """The cause the model names against the tools' ``category`` ("nccl", "oom", ...), "" when none.

    The model contradicts the tools when its cause names another precise cause and does not
    name the tools' one (nor their category in the words of
    :func:`rlmedic.agent.evaluate.names_category`).
    """
    from rlmedic.agent.evaluate import names_category

    family = _FAMILY.get(category)
    if not text or family is None:
        return ""
    cause = claimed_cause(text)
    if re.search(_CAUSES[family], cause, re.I) or names_category(cause, category):
        return ""
    for other, pattern in _CAUSES.items():
        if other != family and re.search(pattern, cause, re.I):
            return other
    return ""
