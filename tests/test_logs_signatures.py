"""The signature catalog is valid data: every entry compiles, matches its examples,
has a prefilter literal, points at an existing playbook card, and has a fixture."""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import FIXTURES
from rlmedic.errors import UserError
from rlmedic.knowledge.cards import CARDS_DIR
from rlmedic.lazyregex import ODD_FOLDS, LazyPattern, holds, required_text
from rlmedic.tools.logs.signatures import ROLE_RANK, builtin_catalog, parse_catalog, required_literals
from rlmedic.types import CATEGORIES

CATALOG = builtin_catalog()
SIG_IDS = [s.id for s in CATALOG.signatures]


@pytest.mark.parametrize("sig_id", SIG_IDS)
def test_examples_match_and_contain_a_literal(sig_id: str) -> None:
    sig = CATALOG.by_id[sig_id]
    for example in sig.examples:
        assert sig.match(example), f"{sig_id}: example does not match: {example}"
        assert any(v in example for lit in sig.literals for v in lit.variants()), (
            f"{sig_id}: the prefilter would miss its own example {example!r}"
        )


@pytest.mark.parametrize("sig_id", SIG_IDS)
def test_card_exists(sig_id: str) -> None:
    sig = CATALOG.by_id[sig_id]
    cards = {sig.card} if isinstance(sig.card, str) else set()
    for override in sig.by_phase.values():
        card = override.get("card")
        cards |= set(card.values()) if isinstance(card, dict) else ({card} if card else set())
    for card in cards:
        assert (CARDS_DIR / f"{card}.yaml").is_file(), f"{sig_id}: card {card!r} not in knowledge/cards"


def test_metric_rule_cards_exist() -> None:
    from rlmedic.tools.runs.detectors import log_rules

    rules = log_rules(CATALOG.metrics.get("rules"))  # the one detector file's text-log rules
    assert {"zero_reward", "reward_collapse", "nonfinite", "spike", "length_cap", "no_eos"} <= set(rules)
    for rule in rules.values():
        cards = [rule["card"]] if "card" in rule else list(rule.get("cards", {}).values())
        for card in cards:
            assert (CARDS_DIR / f"{card}.yaml").is_file(), card


def test_vocabulary_and_roles() -> None:
    for sig in CATALOG.signatures:
        assert sig.category in CATEGORIES
        assert sig.role in ROLE_RANK
        assert sig.literals, sig.id


def test_every_signature_has_a_fixture() -> None:
    have = {p.stem for p in (FIXTURES / "logs" / "signatures").glob("*.log")}
    markers = {s.id for s in CATALOG.signatures if s.role == "marker"}
    assert set(SIG_IDS) - markers <= have


def test_required_literals() -> None:
    assert [lit.text for lit in required_literals(r"torch\.(?:cuda\.)?OutOfMemoryError")] == ["OutOfMemoryError"]
    assert {lit.text for lit in required_literals(r"(?:Connection refused|Server disconnected)")} == {
        "Connection refused",
        "Server disconnected",
    }
    caseless = required_literals(r"(?i)circuit breaker")
    assert caseless and caseless[0].caseless and "CIRCUIT BREAKER" in caseless[0].variants()
    assert required_literals(r"\d+ x") is None


