"""Match a user's logs and question against known-issue records, most certain first.

Stages, each a stronger kind of evidence than the next:

1. ``exact``: a record's error string is inside one of the user's lines, as whole words (both
   normalised the way :func:`rlmedic.knowledge.threads.normalize_error` does: log prefixes
   dropped, numbers and case folded, whitespace collapsed). A string several records claim, or
   a line several records' strings match, names a kind of failure: it ranks, it never leads;
2. ``regex``: one of the record's regexes finds a line (of a big log: the hinted lines);
3. ``exception``: the traceback's exception type is the record's and most of its message's
   words are the record's too;
4. ``similar``: the words of the error lines and question against the records' title, errors,
   situation and cause (in-process, no model): an absolute word-overlap measure weighted by
   rarity, so nothing close stays low. The index's hybrid search of ``kind="known"`` adds to it when it is built.

Frameworks named in the question or log boost their records. The user's versions (read
from the texts unless given) decide whether a record's fix is already in their release;
such a record is demoted and says so. Synced issue threads (``rlmedic sync-issues``) are
converted to records on the way in and rank in the same list.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlmedic.knowledge.known.load import Pack, load
from rlmedic.knowledge.known.schema import KNOWN_FRAMEWORKS, Record, fixed_text, github_url
from rlmedic.types import Citation, Fix

#: Base score of each stage; the similarity of the whole text adds up to SIM_WEIGHT on top.
BASE = {"exact": 1.0, "regex": 0.9, "exception": 0.6, "similar": 0.0}
SIM_WEIGHT = 0.3
#: The word-overlap F-measure that counts as a similarity of 1 (divided into it, capped at 1).
SIM_SCALE = 2.5
#: An error string shared by many records loses up to this much (it names a kind of failure, not one bug).
GENERIC_PENALTY = 0.3
#: Each further error string of the same record found in the user's lines.
EXTRA_STRING = 0.05
#: The exception stage: shared message words (at least), their share of the message's words (at least),
#: and the share that lets an exception match lead an answer.
EXC_MIN_WORDS = 3
EXC_MIN_OVERLAP = 0.4
EXC_LEAD_OVERLAP = 0.6
#: An exception type more records than this claim is common (ValueError): leading then takes this overlap.
EXC_COMMON_TYPE = 3
EXC_COMMON_LEAD_OVERLAP = 0.85
#: A match on a string at most this many records share may lead an answer.
MAX_SHARED_TO_LEAD = 2
#: A record of a framework named in the question or log gains this share of its score.
FRAMEWORK_BOOST = 0.25
#: A record whose fix is in the user's release keeps this share of its score.
FIXED_DEMOTION = 0.5
#: A record votes on a category from this score (a similarity of ~0.2: a few shared rare words).
VOTE_MIN_SCORE = 0.06
#: An error string with fewer words than this (numbers aside) matches only with its numbers as written.
NUMBERS_MATTER_BELOW = 3
_LETTER_WORD = re.compile(r"[a-z][a-z_]{2,}")
#: Matches below this score are noise and are not returned.
MIN_SCORE = 0.12
#: A normalised error string shorter than this matches only a whole line (equal), never a part.
MIN_SUBSTRING = 16
#: Text scanned per input: the tail of a huge log holds the failure.
MAX_TEXT_CHARS = 4_000_000
MAX_REGEX_CHARS = 400_000
HOWS = ("exact", "regex", "exception", "similar")

_EXC_LINE = re.compile(r"(?m)^[^\S\n]*(?:[\w.]+:\s+)?((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure))"
                       r"(?::[^\S\n]*(.*))?$")
_WORD = re.compile(r"[a-z][a-z0-9_]{2,}")
_STOP = frozenset("the and for with was not are but this that from has have had into its when while can cannot you your "
                  "than then got get set use used using only more most less all any some one two "
                  "error errors exception failed fails failure runtimeerror valueerror file line lines".split())
_FRAMEWORK_WORDS = {
    "areal": ("areal", "realhf"), "slime": ("slime",), "verl": ("verl",), "sglang": ("sglang",), "vllm": ("vllm",),
    "megatron": ("megatron", "mcore"), "ray": ("ray",), "torch": ("torch", "pytorch"), "nccl": ("nccl",),
    "transformers": ("transformers",),
}


@dataclass
class KnownMatch:
    """One record that matches, how sure, and what it means for the user's versions."""

    record: Record
    score: float
    how: str
    matched: str
    version_status: str = "unknown"
    yours: str = ""
    advice: str = ""
    fixes: list[Fix] = field(default_factory=list)
    citation: Citation | None = None
    #: how many records claim the matched error string (1: only this one)
    shared: int = 1

    @property
    def certain(self) -> bool:
        """A string only this record (or one other) claims, a regex or the exception type matched, not only words."""
        return self.how != "similar" and self.shared <= MAX_SHARED_TO_LEAD

    def to_dict(self) -> dict[str, Any]:
        r = self.record
        return {
            "id": r.id, "title": r.title, "source": r.source, "url": r.source_url, "how": self.how,
            "score": round(self.score, 4), "matched": self.matched, "version_status": self.version_status,
            "yours": self.yours, "shared": self.shared, "fixed_in": fixed_text(r), "advice": self.advice, "category": r.category,
            "cause": r.cause, "fixes": [f.to_dict() for f in self.fixes], "citation": self.citation.to_dict() if self.citation else None,
        }


