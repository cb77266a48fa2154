"""``--check``: validate records, count them, and measure self-retrieval.

Self-retrieval asks of every record: does each of its own symptom strings (an error
string, or a line made to match one of its regexes) retrieve *this* record first? A miss
means two records claim the same line, or a string too generic to tell them apart.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlmedic.knowledge.known.load import BUILTIN_DIR, Pack, folders, load
from rlmedic.knowledge.known.schema import Record

TARGET = 0.95
#: Self-retrieval asks the matcher once per symptom string, and each ask costs time in proportion to the
#: records: past this many (strings x records) an even sample of the strings is asked (5,000 team records
#: ran past 5 minutes), and the report says so. The shipped pack (~1,000 strings, ~470 records) is asked whole.
MAX_PROBE_WORK = 1_000_000
#: ...and asking stops after this many seconds (the strings are asked in an interleaved order, so those
#: asked by then are spread over the whole pack).
MAX_PROBE_SECONDS = 3.0
#: ...and within this many seconds of the start, whatever loading took (at least 1 s of asking), so a big
#: pack's whole check stays well inside 10 s: 5,000 team records take ~5 s to load and validate.
MAX_CHECK_SECONDS = 7.0


@dataclass
class Report:
    pack: Pack
    load_ms: float
    probes: int = 0
    hits: int = 0
    misses: list[str] = field(default_factory=list)
    unprobed: list[str] = field(default_factory=list)
    #: symptom strings there were (``probes`` of them were asked: all, or an even sample)
    available: int = 0
    #: probes whose string another record also claims (cannot single out one record)
    shared_probes: int = 0
    shared_misses: int = 0

    @property
    def share_distinct(self) -> float:
        """Self-retrieval over the strings only one record claims."""
        n = self.probes - self.shared_probes
        return (self.hits - (self.shared_probes - self.shared_misses)) / n if n else 1.0

    @property
    def share(self) -> float:
        return self.hits / self.probes if self.probes else 1.0

    def lines(self) -> list[str]:
        p = self.pack
        out = [*p.problems]
        out.append(f"{len(p.records)} records from {len(p.folders)} folder(s), loaded in {self.load_ms:.1f} ms; "
                   f"{len(p.problems)} problem(s)")
        out.append("per project: " + (", ".join(f"{k} {v}" for k, v in sorted(p.counts("frameworks").items())) or "none"))
        out.append("per category: " + (", ".join(f"{k} {v}" for k, v in sorted(p.counts("category").items())) or "none"))
        sample = (f"; asked of a sample of {self.probes} of the {self.available} strings, spread over the pack, "
                  "to bound the time" if self.available > self.probes else "")
        out.append(f"self-retrieval: {100 * self.share:.1f}% ({self.hits}/{self.probes} symptom strings retrieve their "
                   f"own record first; target {100 * TARGET:.0f}%{sample})")
        out.append(f"  over the strings only one record claims: {100 * self.share_distinct:.1f}%; "
                   f"{self.shared_probes} strings are claimed by several records ({self.shared_misses} of the misses)")
        out += [f"  miss: {m}" for m in self.misses[:30]]
        if len(self.misses) > 30:
            out.append(f"  ... and {len(self.misses) - 30} more")
        if self.unprobed:
            out.append(f"  no sample line could be made for the regexes of: {', '.join(self.unprobed[:20])}")
        return out


def check(dirs: list[str | Path] | None = None) -> Report:
    """Load ``dirs`` (default: the configured folders) and measure self-retrieval."""
    from rlmedic.knowledge.known.match import _index, match
    from rlmedic.knowledge.threads import normalize_error

    chosen = folders() if not dirs else [(Path(d), "builtin" if Path(d).resolve() == BUILTIN_DIR.resolve() else "team")
                                          for d in dirs]
    start = time.perf_counter()
    pack = load(chosen, strict=True)
    report = Report(pack=pack, load_ms=1000 * (time.perf_counter() - start))
    index = _index(pack)
    # (record, error string or regex, is a regex): a regex's sample line is made only for those asked,
    # so a big pack pays for the sample it asks, not for every pattern it has
    strings: list[tuple[Record, str, bool]] = []
    for record in pack.records:
        strings += [(record, e, False) for e in record.symptoms.errors]
        strings += [(record, pattern, True) for pattern in record.symptoms.regexes]
    most = max(1, MAX_PROBE_WORK // max(len(pack.records), 1))
    if len(strings) > most:
        strings = [strings[i * len(strings) // most] for i in range(most)]
    asked: list[tuple[Record, str]] = []
    for record, text, is_regex in strings:
        if not is_regex:
            asked.append((record, text))
            continue
        sample = sample_line(text)
        if sample is None or not re.search(text, sample):
            report.unprobed.append(record.id)
        else:
            asked.append((record, sample))
    report.available = sum(len(r.symptoms.errors) + len(r.symptoms.regexes) for r in pack.records) - len(report.unprobed)
    asked = [x for offset in range(8) for x in asked[offset::8]]
    now = time.perf_counter()
    deadline = now + max(1.0, min(MAX_PROBE_SECONDS, start + MAX_CHECK_SECONDS - now))
    for record, probe in asked:
        if time.perf_counter() > deadline:
            break
        report.probes += 1
        top = match([probe], pack=pack, versions={}, k=1)
        shared = index.shared.get(normalize_error(probe), 1) > 1
        report.shared_probes += shared
        if top and top[0].record.id == record.id:
            report.hits += 1
        else:
            report.shared_misses += shared
            got = top[0].record.id if top else "nothing"
            report.misses.append(f"{record.id}: {probe[:100]!r} -> {got}")
    return report


def sample_line(pattern: str) -> str | None:
    """A short string the regex matches (first branch of each alternation, fewest repeats), or None."""
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Python < 3.11
        import sre_parse  # type: ignore[no-redef]
    try:
        parsed = sre_parse.parse(pattern)
        return _emit(parsed, sre_parse)
    except Exception:  # noqa: BLE001 - an exotic construct: no sample
        return None


def _emit(items, sp) -> str:
    c = sp  # constants live on the parser module in 3.11+
    out = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("x" if chr(arg) != "x" else "y")
        elif name == "ANY":
            out.append("x")
        elif name == "IN":
            out.append(_class(arg))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, sub = arg
            if len(sub) == 1 and str(sub[0][0]) == "ANY":
                out.append(" " * max(low, 1))  # ".*" between words reads as a space in a real line
            else:
                out.append(_emit(sub, c) * low)
        elif name == "SUBPATTERN":
            out.append(_emit(arg[-1], c))
        elif name == "BRANCH":
            out.append(_emit(arg[1][0], c))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        elif name == "GROUPREF":
            out.append("")
        elif name == "CATEGORY":
            out.append(_category(str(arg)))
        else:
            raise ValueError(name)
    return "".join(out)


def _class(items) -> str:
    negate = False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif negate:
            continue
        elif name == "LITERAL":
            return chr(arg)
        elif name == "RANGE":
            return chr(arg[0])
        elif name == "CATEGORY":
            return _category(str(arg))
    return "x" if negate else "a"


def _category(name: str) -> str:
    return {"CATEGORY_DIGIT": "0", "CATEGORY_SPACE": " ", "CATEGORY_WORD": "a", "CATEGORY_NOT_DIGIT": "a",
            "CATEGORY_NOT_SPACE": "a", "CATEGORY_NOT_WORD": " "}.get(name, "a")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m rlmedic.knowledge.known",
                                     description="Validate known-issue records and measure self-retrieval.")
    parser.add_argument("--check", nargs="*", metavar="DIR", default=None,
                        help="check these folders (default: the shipped pack and RLMEDIC_KNOWN_ISSUES)")
    args = parser.parse_args(argv)
    if args.check is None:
        parser.print_help()
        return 2
    report = check(args.check or None)
    for line in report.lines():
        print(line)
    return 1 if report.pack.problems else 0