def _one(**extra: object) -> dict:
    entry = {
        "id": "x",
        "title": "t",
        "category": "other",
        "severity": "error",
        "role": "cause",
        "card": "debugging-tips",
        "patterns": ["Boom happened"],
        "examples": ["Boom happened"],
    }
    entry.update(extra)
    return {"signatures": [entry]}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"category": "nope"}, "vocabulary"),
        ({"severity": "fatal"}, "severity"),
        ({"role": "boss"}, "role"),
        ({"patterns": ["(unclosed"]}, "invalid regex"),
        ({"patterns": [r"\d+"]}, "literal"),
        ({"colour": "red"}, "unknown field"),
        ({"examples": []}, "examples"),
        ({"phase": "lunch"}, "phase"),
    ],
)
def test_bad_entries_fail_loudly(extra: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_catalog(_one(**extra))


def test_a_literal_inside_a_metric_keyword_is_refused() -> None:
    """Such a literal sends every stats line of a metric-dense log through the signature's regex."""
    data = _one(patterns=["reward collapsed"], literals=["reward"], examples=["reward collapsed"])
    data["metrics"] = {"literals": ["task_reward"]}
    with pytest.raises(UserError, match="metric keyword 'task_reward'"):
        parse_catalog(data)
    data["signatures"][0]["literals"] = ["collapsed"]
    assert parse_catalog(data).signatures[0].literals[0].text == "collapsed"


def test_duplicate_ids_fail() -> None:
    data = _one()
    data["signatures"].append(dict(data["signatures"][0]))
    with pytest.raises(UserError, match="duplicate"):
        parse_catalog(data)


def test_catalog_file_is_plain_yaml() -> None:
    raw = yaml.safe_load((FIXTURES.parent.parent / "tools" / "logs" / "signatures.yaml").read_text())
    assert raw["version"] == 1
    assert len(raw["signatures"]) >= 50


# -- the text a pattern requires, checked before its regex runs ------------------------------------


def test_required_text_keeps_every_required_part() -> None:
    """All the parts a match needs, alternatives as alternatives: a stats row naming
    ``timeperf/update_weights`` holds the scanner's literal but not a weight-sync error's other parts."""
    needs, caseless = required_text(r"Endpoint: /\S*update_weights?\S*")
    assert needs == ("Endpoint: /", "update_weight") and not caseless
    needs, _ = required_text(r"(?:[Tt]ime[d ]?[ -]?out|TimeoutError) after (\d+)")
    assert needs == ((("ime", "out"), ("TimeoutError",)), " after ")
    row = "(TrainWorker pid=1) │ timeperf/update_weights │ 7.8e-01 │"
    assert not holds(needs, row) and holds(needs, "Timed out after 30 s") and holds(needs, "TimeoutError after 3")
    assert required_text(r"(?:ab|c)x+yz")[0] == ("yz",)  # an alternative needing nothing frees the choice
    assert required_text(r"a(?i:bc)d") == ((), False)  # a group's own flags: no check
    assert required_text(r"(?i)CUDA out") == (("cuda out",), True)


def test_odd_folds_are_all_of_unicodes() -> None:
    """The characters a case-blind regex matches to an ASCII letter where ``str.lower`` does not
    give that letter: exactly what the case-blind check steps aside for."""
    import sys

    letter = re.compile(r"(?i)[a-z]")
    odd = {c for c in map(chr, range(128, sys.maxunicode + 1))
           if letter.match(c) and not (len(c.lower()) == 1 and c.lower().isascii())}
    assert odd == set(ODD_FOLDS)


@pytest.mark.parametrize("pattern, line", [
    (r"(?i)spent \d+ s", "ſpent 3 s"),  # ſ matches s
    (r"(?i)\bin (\d+)", "İn 4"),  # İ matches i; it lowers to two characters
    (r"(?i)weight update took", "│ WEIGHT UPDATE took │"),  # a non-ASCII line, lowered
    (r"update_weights?[^\n]{0,9}(?:timed out|TimeoutError)", "update_weights TimeoutError"),
    (r"CUDA (?:error: )?out of memory", "CUDA error: out of memory"),
])
def test_prefilter_never_hides_a_match(pattern: str, line: str) -> None:
    assert LazyPattern(pattern).search(line) is not None
    assert re.search(pattern, line) is not None


def test_prefilter_agrees_with_the_regex_on_every_catalog_example() -> None:
    """Each pattern, on every example line and fixture line: the check says no only where the regex does."""
    lines = [e for s in builtin_catalog().signatures for e in s.examples]
    lines += [ln for f in sorted((FIXTURES / "logs").rglob("*.log")) for ln in f.read_text(errors="replace").splitlines()]
    for sig in builtin_catalog().signatures:
        for p in sig.patterns:
            fresh = LazyPattern(p.pattern)
            for line in lines:
                assert (fresh.search(line) is None) == (re.search(p.pattern, line) is None), (p.pattern, line)


def test_a_line_without_its_digits_is_refused_only_when_it_cannot_match() -> None:
    """The scanner judges a candidate line once per skeleton (digits deleted): a refusal there must
    mean no signature matches any line of that skeleton, here on every example and fixture line."""
    lines = [e for s in builtin_catalog().signatures for e in s.examples]
    lines += [ln for f in sorted((FIXTURES / "logs").rglob("*.log")) for ln in f.read_text(errors="replace").splitlines()]
    digits = {ord(d): None for d in "0123456789"}
    refused = 0
    for sig in builtin_catalog().signatures:
        for line in lines:
            if not sig.may_match_without_digits(line.translate(digits)):
                refused += 1
                assert not sig.match(line), (sig.id, line)
    assert refused > len(lines)  # it does refuse: most lines are no signature's


def test_the_skeleton_check_keeps_digits_out_of_required_text() -> None:
    sig = builtin_catalog().by_id["weight-update-rejected"]
    row = "(TrainWorker pid=31) │ timeperf/update_weights │  7.8696e-01 │"
    hit = "POST /update_weights_from_tensor status=400"
    digits = {ord(d): None for d in "0123456789"}
    assert not sig.may_match_without_digits(row.translate(digits))
    assert sig.may_match_without_digits(hit.translate(digits)) and sig.match(hit)


def test_a_literal_and_its_caseless_twin_are_one_search_and_each_regex_still_decides() -> None:
    """One Hyperscan report per line, not two, for a literal that a case-sensitive and a caseless
    signature share; the case-sensitive signature's own regex still refuses the other case."""
    from rlmedic.tools.logs.diagnose import diagnose_texts

    data = _one(id="exact", patterns=["update_weight failed"], literals=["update_weight"],
                examples=["update_weight failed"])
    data["signatures"].append({**_one()["signatures"][0], "id": "anycase", "patterns": ["(?i)update_weight stalled"],
                               "literals": ["update_weight"], "examples": ["UPDATE_WEIGHT stalled"]})
    catalog = parse_catalog(data)
    shared = [(lit, owners) for lit, owners in catalog.all_literals() if lit.text.lower() == "update_weight"]
    assert [(lit.caseless, owners) for lit, owners in shared] == [(True, frozenset({"exact", "anycase"}))]
    for line, found in [("update_weight failed", {"exact"}), ("UPDATE_WEIGHT failed", set()),
                        ("Update_Weight stalled", {"anycase"}), ("update_weight is fine", set())]:
        d = diagnose_texts([("a.log", f"step 1\n{line}\n")], catalog=catalog)
        assert {f.id for f in d.findings} == found, line