# -- the prepared pack ---------------------------------------------------------------------------
class _Index:
    """Normalised error strings, exception names, word weights and an inverted index of one pack."""

    def __init__(self, records: Sequence[Record]) -> None:
        from rlmedic.knowledge.threads import normalize_error

        self.records = list(records)
        self.errors: list[tuple[str, int]] = []
        #: (key, record) -> the literal text that must be on the line, for strings whose numbers are
        #: their point: "'rollout/raw_reward': 0.0" folded to "...: #" would match every healthy reward
        self.literal: dict[tuple[str, int], str] = {}
        for i, r in enumerate(self.records):
            for text in r.symptoms.errors:
                key = normalize_error(text)
                if len(key) >= 8:
                    self.errors.append((key, i))
                    if "#" in key and len(_LETTER_WORD.findall(key.replace("#", " "))) < NUMBERS_MATTER_BELOW:
                        self.literal[(key, i)] = " ".join(text.lower().split())
        # how many records claim each error string (theirs, or one inside or around it): a string many
        # records share ("CUDA out of memory") is evidence of a kind of failure, not of one bug
        by_key: dict[str, set[int]] = {}
        for key, i in self.errors:
            by_key.setdefault(key, set()).add(i)
        keys = list(by_key)
        blob = "\n".join(keys)
        starts = [0]
        for k in keys:
            starts.append(starts[-1] + len(k) + 1)
        owners = {key: set(records) for key, records in by_key.items()}
        for key in keys:  # one scan per key finds the keys around it; each such pair counts both ways
            at = blob.find(key)
            while at >= 0:
                around = keys[bisect.bisect_right(starts, at) - 1]
                if around != key:
                    owners[key] |= by_key[around]
                    if len(key) >= MIN_SUBSTRING:
                        owners[around] |= by_key[key]
                at = blob.find(key, at + 1)
        self.shared: dict[str, int] = {key: len(found) for key, found in owners.items()}
        # a string that is only a message many unrelated bugs print (generic.yaml) never leads either
        for key in keys:
            if is_generic(key):
                self.shared[key] = max(self.shared[key], GENERIC_SHARED)
        self.exceptions: dict[str, list[int]] = {}
        for i, r in enumerate(self.records):
            if r.symptoms.exception:
                self.exceptions.setdefault(_short_exc(r.symptoms.exception), []).append(i)
        #: record id -> (required literal, case ignored) per regex, in the record's order
        self.literals = {r.id: [required_literal(p) for p in r.symptoms.regexes] for r in self.records}
        # a text is searched only for the strings and patterns whose anchor word it has (a word every match
        # holds whole): thousands of team records then cost a set lookup each per text, not a search each
        self.error_at: dict[str, list[int]] = {}  # key -> its positions in self.errors
        for at, (key, _i) in enumerate(self.errors):
            self.error_at.setdefault(key, []).append(at)
        self.keys_by_word: dict[str, list[str]] = {}
        self.keys_always: list[str] = []
        for key in self.error_at:
            words = _LETTER_WORD.findall(key)
            if words:
                self.keys_by_word.setdefault(max(words, key=len), []).append(key)
            else:
                self.keys_always.append(key)
        self.patterns_by_word: dict[str, list[tuple[int, int]]] = {}  # word -> (record index, pattern number)
        self.patterns_always: list[tuple[int, int]] = []
        for i, r in enumerate(self.records):
            for n, (literal, _ignore) in enumerate(self.literals[r.id]):
                word = _anchor_word(literal) if len(literal) >= 4 else ""
                if word:
                    self.patterns_by_word.setdefault(word, []).append((i, n))
                else:
                    self.patterns_always.append((i, n))
        self.words = [set(_words(r.search_text())) for r in self.records]
        #: the words a user would see (title, errors, exception, situation, tags), not the explanation
        self.symptom_words = [set(_words("\n".join([r.title, *r.symptoms.errors, r.symptoms.exception,
                                                     r.symptoms.situation, *r.symptoms.tags, *r.components])))
                              for r in self.records]
        import math

        # word weights: idf scaled so that a word only one record has weighs 1; an inverted index finds
        # the records sharing a word (no BM25 library: importing one costs more than this whole index)
        df: Counter = Counter(w for words in self.words for w in words)
        top = math.log(1 + max(len(self.records), 1))
        self.weight = {w: math.log(1 + len(self.records) / n) / top for w, n in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, words in enumerate(self.words):
            for w in words:
                self.postings.setdefault(w, []).append(i)
        self.symptom_mass = [sum(self.weight.get(t, 0.0) for t in words) for words in self.symptom_words]

    def similarity(self, query: str) -> dict[int, float]:
        """record index -> similarity in [0, 1] (empty when no record shares a word).

        Absolute, so that "nothing close" stays low: the harmonic mean of the share of the query's word
        weight the record has and the share of the record's symptom words the query shows, times SIM_SCALE.
        """
        tokens = {t for t in _words(query) if t in self.postings}
        if not tokens:
            return {}
        w = self.weight
        query_mass = sum(w[t] for t in tokens)
        shared: dict[int, float] = {}
        for t in tokens:
            for d in self.postings[t]:
                shared[d] = shared.get(d, 0.0) + w[t]
        out = {}
        for d, mass in shared.items():
            symptoms = self.symptom_words[d]
            # how much of the query the record explains, and how much of the record's symptoms the query shows
            p = mass / query_mass
            r = sum(w[t] for t in tokens & symptoms) / max(self.symptom_mass[d], 1e-9)
            f = 2 * p * r / (p + r) if p + r else 0.0
            if f > 0:
                out[d] = min(1.0, f * SIM_SCALE)
        return out


def _anchor_word(literal: str) -> str:
    """The longest word of ``literal`` that a text holding ``literal`` holds whole (lower case; not one at
    either end of the literal, which may run on in the text: ``rror`` of ``Error`` in ``MyError``)."""
    low = literal.lower()
    words = [m.group(0) for m in _LETTER_WORD.finditer(low)
             if m.start() > 0 and m.end() < len(low) and low[m.start() - 1] not in _RUN and low[m.end()] not in _RUN]
    return max(words, key=len, default="")


_RUN = set("abcdefghijklmnopqrstuvwxyz_")
_LITERAL_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-:,'\"=/<>@!%;~`")
_ESCAPED_LITERALS = set(".()[]{}|*+?^$\\/-:'\"=#&%!@<>,;~`")


def required_literal(pattern: str) -> tuple[str, bool]:
    """The longest piece of plain text every match of ``pattern`` contains, and whether case is ignored.

    Read from the top level of the pattern only (outside groups and classes, not under a quantifier);
    ``("", ...)`` when there is none (a top-level alternation, or only classes). A regex whose literal is
    absent from a text cannot match it, so it is neither compiled nor run there.
    """
    flags = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    ignore = bool(flags and "i" in flags.group(1))
    if flags and "x" in flags.group(1):
        return "", ignore  # verbose: spaces mean nothing, text is not literal
    runs: list[str] = []
    cur: list[str] = []
    depth, i, n = 0, 0, len(pattern)

    def close() -> None:
        if cur:
            runs.append("".join(cur))
            cur.clear()

    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if depth == 0 and nxt in _ESCAPED_LITERALS:
                cur.append(nxt)
            else:
                close()
            i += 2
            continue
        if ch == "[":  # a class: skip to its end
            close()
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "(":
            close()
            depth += 1
        elif ch == ")":
            close()
            depth -= 1
        elif ch == "|" and depth == 0:
            return "", ignore  # a top-level alternation: nothing is required
        elif ch in "?*{":
            if cur:  # the quantifier applies to the last character only (it may occur zero times)
                cur.pop()
            close()
            if ch == "{":  # {m,n}: skip the counts
                end = pattern.find("}", i)
                i = end if end >= 0 else n
        elif ch == "+":
            close()
        elif depth == 0 and ch in _LITERAL_CHARS:
            cur.append(ch)
        else:
            close()
        i += 1
    close()
    best = max(runs, key=len, default="")
    return (best.lower() if ignore else best), ignore


GENERIC_FILE = __import__("pathlib").Path(__file__).with_name("generic_messages.txt")
#: What a generic string counts as: claimed by this many records (more than MAX_SHARED_TO_LEAD).
GENERIC_SHARED = 99
#: Informative characters a string must keep once the generic phrases, the exception type, numbers
#: and punctuation are taken out.
GENERIC_REST_CHARS = 3


@functools.lru_cache(maxsize=1)
def generic_phrases() -> tuple[str, ...]:
    """The phrases of ``generic_messages.txt``, longest first, lower case, spaces collapsed."""
    phrases = set()
    for n, raw in enumerate(GENERIC_FILE.read_text(encoding="utf-8").splitlines(), 1):
        line = " ".join(raw.lower().split())
        if not line or line.startswith("# ") or line == "#":
            continue
        if len(line) < 4:
            raise ValueError(f"{GENERIC_FILE}:{n}: {raw!r} is too short to be a message")
        phrases.add(line)
    return tuple(sorted(phrases, key=len, reverse=True))


_AMOUNT = re.compile(r"#\s*(?:[kmgt]i?b|bytes?|gb|mb)\b|\bgpu\s*#")
_EXC_TYPE = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)*[a-z_]*(?:error|exception|warning)\b:?")


