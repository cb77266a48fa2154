"""The signature catalog is valid data: every entry compiles, matches its examples,
has a prefilter literal, points at an existing playbook card, and has a fixture."""

from __future__ import annotations

import pytest
import yaml

from conftest import FIXTURES
from rlmedic.errors import UserError
from rlmedic.knowledge.cards import CARDS_DIR
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
