"""The known-issue record as a validated model (the contract is ``README.md`` beside this file).

Extra fields are refused, so a misspelt key fails at ``--check`` time instead of being
silently ignored at answer time. Every check that can fail on a hand-written record
(category, regex, source, version) is made here, with a message that names the field.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from rlmedic.types import CATEGORIES

if TYPE_CHECKING:
    from rlmedic.saferegex import LinearPattern

#: Where a bug lives / what the user runs (README: ``frameworks``).
KNOWN_FRAMEWORKS: tuple[str, ...] = (
    "areal", "slime", "verl", "sglang", "vllm", "megatron", "ray", "torch", "nccl", "transformers", "generic",
)
SOURCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}#\d+$")
ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
#: A Python exception class name alone (``ZeroDivisionError``, ``torch.OutOfMemoryError``)
_BARE_EXCEPTION = re.compile(r"^(?:[a-z_][a-z0-9_]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Warning)$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: Error strings and regexes one record may list (the shipped records have at most 3 and 4): a team
#: file of thousands of patterns is refused, not compiled one by one.
MAX_ERRORS = 50
MAX_REGEXES = 20


class Symptoms(_Strict):
    errors: tuple[str, ...] = Field((), max_length=MAX_ERRORS)
    regexes: tuple[str, ...] = Field((), max_length=MAX_REGEXES)
    exception: str = ""
    situation: str
    tags: tuple[str, ...] = ()

    @field_validator("errors")
    @classmethod
    def _errors(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            if len(" ".join(text.split())) < 8:
                raise ValueError(f"error string {text!r} is too short to match anything reliably (8 characters at least)")
            if _BARE_EXCEPTION.match(text.strip()):
                raise ValueError(f"error string {text!r} is only an exception type, which many bugs raise: put it in "
                                 "symptoms.exception and give the message as the error string")
        return value

    @field_validator("regexes")
    @classmethod
    def _regexes(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        if info.context and not info.context.get("compile_regexes", True):
            return value  # the shipped pack, checked by --check and the tests: compiled when first used
        from rlmedic.saferegex import problem

        for pattern in value:  # linear time on RE2, or refused with one line (rlmedic.saferegex)
            reason = problem(pattern)
            if reason:
                raise ValueError(f"regex {pattern[:200]!r}: {reason}")
        return value


class Change(_Strict):
    key: str
    value: Any = None
    framework: str = ""


class FixSpec(_Strict):
    summary: str
    changes: tuple[Change, ...] = ()
    commands: tuple[str, ...] = ()
    workaround: str = ""


class FixedIn(_Strict):
    package: str
    version: str = ""
    pr: str = ""
    commit: str = ""

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> str:
        from rlmedic.versions import parse

        if isinstance(value, float):
            raise ValueError(f"fixed_in.version {value!r} must be quoted (YAML reads 0.10 as the number 0.1)")
        text = "" if value is None else str(value)
        if text and parse(text) is None:
            raise ValueError(f"fixed_in.version {text!r} is not a release number (PEP 440, e.g. 0.4.6.post1)")
        return text

    @field_validator("commit", mode="before")
    @classmethod
    def _commit(cls, value: Any) -> Any:
        if isinstance(value, (int, float)):
            raise ValueError(f"fixed_in.commit {value!r} must be quoted (YAML reads an all-digit sha as a number)")
        return value

    @field_validator("pr")
    @classmethod
    def _pr(cls, value: str) -> str:
        if value and not SOURCE.match(value):
            raise ValueError(f"fixed_in.pr {value!r} is not owner/repo#N")
        return value

    @model_validator(mode="after")
    def _something(self) -> FixedIn:
        if not (self.version or self.pr or self.commit):
            raise ValueError("fixed_in needs a version, a pr or a commit")
        return self


class Affected(_Strict):
    package: str
    versions: str

    @field_validator("versions", mode="before")
    @classmethod
    def _versions(cls, value: Any) -> str:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        text = str(value)
        try:
            SpecifierSet(text)
        except InvalidSpecifier:
            raise ValueError(f"affected.versions {text!r} is not a PEP 440 specifier (e.g. '>=0.4.5,<0.4.6.post1')") from None
        return text


#: Fields the loader sets; a record file may not.
INTERNAL_FIELDS = ("path", "origin", "url", "closed_at")


class Record(_Strict):
    """One known upstream issue: symptoms to match, cause, fix, the release that fixed it, sources."""

    id: str
    title: str
    frameworks: tuple[str, ...] = Field(min_length=1)
    components: tuple[str, ...] = ()
    category: str
    symptoms: Symptoms
    cause: str
    fix: FixSpec
    fixed_in: FixedIn | None = None
    affected: Affected | None = None
    sources: tuple[str, ...] = Field(min_length=1)
    established_by: Literal["maintainer", "merged_pr", "reporter"]
    #: where the record was read from (set by the loader, not written in the YAML)
    path: str = ""
    #: ``builtin``, ``team`` or ``thread`` (a synced issue thread converted on load)
    origin: Literal["builtin", "team", "thread"] = "builtin"
    #: set for synced threads only (their URL and closing date); never written in a record file
    url: str = ""
    closed_at: str = ""

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not ID.match(value):
            raise ValueError(f"id {value!r} must be a slug ([a-z0-9][a-z0-9-]*)")
        return value

    @field_validator("frameworks")
    @classmethod
    def _frameworks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [f for f in value if f not in KNOWN_FRAMEWORKS]
        if bad:
            raise ValueError(f"unknown framework(s) {', '.join(bad)}; use {', '.join(KNOWN_FRAMEWORKS)}")
        return value

    @field_validator("category")
    @classmethod
    def _category(cls, value: str) -> str:
        if value not in CATEGORIES:
            raise ValueError(f"unknown category {value!r}; use one of {', '.join(CATEGORIES)}")
        return value

    @field_validator("sources")
    @classmethod
    def _sources(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in value if not SOURCE.match(s)]
        if bad:
            raise ValueError(f"source(s) {', '.join(map(repr, bad))} not owner/repo#N")
        return value

    @model_validator(mode="after")
    def _symptoms(self) -> Record:
        if not (self.symptoms.errors or self.symptoms.regexes):
            raise ValueError("symptoms need errors or regexes (at least one)")
        return self

    # -- derived --------------------------------------------------------------------------
    @property
    def source(self) -> str:
        """The thread the record cites first (``owner/repo#N``)."""
        return self.sources[0]

    @property
    def source_url(self) -> str:
        return self.url or github_url(self.source)

    @cached_property
    def compiled(self) -> tuple[LinearPattern, ...]:
        """The record's patterns on RE2: matching costs time linear in the text (``rlmedic.saferegex``)."""
        from rlmedic.saferegex import compile as linear

        return tuple(linear(p) for p in self.symptoms.regexes)

    def search_text(self) -> str:
        """What similarity search sees: title, error strings, situation, tags, components, cause."""
        s = self.symptoms
        return "\n".join([self.title, *s.errors, s.exception, s.situation, " ".join(s.tags),
                          " ".join(self.components), " ".join(self.frameworks), self.cause])

    def to_text(self) -> str:
        """The record as a readable document (what the index stores and ``search --kind known`` shows)."""
        fixed = fixed_text(self)
        lines = [f"# {self.title}", f"Known issue {self.source}" + (f", fixed in {fixed}" if fixed else "")
                 + f" ({', '.join(self.frameworks)}; {self.category})."]
        if self.symptoms.errors:
            lines += ["Error lines:"] + [f"  {e}" for e in self.symptoms.errors]
        lines += [f"When: {self.symptoms.situation}", f"Cause: {self.cause}", f"Fix: {self.fix.summary}"]
        if self.fix.workaround:
            lines.append(f"Workaround: {self.fix.workaround}")
        lines.append("Sources: " + ", ".join(self.sources))
        return "\n".join(lines)


def github_url(source: str) -> str:
    """``owner/repo#N`` -> its GitHub URL (GitHub redirects /issues/N to /pull/N for a PR)."""
    repo, _, number = source.partition("#")
    return f"https://github.com/{repo}/issues/{number}"


def fixed_text(record: Record) -> str:
    """``sglang 0.4.6.post1 (PR sgl-project/sglang#1234)``, or ``""`` when nothing is recorded."""
    fixed = record.fixed_in
    if fixed is None:
        return ""
    text = f"{fixed.package} {fixed.version}" if fixed.version else ""
    extra = []
    if fixed.pr:
        extra.append(f"PR {fixed.pr}")
    if fixed.commit:
        extra.append(f"commit {fixed.commit[:10]}")
    if not text:
        return f"{fixed.package} " + ", ".join(extra) if extra else ""
    return text + (f" ({', '.join(extra)})" if extra else "")