def is_generic(key: str) -> bool:
    """Whether a normalised error string is only messages many bugs print (plus an exception type,
    numbers and punctuation): ``valueerror: not enough values to unpack (expected #, got #)`` is;
    ``no module named 'amp_c'`` is not (the module names the bug)."""
    rest = key.lower()
    for phrase in generic_phrases():
        rest = rest.replace(phrase, " ")
    rest = _EXC_TYPE.sub(" ", rest)
    rest = _AMOUNT.sub(" ", rest)  # "# gib", "# mib free": sizes say nothing about which bug
    return len(re.sub(r"[^a-z_]", "", rest)) < GENERIC_REST_CHARS


def _IDENT(ch: str) -> bool:  # noqa: N802 - reads like a character class
    """A character that continues an identifier or a number (``#`` is a normalised number)."""
    return ch.isalnum() or ch == "_" or ch == "#"


_INDEXES: dict[int, tuple[Pack, _Index]] = {}


def _index(pack: Pack) -> _Index:
    hit = _INDEXES.get(id(pack))
    if hit is None or hit[0] is not pack:
        if len(_INDEXES) > 8:
            _INDEXES.clear()
        hit = (pack, _Index(pack.records))
        _INDEXES[id(pack)] = hit
    return hit[1]


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def _short_exc(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower()


# -- matching ------------------------------------------------------------------------------------
class _Lines:
    """The user's lines, normalised into one blob, with a way back to the original line."""

    def __init__(self, texts: Iterable[str]) -> None:
        from rlmedic.knowledge.threads import normalize_error

        self.originals: list[str] = []
        starts: list[int] = []
        parts: list[str] = []
        pos = 0
        for text in texts:
            for raw in text[-MAX_TEXT_CHARS:].splitlines():
                line = raw.strip()
                if not line:
                    continue
                norm = normalize_error(line)
                starts.append(pos)
                parts.append(norm)
                self.originals.append(line)
                pos += len(norm) + 1
        self.starts = starts
        self.norms = parts
        self.blob = "\n".join(parts)

    def candidates(self, idx: _Index) -> list[str]:
        """The error strings of ``idx`` these lines may hold: those whose longest word they have (a string
        found as whole words has each of its words whole), and those without a word."""
        words = set(_LETTER_WORD.findall(self.blob))
        return [*idx.keys_always, *(key for w in words for key in idx.keys_by_word.get(w, ()))]

    def find(self, key: str) -> str | None:
        """The original line whose normalised form contains ``key`` as whole words (``/update_weights`` is
        not inside ``/update_weights_xccl``), or equals it when the key is short."""
        at = self.blob.find(key)
        while at >= 0:
            i = bisect.bisect_right(self.starts, at) - 1
            if (len(key) >= MIN_SUBSTRING or self.norms[i] == key) and self._bounded(at, key):
                return self.originals[i]
            at = self.blob.find(key, at + 1)
        return None

    def _bounded(self, at: int, key: str) -> bool:
        end = at + len(key)
        before = self.blob[at - 1] if at > 0 else " "
        after = self.blob[end] if end < len(self.blob) else " "
        return not (_IDENT(key[0]) and _IDENT(before)) and not (_IDENT(key[-1]) and _IDENT(after))


@dataclass
class _Seen:
    """What the logs alone give the matcher (no question): the line each error string is found on,
    each record's first regex hit as (pattern number, line, generic), the exception lines, the
    error lines, the versions and the frameworks. Small: the logs themselves are not kept."""

    lines: dict[str, str]
    regex: dict[str, tuple[int, str, bool]]
    exceptions: list[tuple[str, str, str]]
    error_lines: list[str]
    versions: dict[str, str]
    frameworks: set[str]


#: Logs seen lately, by content digest: a follow-up question on the same upload (the web app, a Slack
#: thread, the agent calling the matcher again) reuses their half of the work (~3 s for 5 MB).
SEEN_ENTRIES = 64
_SEEN: OrderedDict[tuple[int, str], tuple[_Index, _Seen]] = OrderedDict()
_SEEN_LOCK = threading.Lock()


#: Worker processes for the logs' half of a big new log (a server: see :func:`use_processes`).
_POOL: Any = None
#: Texts shorter than this are matched in the caller's thread (sending them costs more than it saves).
POOL_MIN_CHARS = 200_000


def use_processes(workers: int) -> None:
    """Match new big logs in ``workers`` worker processes (0: in the caller's thread again).

    For a server (``rlmedic web``): the regexes over a 2 MB log hold the GIL for seconds, and in the
    server's process that starves its event loop (uploads and queue requests of the other sessions
    time out). In a worker the answering thread only waits. The workers load the same shipped pack.
    """
    global _POOL
    old, _POOL = _POOL, None
    if old is not None:
        old.shutdown(wait=False, cancel_futures=True)
    if workers > 0:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn: forking a server with live threads can copy a held lock into the child
        _POOL = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def _see_shipped(texts: list[str]) -> _Seen:
    """:func:`_see` with the shipped pack (in a worker process)."""
    return _see(_index(load()), texts)


def _prepared(idx: _Index, texts: Sequence[str], shipped: bool = False) -> _Seen:
    """The logs' half of :func:`match`, from the cache when the same texts were matched lately;
    ``shipped``: ``idx`` is the shipped pack's (a worker process may compute it)."""
    import hashlib

    h = hashlib.blake2b(digest_size=20)
    for text in texts:
        h.update(b"\0%d\0" % len(text))
        h.update(text.encode("utf-8", "surrogatepass"))
    key = (id(idx), h.hexdigest())
    with _SEEN_LOCK:
        hit = _SEEN.get(key)
        if hit is not None and hit[0] is idx:
            _SEEN.move_to_end(key)
            return hit[1]
    seen = None
    pool = _POOL
    if shipped and pool is not None and sum(map(len, texts)) >= POOL_MIN_CHARS:
        try:
            seen = pool.submit(_see_shipped, list(texts)).result()
        except Exception:  # noqa: BLE001 - a broken or closed pool: this thread does it
            seen = None
    if seen is None:
        seen = _see(idx, texts)  # outside the lock: two sessions never wait on each other's logs
    with _SEEN_LOCK:
        _SEEN[key] = (idx, seen)
        while len(_SEEN) > SEEN_ENTRIES:
            _SEEN.popitem(last=False)
    return seen


def _see(idx: _Index, texts: Sequence[str]) -> _Seen:
    from rlmedic.knowledge.threads import error_lines
    from rlmedic.versions import read_versions

    # a big log is read through its view (head, tail, hinted lines, repeated warnings folded); a small one whole
    views = [_regex_view(t) for t in texts]
    lines = _Lines(views)
    found: dict[str, str] = {}
    for key in lines.candidates(idx):
        line = lines.find(key)
        if line is not None:
            found[key] = line
    lowered = [t.lower() for t in views]
    words = {w for t in lowered for w in _LETTER_WORD.findall(t)}
    wanted: dict[int, list[int]] = {}  # record index -> its patterns whose anchor word the text has
    for i, n in [*idx.patterns_always, *(x for w in words for x in idx.patterns_by_word.get(w, ()))]:
        wanted.setdefault(i, []).append(n)
    regex: dict[str, tuple[int, str, bool]] = {}
    for i in sorted(wanted):
        record = idx.records[i]
        for n in sorted(wanted[i]):
            literal, ignore = idx.literals[record.id][n]
            if len(literal) >= 4 and not any(literal in t for t in (lowered if ignore else views)):
                continue  # its required text is absent: it cannot match (and is never compiled)
            pattern = record.compiled[n]
            m = next((m for t in views if (m := pattern.search(t))), None)
            if m is not None:
                regex[record.id] = (n, _line_at(m), _generic_hit(m))
                break
    return _Seen(lines=found, regex=regex, exceptions=_exceptions(views)[::-1],  # the last 20, in order
                 error_lines=list(dict.fromkeys(line for t in views for line in error_lines(t))),
                 versions=read_versions(*views), frameworks=set(detect_frameworks(*texts)))


def _generic_hit(m: Any) -> bool:
    """Whether what a regex found is only a message many bugs print (a plain CUDA OOM)."""
    from rlmedic.knowledge.threads import normalize_error

    return is_generic(normalize_error(m.group(0)[:2000]))


def detect_frameworks(*texts: str) -> tuple[str, ...]:
    """Frameworks named in the texts (``sglang``, ``verl``...), by whole word."""
    low = "\n".join(t[-200_000:] for t in texts if t).lower()
    out = []
    for name, words in _FRAMEWORK_WORDS.items():
        if any(re.search(rf"(?<![\w-]){w}(?![\w-])", low) for w in words):
            out.append(name)
    return tuple(out)


def match(texts: Sequence[str] | str = (), *, question: str = "", versions: dict[str, str] | None = None,
          frameworks: Sequence[str] = (), k: int = 3, kb: Any = None, pack: Pack | None = None,
          min_score: float = MIN_SCORE) -> list[KnownMatch]:
    """The ``k`` records that best match the user's ``texts`` (logs) and ``question``, best first.

    ``versions`` ({package: version}) default to what :func:`rlmedic.versions.read_versions` finds
    in the texts; ``frameworks`` add to those detected. ``kb`` (a
    :class:`~rlmedic.knowledge.index.KnowledgeBase`) adds its dense+BM25 search of the records and
    converts its synced issue threads into records that rank in the same list.
    """
    from rlmedic.versions import read_versions

    if isinstance(texts, str):
        texts = [texts]
    texts = [t for t in texts if t]
    shipped = pack is None
    pack = load() if pack is None else pack
    idx = _index(pack)
    seen = _prepared(idx, texts, shipped)  # what the logs alone give: computed once per content, then reused
    asked = _Lines([question])
    if versions is None:
        versions = {**seen.versions, **read_versions(question)}  # the question's own versions first
    wanted = set(frameworks) | seen.frameworks | set(detect_frameworks(question))
    found: dict[str, KnownMatch] = {}

    def offer(record: Record, how: str, line: str, score: float) -> None:
        old = found.get(record.id)
        if old is None or score > old.score:
            found[record.id] = KnownMatch(record=record, score=score, how=how, matched=line[:400])

    # 1. exact error strings: longer and rarer strings count more; each further string of a record adds a little
    hits: dict[str, int] = {}
    on_line: dict[str, set[str]] = {}
    keys = set(seen.lines) | set(asked.candidates(idx))
    for key, i in (idx.errors[at] for at in sorted(at for key in keys for at in idx.error_at[key])):
        line = seen.lines.get(key) or asked.find(key)  # the logs' lines come before the question's
        if line is None:
            continue
        literal = idx.literal.get((key, i))
        if literal is not None and literal not in " ".join(line.lower().split()):
            continue  # the words match but the value the record is about does not
        record = idx.records[i]
        on_line.setdefault(line[:400], set()).add(record.id)
        shared = idx.shared.get(key, 1)
        score = BASE["exact"] + 0.1 * min(len(key) / 80, 1.0) - GENERIC_PENALTY * (1 - 1 / shared)
        hits[record.id] = hits.get(record.id, 0) + 1
        old = found.get(record.id)
        if old is not None and old.how == "exact":
            old.score = max(old.score, score) + EXTRA_STRING
            old.shared = min(old.shared, shared)
            continue
        offer(record, "exact", line, score)
        found[record.id].shared = shared
    # a line that several records' strings match is a kind of failure, not one bug: none of them leads by it
    for m in found.values():
        if m.how == "exact":
            m.shared = max(m.shared, len(on_line.get(m.matched, ())))
    # 2. regexes (raw text: a pattern may span lines), over the parts of a log that can hold a failure
    q_text = question[-MAX_REGEX_CHARS:]
    q_low = q_text.lower()
    # without a question only the logs' hits remain to offer (thousands of team records need not be walked)
    for record in idx.records if q_text.strip() else [r for r in idx.records if r.id in seen.regex]:
        if record.id in found:
            continue
        hit = seen.regex.get(record.id)  # (pattern number, line, generic) in the logs' views
        upto = hit[0] if hit is not None else len(idx.literals[record.id])
        for n, (literal, ignore) in enumerate(idx.literals[record.id][:upto]):
            if len(literal) >= 4 and literal not in (q_low if ignore else q_text):
                continue
            m = record.compiled[n].search(q_text)
            if m is not None:  # an earlier pattern of the record matches the question
                hit = (n, _line_at(m), _generic_hit(m))
                break
        if hit is not None:
            offer(record, "regex", hit[1], BASE["regex"])
            got = found.get(record.id)
            if got is not None and got.how == "regex" and hit[2]:
                # what the pattern found is only a message many bugs print (a plain CUDA OOM): it
                # ranks like a shared string and never leads
                got.shared = GENERIC_SHARED
    # 3. exception type + message words: most of the message's words must be the record's too
    for exc, message, line in [*seen.exceptions, *_exceptions([q_text])[::-1]][::-1][:20]:
        msg_words = set(_words(message))
        for i in idx.exceptions.get(_short_exc(exc), ()):
            record = idx.records[i]
            if record.id in found and found[record.id].how != "exception":
                continue
            shared = msg_words & idx.words[i]
            overlap = len(shared) / max(len(msg_words), 1)
            if len(shared) >= EXC_MIN_WORDS and overlap >= EXC_MIN_OVERLAP:
                old = found.get(record.id)
                offer(record, "exception", line, BASE["exception"] + 0.3 * overlap)
                if old is None or found[record.id] is not old:
                    # a common type (ValueError) needs almost all the words to single out one record
                    common = len(idx.exceptions.get(_short_exc(exc), ())) > EXC_COMMON_TYPE
                    lead = EXC_COMMON_LEAD_OVERLAP if common else EXC_LEAD_OVERLAP
                    found[record.id].shared = 1 if overlap >= lead else 99
    # 4. similarity of the error lines and the question
    from rlmedic.knowledge.threads import error_lines

    # the error lines first (a search query is cut), then the question's words
    errors = list(dict.fromkeys([*seen.error_lines, *error_lines(question)]))
    query = "\n".join([*errors, question])
    sims = idx.similarity(query)
    best_line = errors[0] if errors else " ".join(question.split())[:200]
    # a record only similar, below the cut even with the index's best bonus and a framework boost, is not built
    floor = min_score / (1 + FRAMEWORK_BOOST) - (SIM_WEIGHT * 0.5 if kb is not None else 0.0)
    for i, sim in sims.items():
        record = idx.records[i]
        if record.id not in found:
            if SIM_WEIGHT * sim < floor:
                continue
            offer(record, "similar", best_line, SIM_WEIGHT * sim)
        else:
            found[record.id].score += SIM_WEIGHT * sim
    if kb is not None:
        _from_index(kb, query, pack, found, offer)
        _from_threads(kb, query, found, functools.lru_cache(maxsize=1)(lambda: _Lines([*texts, question])))
    from rlmedic.redact import redact

    out = []
    for m in found.values():
        if wanted and set(m.record.frameworks) & wanted:
            m.score *= 1 + FRAMEWORK_BOOST
        _version_status(m, versions)
        if m.score >= min_score:
            out.append(m)
    out.sort(key=lambda m: (-m.score, HOWS.index(m.how), m.record.id))
    # only the k returned are dressed (thousands of team records may share a word with the query)
    for m in out[:k]:
        m.matched = redact(m.matched)  # the user's own line leaves here: secrets out (a URL with a token)
        _dress(m)
    return out[:k]


#: Lines worth a regex: errors, warnings, NaN, hangs, kills, mismatches (a regex over every INFO line of a
#: 2 MB log costs ~0.1 s, times hundreds of records). Plain words found with str.find: C speed.
HINT_WORDS = (
    "error", "exception", "warn", "fail", "fatal", "assert", "traceback", "nan", "hang", "stuck", "timeout",
    "timed out", "killed", "oom", "out of memory", "mismatch", "diverg", "not found", "no such", "refused", "reset",
    "abort", "segfault", "segmentation", "core dumped", "no module", "cannot import", "cannot", "can't", "unable",
    "unexpected", "must be", "should be", "not supported", "not divisible", "not equal", "not compatible",
    "deprecated", "version", "unhealthy", "deadlock", "invalid", "illegal", "exit code",
)
VIEW_CONTEXT = 3
#: Hinted lines of one shape (numbers folded) kept with their context.
VIEW_SAME_SHAPE = 2
_DIGITS = re.compile(r"\d+")
VIEW_HEAD = 200
VIEW_TAIL = 400


def _regex_view(text: str) -> str:
    """The lines a regex is run on: the head (banners), the tail, and every hinted line with a little context."""
    if len(text) <= 200_000:
        return text
    text = text[-MAX_TEXT_CHARS:]
    newlines = _newlines(text)
    n = len(newlines) + 1
    keep = set(range(min(VIEW_HEAD, n))) | set(range(max(0, n - VIEW_TAIL), n))
    low = text.lower()
    hinted: set[int] = set()
    for word in HINT_WORDS:
        at = low.find(word)
        while at >= 0:
            line = bisect.bisect_left(newlines, at)
            hinted.add(line)
            # skip to the next line: one hit per line is enough
            at = low.find(word, newlines[line] + 1) if line < len(newlines) else -1
    lines = text.split("\n")
    # a warning printed every step is one line to a regex: a hinted line whose shape (numbers folded) was
    # already kept twice adds nothing (a warning-dense log would otherwise hand every regex megabytes)
    shapes: dict[str, int] = {}
    for i in sorted(hinted, reverse=True):  # the newest first: the end of a log holds the failure
        if i >= n:
            continue
        shape = _DIGITS.sub("#", lines[i][-300:])
        shapes[shape] = shapes.get(shape, 0) + 1
        if shapes[shape] <= VIEW_SAME_SHAPE:
            keep.update(range(max(0, i - VIEW_CONTEXT), min(n, i + VIEW_CONTEXT + 1)))
    view, last = [], -2
    for i in sorted(keep):
        if i != last + 1:
            view.append("...")
        view.append(lines[i])
        last = i
    return "\n".join(view)[-MAX_REGEX_CHARS:]


def _newlines(text: str) -> list[int]:
    out, at = [], text.find("\n")
    while at >= 0:
        out.append(at)
        at = text.find("\n", at + 1)
    return out


def _line_at(m: Any) -> str:
    text = m.string
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.start())
    return text[start: end if end >= 0 else len(text)].strip()


