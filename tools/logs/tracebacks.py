"""Read a Python traceback around an exception line and classify it through a table.

Literal signatures (``signatures.yaml``) name the failures we know by their exact words.
Everything else that ends in ``SomeError: message`` used to come out as "Unrecognised
error". This module reads what a traceback says about *where* it failed: the final
exception's type and message, and the package of each frame (``site-packages/sglang/...``
is SGLang, ``.../vllm/...`` is vLLM, a file outside any installed package is the user's
code, a frame named ``compute_score`` is a reward function). The table in
``tracebacks.yaml`` maps those facts (and the phase the surrounding lines suggest) to a
category and a playbook card, first match wins; a newcomer extends it without code. Its
``quotes`` say what an exception names (the missing key, module, attribute or file, the
shapes, the failed assert and the names in it) so a finding reasons from the error's own
text; errors no rule knows go to :mod:`~rlmedic.tools.logs.nearest`.

Only lines from the same process as the exception line are read (a merged Ray log
interleaves actors), unless the exception line lost its prefix in a hand-trimmed paste;
only the last traceback before it; frames trimmed by hand (``... in f``, ``pkg/mod.py:f ->``)
count too.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmedic.datafiles import builtin, read_yaml
from rlmedic.errors import UserError
from rlmedic.lazyregex import checked
from rlmedic.tools.logs.scan import process_key
from rlmedic.tools.logs.signatures import PHASES, ROLE_RANK
from rlmedic.types import CATEGORIES

TABLE_PATH = Path(__file__).parent / "tracebacks.yaml"
DEEPEST = 8  # frames nearest the exception that a rule's `frames` are matched against

_PREFIX = re.compile(r"^\(\w[\w:./-]*(?: pid=\d+)?[^)]*\)\s?")
_FRAME = re.compile(r'File "([^"]+)"(?:, line (\d+))?,? (?:\.\.\., )?in (\S+)')
#: frames people trim by hand: "  ... in train_one_step", "  pkg/mod.py:func -> next_call(...)"
_LOOSE_FRAMES = (
    re.compile(r'^\s*(\.\.\.)()\s+in\s+(\w+)\s*$'),
    re.compile(r'^\s*((?:[\w.-]+/)*[\w.-]+\.py):()(\w+)\b(?:\s*(?:->|$))'),
)
_EXC = re.compile(r"((?:[A-Za-z_]\w*\.)*[A-Z]?\w*(?:Error|Exception))(?:\([\w.]+\))?(?:: (.*)|\s*)$")
_PACKAGE = re.compile(r"(?:site|dist)-packages/([A-Za-z_]\w*)")
_RULE_KEYS = {"id", "title", "category", "card", "role", "types", "message", "frames", "packages", "phases", "explain"}
_QUOTE_KEYS = {"id", "types", "message", "say", "fix"}
_ASSERT = re.compile(r"^assert\s+(.+?)(?:\s*,\s*(.+))?$")
_NAME = re.compile(r"\b[A-Za-z_][\w.]*\b")
_NOT_NAMES = frozenset("and or not in is None True False len isinstance self".split())


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    func: str
    code: str = ""  # the source line Python printed under the frame, when it did

    @property
    def package(self) -> str:
        """The installed package the frame runs in, or ``user`` for code outside site-packages."""
        m = _PACKAGE.search(self.path)
        if m:
            return m.group(1)
        for known in ("sglang", "vllm", "megatron", "areal", "realhf", "slime", "verl", "ray", "torch", "transformers"):
            if f"/{known}/" in self.path or self.path.startswith(f"{known}/"):
                return known
        return "user"


@dataclass
class Traceback:
    exc_type: str  # as printed, e.g. ``omegaconf.errors.ConfigAttributeError``
    message: str
    frames: list[Frame] = field(default_factory=list)

    @property
    def short_type(self) -> str:
        return self.exc_type.rsplit(".", 1)[-1]

    def packages(self) -> list[str]:
        """Packages of the frames, deepest (nearest the exception) first, without repeats."""
        return list(dict.fromkeys(f.package for f in reversed(self.frames)))

    @property
    def text(self) -> str:
        """The message without the type repeated in front of it (``RuntimeError: RuntimeError: x`` -> ``x``)."""
        message = self.message
        while True:
            m = re.match(r"\s*(?:[A-Za-z_]\w*\.)*(\w+(?:Error|Exception))(?:\([\w.]+\))?:\s*", message)
            if not m or m.group(1) != self.short_type:
                return message.strip()
            message = message[m.end():]

    @property
    def where(self) -> str:
        """The deepest frame as ``func (file:line)``, the place the exception was raised."""
        if not self.frames:
            return ""
        f = self.frames[-1]
        return f"{f.func} ({f.path.rsplit('/', 1)[-1]}{f':{f.line}' if f.line else ''})"


def read_traceback(line: str, before: list[str]) -> Traceback | None:
    """The exception on ``line`` and the frames of the last traceback above it (same process)."""
    me = process_key(line)
    body = _PREFIX.sub("", line, count=1).strip()
    m = _EXC.search(body)
    if m is None:
        return None
    exc_type, message = m.group(1), (m.group(2) or "").strip()
    frames = _frames(before, me, strict=True)
    if not frames and not me:  # a trimmed paste: the exception line lost the actor prefix its frames carry
        frames = _frames(before, me, strict=False)
    return Traceback(exc_type, message, frames)


def _frames(before: list[str], me: str, *, strict: bool) -> list[Frame]:
    """The frames of the last traceback above the exception, of process ``me`` when ``strict``."""
    frames: list[Frame] = []
    code = ""  # read bottom-up: a frame's source line comes before (below) its "File" line
    for text in reversed(before):
        if strict and process_key(text) != me:
            continue
        text = _PREFIX.sub("", text, count=1)
        fm = _FRAME.search(text) or next((m for rx in _LOOSE_FRAMES if (m := rx.match(text))), None)
        if fm:
            frames.append(Frame(fm.group(1), int(fm.group(2) or 0), fm.group(3), code))
            code = ""
            continue
        if "Traceback (most recent call last)" in text:
            break
        stripped = text.strip()
        if stripped and set(stripped) <= set("^~ "):  # Python 3.11's markers under the code
            continue
        code = stripped if stripped and text.startswith(" ") else ""
    frames.reverse()
    return frames


@dataclass
class Rule:
    id: str
    title: str
    category: str
    card: str
    role: str
    types: list[str]
    message: list[re.Pattern[str]]
    frames: list[re.Pattern[str]]
    packages: list[str]
    explain: str
    phases: list[str] = field(default_factory=list)

    def matches(self, tb: Traceback, phase: str = "") -> bool:
        if self.phases and phase not in self.phases:
            return False
        if self.types and tb.short_type not in self.types and tb.exc_type not in self.types:
            return False
        if self.message and not any(rx.search(tb.message) for rx in self.message):
            return False
        deepest = tb.frames[-DEEPEST:]
        if self.frames and not any(rx.search(f"{f.path} in {f.func}") for rx in self.frames for f in deepest):
            return False
        if self.packages and not any(f.package in self.packages for f in deepest):
            return False
        return True


def _rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise UserError(f"{where}: a rule must be a mapping with an 'id'")
    where = f"{where} ({raw['id']})"
    unknown = sorted(set(raw) - _RULE_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
    for key in ("title", "category", "card", "role"):
        if not raw.get(key):
            raise UserError(f"{where}: missing '{key}'")
    if raw["category"] not in CATEGORIES:
        raise UserError(f"{where}: category {raw['category']!r} is not in the vocabulary")
    if raw["role"] not in ROLE_RANK or raw["role"] == "marker":
        raise UserError(f"{where}: role {raw['role']!r} must be one of cause, crash, cascade, symptom, wrapper")
    if not any(raw.get(k) for k in ("types", "message", "frames", "packages", "phases")):
        raise UserError(f"{where}: a rule needs at least one of types, message, frames, packages, phases")
    bad_phases = sorted(set(raw.get("phases") or []) - set(PHASES))
    if bad_phases:
        raise UserError(f"{where}: unknown phase(s) {', '.join(bad_phases)}")

    def rx(key: str) -> list[re.Pattern[str]]:
        value = raw.get(key) or []
        try:
            return [checked(str(v)) for v in (value if isinstance(value, list) else [value])]
        except re.error as exc:
            raise UserError(f"{where}: invalid regex in {key} ({exc})") from exc

    return Rule(
        id=raw["id"],
        title=str(raw["title"]).strip(),
        category=raw["category"],
        card=raw["card"],
        role=raw["role"],
        types=[str(t) for t in raw.get("types") or []],
        message=rx("message"),
        frames=rx("frames"),
        packages=[str(p) for p in raw.get("packages") or []],
        explain=" ".join(str(raw.get("explain") or "").split()),
        phases=[str(p) for p in raw.get("phases") or []],
    )


def parse_table(data: Any, where: str = "tracebacks.yaml") -> list[Rule]:
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise UserError(f"{where}: expected a mapping with a 'rules' list")
    rules = [_rule(r, f"{where} rule #{i + 1}") for i, r in enumerate(data["rules"])]
    ids = [r.id for r in rules]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise UserError(f"{where}: duplicate rule id(s) {', '.join(dupes)}")
    parse_quotes(data, where)  # the whole file is checked, quotes included
    return rules


# ------------------------------------------------------------------ quotes --------


@dataclass(frozen=True)
class QuoteRule:
    """How to say what an exception names: its key, module, attribute, file, shapes, the failed check."""

    id: str
    types: tuple[str, ...]
    message: re.Pattern[str] | None
    say: str
    fix: str

    def fields(self, tb: Traceback) -> dict[str, str] | None:
        if self.types and tb.short_type not in self.types and tb.exc_type not in self.types:
            return None
        found: dict[str, str] = {}
        if self.message is not None:
            m = self.message.search(tb.text)
            if m is None:
                return None
            found = {k: v or "" for k, v in m.groupdict().items()}
        return found


@dataclass(frozen=True)
class Quote:
    """What the exception names, as a sentence, and the first thing to do about it."""

    rule: str
    text: str
    fix: str
    names: dict[str, str]


def _quote_rule(raw: Any, where: str) -> QuoteRule:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw.get("say"):
        raise UserError(f"{where}: a quote needs an 'id' and 'say'")
    where = f"{where} ({raw['id']})"
    unknown = sorted(set(raw) - _QUOTE_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
    try:
        message = checked(str(raw["message"])) if raw.get("message") else None
    except re.error as exc:
        raise UserError(f"{where}: invalid regex in message ({exc})") from exc
    names = set(message.groupindex) if message else set()
    names |= {"type", "message", "code", "where", "expr", "names", "detail"}
    for key in ("say", "fix"):
        missing = sorted(set(re.findall(r"\{(\w+)\}", str(raw.get(key) or ""))) - names)
        if missing:
            raise UserError(f"{where}: {key} uses {', '.join(missing)}, which the message does not capture")
    types = raw.get("types") or []
    return QuoteRule(raw["id"], tuple(str(t) for t in (types if isinstance(types, list) else [types])), message,
                     " ".join(str(raw["say"]).split()), " ".join(str(raw.get("fix") or "").split()))


def parse_quotes(data: Any, where: str = "tracebacks.yaml") -> list[QuoteRule]:
    raw = data.get("quotes") if isinstance(data, dict) else None
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise UserError(f"{where}: 'quotes' must be a list")
    quotes = [_quote_rule(q, f"{where} quote #{i + 1}") for i, q in enumerate(raw)]
    ids = [q.id for q in quotes]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise UserError(f"{where}: duplicate quote id(s) {', '.join(dupes)}")
    return quotes


def _fill_template(template: str, values: dict[str, str]) -> str:
    """Fill ``{name}``s; a ``[...]`` part is dropped when a name in it has no value."""
    def part(m: re.Match[str]) -> str:
        inner = m.group(1)
        return inner if all(values.get(n) for n in re.findall(r"\{(\w+)\}", inner)) else ""

    text = re.sub(r"\[([^\[\]]*)\]", part, template)
    text = re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), ""), text)
    return " ".join(text.split())


def quote(tb: Traceback, quotes: list[QuoteRule] | tuple[QuoteRule, ...] | None = None) -> Quote | None:
    """The first quote rule that fits: a sentence naming what the exception names, and a fix."""
    code = tb.frames[-1].code if tb.frames else ""
    values = {"type": tb.short_type, "message": tb.text[:300], "code": code[:200], "where": tb.where}
    am = _ASSERT.match(code)
    if am:
        values["expr"] = am.group(1)
        names = [n for n in dict.fromkeys(_NAME.findall(am.group(1))) if n not in _NOT_NAMES]
        values["names"] = ", ".join(names[:6])
    for rule in builtin_quotes() if quotes is None else quotes:
        found = rule.fields(tb)
        if found is None:
            continue
        filled = {**values, **{k: v[:200] for k, v in found.items()}}
        required = re.findall(r"\{(\w+)\}", re.sub(r"\[[^\[\]]*\]", "", rule.say))
        if any(not filled.get(n) for n in required if n not in found):  # e.g. no assert line to quote
            continue
        names = {k: v for k, v in found.items() if v}
        fix = _fill_template(rule.fix, filled)
        fix = fix[:1].upper() + fix[1:] if fix[:1].islower() else fix  # an optional opening part was left out
        return Quote(rule.id, _fill_template(rule.say, filled), fix, names)
    return None


@functools.cache
def _builtin() -> tuple[tuple[Rule, ...], tuple[QuoteRule, ...]]:
    """The shipped table's rules and quotes, validated once per edit (:func:`rlmedic.datafiles.builtin`)."""

    def build() -> tuple[tuple[Rule, ...], tuple[QuoteRule, ...]]:
        data = read_yaml(TABLE_PATH)
        return tuple(parse_table(data, str(TABLE_PATH))), tuple(parse_quotes(data, str(TABLE_PATH)))

    return builtin("tracebacks", [TABLE_PATH], [__file__, _types_file()], build)


def builtin_quotes() -> tuple[QuoteRule, ...]:
    return _builtin()[1]


def builtin_rules() -> tuple[Rule, ...]:
    return _builtin()[0]


def _types_file() -> str:
    from rlmedic import types

    return str(types.__file__)


def classify(tb: Traceback, rules: tuple[Rule, ...] | list[Rule] | None = None, phase: str = "") -> Rule | None:
    """The first rule of the table that fits the traceback (and the phase the lines around it suggest), or None."""
    for rule in builtin_rules() if rules is None else rules:
        if rule.matches(tb, phase):
            return rule
    return None