def _exceptions(texts: Sequence[str]) -> list[tuple[str, str, str]]:
    """(exception type, message, line) for each exception line, last ones first (the final error)."""
    out = []
    for text in texts:
        for m in _EXC_LINE.finditer(text):
            out.append((m.group(1), m.group(2) or "", m.group(0).strip()))
    return out[::-1][:20]


def _from_index(kb: Any, query: str, pack: Pack, found: dict[str, KnownMatch], offer) -> None:
    """The index's hybrid search over the records (``kind="known"``): adds a rank-based share.

    Only when the index already holds these records: embedding them is a one-off cost paid by
    ``rlmedic search --kind known``, never by an answer.
    """
    by_id = pack.by_id()
    try:
        ready = getattr(kb, "known_ready", None)
        if not query.strip() or ready is None or not ready(pack):
            return
        hits = kb.search(query[:2000], 5, kind="known")
    except Exception:  # noqa: BLE001 - no index, or an empty one: the in-process stages stand
        return
    for rank, hit in enumerate(hits):
        record = by_id.get(hit.id.removeprefix("known-"))
        if record is None:
            continue
        bonus = SIM_WEIGHT * 0.5 / (rank + 1)
        if record.id in found:
            found[record.id].score += bonus
        else:
            offer(record, "similar", "", bonus)


def _from_threads(kb: Any, query: str, found: dict[str, KnownMatch], lines: Callable[[], _Lines]) -> None:
    """Synced issue threads as records: an error-line match counts as ``exact``. ``lines`` builds the
    user's lines on demand (only a thread with an error line needs them)."""
    try:
        if not kb.has_issues() or not query.strip():
            return
        hits = kb.search(query[:2000], 3, kind="issue")
    except Exception:  # noqa: BLE001
        return
    taken = {s for m in found.values() for s in m.record.sources}
    for rank, hit in enumerate(hits):
        if hit.source in taken:
            continue
        record = record_from_thread(hit)
        if record is None:
            continue
        if hit.matched_error:
            score = BASE["exact"] - 0.05  # a hand-written record with the same line ranks first
            how = "exact"
        else:
            score = SIM_WEIGHT * 0.5 / (rank + 1)
            how = "similar"
        line = (lines().find(hit.matched_error) or hit.matched_error) if hit.matched_error else ""
        found.setdefault(record.id, KnownMatch(record=record, score=score, how=how, matched=line[:400]))


#: The share of the vote a synced thread's category needs (else "other").
THREAD_VOTE_SHARE = 0.6
_REPO_FRAMEWORK = {"areal": "areal", "slime": "slime", "verl": "verl", "sglang": "sglang", "vllm": "vllm",
                   "megatron-lm": "megatron", "ray": "ray", "pytorch": "torch", "nccl": "nccl", "transformers": "transformers"}


def record_from_thread(hit: Any) -> Record | None:
    """A synced thread (a search hit of ``kind="issue"``) in the record's shape, or None if it cannot be one."""
    from pydantic import ValidationError

    from rlmedic.versions import parse

    repo, _, number = hit.source.partition("#")
    name = repo.split("/")[-1].lower()
    framework = _REPO_FRAMEWORK.get(name, "generic")
    info = hit.info or {}
    resolution = str(info.get("resolution") or "")
    fix = str(info.get("fix") or "")
    version = str(info.get("fixed_in") or "").lstrip("vV")
    fixed_in = None
    if version and parse(version) is not None:
        fixed_in = {"package": framework if framework != "generic" else name, "version": version}
    errors = [hit.matched_error] if hit.matched_error and len(hit.matched_error) >= 8 else [hit.section or hit.source]
    # a thread has no category: the hand-written records nearest to its title and error line vote on one
    category, share, near = vote_category([f"{hit.section}\n{hit.matched_error}"])
    if near and near[0].certain:  # a hand-written record of the same error line knows the category
        category = near[0].record.category
    elif share < THREAD_VOTE_SHARE:
        category = "other"
    if len(" ".join(errors[0].split())) < 8:
        return None
    try:
        return Record(
            id="thread-" + re.sub(r"[^a-z0-9]+", "-", hit.source.lower()).strip("-"),
            title=hit.section or hit.source, frameworks=(framework,), category=category,
            symptoms={"errors": errors, "situation": "reported in an upstream issue thread"},
            cause=resolution or "not stated in the thread's replies",
            fix={"summary": fix[:1].upper() + fix[1:] + "." if fix else resolution or "see the thread"},
            fixed_in=fixed_in, sources=(hit.source,),
            established_by="maintainer" if resolution else "reporter",
            origin="thread", url=hit.url or github_url(hit.source), closed_at=str(info.get("closed_at") or ""),
        )
    except ValidationError:
        return None


# -- versions and advice ---------------------------------------------------------------------------
def _version_status(m: KnownMatch, versions: dict[str, str]) -> None:
    """The user's version of the record's package, whether it has the fix; a fixed record is demoted."""
    from rlmedic.versions import canonical, status

    r = m.record
    package = (r.fixed_in.package if r.fixed_in else "") or (r.affected.package if r.affected else "")
    yours = versions.get(canonical(package), "") if package else ""
    m.yours = yours
    m.version_status = status(
        yours, fixed_in=r.fixed_in.version if r.fixed_in else "",
        affected=r.affected.versions if r.affected and canonical(r.affected.package) == canonical(package) else "",
    )
    if m.version_status == "fixed_in_yours":
        m.score *= FIXED_DEMOTION


def _dress(m: KnownMatch) -> None:
    """The citation, fixes and advice of a match that is shown."""
    r = m.record
    m.citation = Citation(kind="issue", ref=r.source, section=r.title, url=r.source_url)
    m.fixes = record_fixes(r, m.citation)
    m.advice = advice(m)


def record_fixes(record: Record, citation: Citation) -> list[Fix]:
    """The record's config changes and commands as :class:`~rlmedic.types.Fix` (its summary when it has neither)."""
    out: list[Fix] = []
    for change in record.fix.changes:
        out.append(Fix(op="set", key=change.key, new=change.value, framework=change.framework,
                       why=record.title, rule=record.id, citations=(citation,)))
    for command in record.fix.commands:
        out.append(Fix(action=f"run: {command}", why=record.title, rule=record.id, citations=(citation,)))
    if not out:
        out.append(Fix(action=record.fix.summary, why=record.title, rule=record.id, citations=(citation,)))
    return out


def advice(m: KnownMatch) -> str:
    """One sentence: the issue, where it was fixed, and what to do given the user's version."""
    r = m.record
    fixed = fixed_text(r)
    head = f"Known issue {r.source}" + (f", fixed in {fixed}" if fixed else "")
    package = r.fixed_in.package if r.fixed_in else (r.affected.package if r.affected else "")
    if m.version_status == "fixed_in_yours":
        return f"{head}; your {package} {m.yours} already has that fix, so this is probably not your problem (or a regression)."
    workaround = r.fix.workaround.strip().rstrip(".")
    if r.fixed_in and r.fixed_in.version:
        yours = f" (you run {package} {m.yours})" if m.yours else ""
        tail = f", or work around it: {_lower_first(workaround)}" if workaround else ""
        return f"{head}: upgrade{yours}{tail}."
    return f"{head}: {_lower_first(r.fix.summary.rstrip('.'))}" + (f"; workaround: {_lower_first(workaround)}" if workaround else "") + "."


def _lower_first(text: str) -> str:
    """``Lower the fraction`` -> ``lower the fraction``; an acronym (``NCCL ...``) stays."""
    return text if text[:2].isupper() else text[:1].lower() + text[1:]


# -- voting ------------------------------------------------------------------------------------------
def vote_category(texts: Sequence[str] | str, k: int = 5, *, pack: Pack | None = None) -> tuple[str, float, list[KnownMatch]]:
    """(category, share of the vote, matches): the ``k`` nearest records vote, weighted by score.

    For an error no log signature knows: what kind of failure do similar known issues say it is?
    ``("other", 0.0, [])`` when no record is near.
    """
    matches = match(texts, k=k, pack=pack, min_score=VOTE_MIN_SCORE)
    if not matches:
        return "other", 0.0, []
    votes: Counter = Counter()
    for m in matches:
        votes[m.record.category] += m.score
    category, weight = votes.most_common(1)[0]
    return category, weight / sum(votes.values()), matches


__all__ = ["KnownMatch", "match", "vote_category", "detect_frameworks", "record_from_thread", "record_fixes",
           "advice", "KNOWN_FRAMEWORKS"]
