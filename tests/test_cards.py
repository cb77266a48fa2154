"""Playbook cards: every built-in card loads and validates, the ids other layers rely on
exist, the retrieval question set points at real cards and real seed sections, the
loader rejects broken cards with a message naming the file, and no card copies the
seed documents' sentences."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlmedic.knowledge.chunking import chunk_document
import yaml

from rlmedic.errors import UserError
from rlmedic.knowledge.cards import CARDS_DIR, builtin_cards, card_by_id, load_cards
from rlmedic.types import CATEGORIES, FRAMEWORKS

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = Path(__file__).resolve().parent / "data" / "retrieval_questions.yaml"
#: verl cards are written from verl's docs, not the seeds; their questions live here (tests/test_verl.py).
VERL_QUESTIONS = Path(__file__).resolve().parent / "data" / "verl_questions.yaml"

#: Ids referenced from log signatures, config rules and the question set. Do not rename.
REQUIRED_IDS = {
    # seed 000: AReaL troubleshooting
    "recovery-config-changed", "recovery-checkpoint-missing", "oom-initialization",
    "oom-sglang-generation", "oom-actor-train", "oom-data-transfer",
    # seed 001: AReaL OOM guide
    "oom-weight-update", "ulysses-sp-divisibility",
    # seed 002: slime troubleshooting guide
    "sglang-engine-crash", "sglang-router-imbalance", "weight-sync-timeout",
    "weight-sync-multinode", "oom-training-megatron", "oom-colocated", "slow-data-loading",
    "data-format-errors", "nan-loss-explosion", "reward-collapse", "async-with-colocate",
    "stale-async-weights", "tool-responses-in-loss", "multiturn-context-too-long",
    "checkpoint-loading-fails", "debugging-tips", "slime-constraints",
    # seed 003: slime FAQ
    "garbled-text-megatron-not-loaded", "ray-submission-stuck", "max-tokens-per-gpu",
    "transformers-model-not-found-multinode", "resume-slime", "batch-size-arithmetic",
    "data-packing-varlen", "get-model-info-connection-error", "high-gradient-norm",
    "generation-never-stops", "illegal-memory-access", "inductor-jsondecodeerror", "grad-nan-inf",
    # seed 004: cloud GPU learnings
    "spot-interruption", "checkpoints-not-on-persistent-volume", "zero-reward-circuit-breaker",
    "oom-consumer-gpu", "unknown-config-name-rtx5090", "attention-backend-selection",
    "sglang-disconnect-long-run", "wandb-running-but-stopped", "no-checkpoints-found",
    "recover-checkpoint-invalid", "gpu-config-selection",
    # beyond the seeds
    "nccl-watchdog-timeout", "torch-weights-only-unpickling", "ray-actor-died",
    "megatron-tracker-file",
}

#: Cards written from general knowledge, not from a seed document (no seed question).
NOT_FROM_SEEDS = {
    "nccl-watchdog-timeout", "torch-weights-only-unpickling", "ray-actor-died", "megatron-tracker-file",
    # classes of failures found in real logs from issue threads (the traceback table's cards)
    "install-version-mismatch", "config-validation-error", "reward-function-errors", "cluster-resources-placement",
    "inference-engine-launch-failure", "weight-name-mismatch",
    # metric pathologies read from training curves (the frameworks' metric names and config references)
    "response-length-cap",
    # host memory that grows until the node runs out (Ray's and Python's memory docs)
    "host-memory-growth",
    # a node Ray declared dead (Ray's node fault-tolerance docs and health-check settings)
    "ray-node-lost",
}

GOOD_CARD = """\
id: {id}
title: A test card
frameworks: [areal]
category: oom_training
symptoms: [something breaks]
causes: [a reason]
fixes:
  - action: Do the thing
    key: actor.mb_spec.max_tokens_per_mb
    value: 4096
references:
  - project: AReaL
    page: docs/en/best_practices/handling_oom.md
"""


# --- helpers ----------------------------------------------------------------------------


def _seeds_dir(shared: Path) -> Path:
    """The seed documents in ``../shared/seeds`` (the `shared` fixture skips without it)."""
    return shared / "seeds"


def _norm(text: str) -> str:
    """Lower-case, drop Markdown emphasis/code marks, collapse whitespace."""
    text = text.lower().replace("`", "").replace("*", "")
    return re.sub(r"\s+", " ", text).strip()


def _headings(text: str) -> list[str]:
    """Markdown headings outside fenced code blocks (``# comment`` in code is not one)."""
    heads, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced and re.match(r"#{1,6}\s", line):
            heads.append(line.lstrip("#").strip())
    return heads


def _questions() -> list[dict]:
    data = yaml.safe_load(QUESTIONS.read_text(encoding="utf-8"))
    assert isinstance(data, list) and data, "retrieval_questions.yaml must be a non-empty list"
    return data


# --- built-in cards ---------------------------------------------------------------------


def test_builtin_cards_load_and_validate():
    cards = builtin_cards()
    assert len(cards) >= len(REQUIRED_IDS)
    assert [c.id for c in cards] == [c.id for c in load_cards(CARDS_DIR)]
    assert len(cards) == len(list(CARDS_DIR.glob("*.yaml")))


def test_ids_unique_and_match_file_stem():
    cards = builtin_cards()
    ids = [c.id for c in cards]
    assert len(ids) == len(set(ids))
    for card in cards:
        assert Path(card.path).stem == card.id, card.path


def test_vocabulary_and_required_content():
    for card in builtin_cards():
        assert card.category in CATEGORIES, card.id
        assert card.frameworks and set(card.frameworks) <= set(FRAMEWORKS), card.id
        assert card.fixes, f"{card.id}: no fix"
        assert card.references, f"{card.id}: no reference"
        assert card.symptoms and card.causes, card.id
        for ref in card.references:
            assert ref.project.strip() and ref.page.strip(), card.id
            assert not ref.url or ref.url.startswith("https://"), card.id


def test_fix_settings_look_like_keys_and_flags():
    for path in sorted(CARDS_DIR.glob("*.yaml")):
        for raw in yaml.safe_load(path.read_text(encoding="utf-8"))["fixes"]:
            raw = raw if isinstance(raw, dict) else {"action": raw}
            if raw.get("flag"):
                assert raw["flag"].startswith("--"), f"{path.name}: flag {raw['flag']!r}"
            if raw.get("key"):
                assert re.fullmatch(r"[A-Za-z_][\w.]*", raw["key"]), f"{path.name}: key {raw['key']!r}"
    for card in builtin_cards():
        for fix in card.fixes:
            # the Fix names the config key, else the flag; the action line shows both with the value
            assert fix.key == "" or re.fullmatch(r"[A-Za-z_][\w.]*|--[a-z0-9-]+(?: \S+)*", fix.key), f"{card.id}: {fix.key!r}"
            if fix.framework:
                assert fix.framework in FRAMEWORKS, f"{card.id}: framework {fix.framework!r}"
            assert str(fix).strip() and (not fix.key or fix.key in str(fix)), f"{card.id}: {fix}"
            assert fix.citations == (card.citation,)


@pytest.mark.parametrize("card_id", sorted(REQUIRED_IDS))
def test_required_card_exists(card_id):
    card = card_by_id(card_id)
    assert card is not None, f"card {card_id!r} is referenced elsewhere and must exist"
    assert card.to_text().startswith("# ")
    assert card.citation.ref == card_id


# --- retrieval question set -------------------------------------------------------------


def test_retrieval_questions_point_at_cards_and_seed_sections(shared):
    seeds = _seeds_dir(shared)
    heading_cache: dict[str, list[str]] = {}
    seen_questions = set()
    for i, entry in enumerate(_questions()):
        where = f"retrieval_questions.yaml entry #{i + 1}"
        assert set(entry) == {"question", "card", "seed", "section"}, where
        question = entry["question"].strip()
        assert len(question.split()) >= 4, where
        assert question.lower() not in seen_questions, f"{where}: duplicate question"
        seen_questions.add(question.lower())
        assert card_by_id(entry["card"]) is not None, f"{where}: unknown card {entry['card']!r}"
        seed = seeds / entry["seed"]
        assert seed.is_file(), f"{where}: no seed file {entry['seed']}"
        if entry["seed"] not in heading_cache:
            # sections as the chunker sees them (FAQ items count as headings there)
            text = seed.read_text(encoding="utf-8")
            heading_cache[entry["seed"]] = [c.section for c in chunk_document(text, entry["seed"])]
        heads = heading_cache[entry["seed"]]
        assert any(entry["section"] in h for h in heads), (
            f"{where}: section {entry['section']!r} is not part of any heading in {entry['seed']}"
        )


def test_every_seed_and_seed_card_has_a_question(shared):
    questions = _questions()
    seeds = {p.name for p in _seeds_dir(shared).glob("0*.txt")}
    assert seeds <= {q["seed"] for q in questions}, "every seed file needs questions"
    asked = {q["card"] for q in questions}
    asked |= {q["card"] for q in yaml.safe_load(VERL_QUESTIONS.read_text(encoding="utf-8"))}
    missing = sorted(c.id for c in builtin_cards() if c.id not in asked and c.id not in NOT_FROM_SEEDS)
    assert not missing, f"seed-derived cards without a retrieval question: {missing}"


def test_questions_do_not_restate_headings(shared):
    seeds = _seeds_dir(shared)
    for entry in _questions():
        heads = [_norm(h) for h in _headings((seeds / entry["seed"]).read_text(encoding="utf-8"))]
        question = _norm(entry["question"]).rstrip("?")
        assert question not in heads, f"question copies a heading: {entry['question']!r}"


# --- own words ----------------------------------------------------------------------------


def _sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+|\n", text)
    return [re.sub(r"^\s*(?:[-#]+|\d+\.)\s*", "", p).strip() for p in parts]


def test_cards_do_not_copy_seed_sentences(shared):
    corpus = [_norm(p.read_text(encoding="utf-8")) for p in sorted(_seeds_dir(shared).glob("*.txt"))]
    copied = []
    for card in builtin_cards():
        for sentence in _sentences(card.to_text()):
            if len(sentence.split()) >= 12 and any(_norm(sentence) in seed for seed in corpus):
                copied.append(f"{card.id}: {sentence}")
    assert not copied, "card sentences copied from seeds:\n" + "\n".join(copied)


def test_cards_share_no_long_word_runs_with_seeds(shared):
    """Stricter than whole sentences: no 12-word run of a card's prose (errors excluded,
    those are exact log strings) appears in a seed."""
    window = 12

    def words(text: str) -> list[str]:
        return re.findall(r"[a-z0-9_.%/+=:'-]+", _norm(text))

    grams = set()
    for path in _seeds_dir(shared).glob("*.txt"):
        w = words(path.read_text(encoding="utf-8"))
        grams.update(" ".join(w[i : i + window]) for i in range(len(w) - window + 1))
    hits = []
    for card in builtin_cards():
        prose = [card.title, *card.symptoms, *card.causes, card.notes]
        prose += [f"{f.action} {f.why}" for f in card.fixes]
        for text in prose:
            w = words(text)
            hits += [f"{card.id}: {' '.join(w[i:i + window])}" for i in range(len(w) - window + 1)
                     if " ".join(w[i : i + window]) in grams]
    assert not hits, "card prose repeats seed text:\n" + "\n".join(hits)


# --- loader rejects broken cards --------------------------------------------------------


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def _expect_error(directory: Path, bad_file: Path, *fragments: str) -> None:
    with pytest.raises(UserError) as info:
        load_cards(directory)
    message = str(info.value)
    assert bad_file.name in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_loader_accepts_a_good_card(tmp_path):
    _write(tmp_path, "good.yaml", GOOD_CARD.format(id="good"))
    (card,) = load_cards(tmp_path)
    assert card.id == "good" and card.fixes[0].new == 4096 and card.fixes[0].key == "actor.mb_spec.max_tokens_per_mb"
    assert str(card.fixes[0]).endswith("(actor.mb_spec.max_tokens_per_mb=4096)")
    assert "actor.mb_spec.max_tokens_per_mb=4096" in card.to_text()


def test_loader_rejects_missing_field(tmp_path):
    bad = _write(tmp_path, "bad.yaml", GOOD_CARD.format(id="bad").replace("causes: [a reason]\n", ""))
    _expect_error(tmp_path, bad, "causes")


def test_loader_rejects_unknown_category(tmp_path):
    bad = _write(tmp_path, "bad.yaml", GOOD_CARD.format(id="bad").replace("oom_training", "gpu_on_fire"))
    _expect_error(tmp_path, bad, "gpu_on_fire")


def test_loader_rejects_unknown_framework(tmp_path):
    bad = _write(tmp_path, "bad.yaml", GOOD_CARD.format(id="bad").replace("[areal]", "[openrlhf]"))
    _expect_error(tmp_path, bad, "openrlhf")


def test_loader_rejects_duplicate_id(tmp_path):
    _write(tmp_path, "a.yaml", GOOD_CARD.format(id="same"))
    bad = _write(tmp_path, "b.yaml", GOOD_CARD.format(id="same"))
    _expect_error(tmp_path, bad, "duplicate", "same")


def test_loader_rejects_card_without_reference(tmp_path):
    text = GOOD_CARD.format(id="bad").split("references:")[0] + "references: []\n"
    bad = _write(tmp_path, "bad.yaml", text)
    _expect_error(tmp_path, bad, "reference")


def test_loader_rejects_reference_without_page(tmp_path):
    text = GOOD_CARD.format(id="bad").replace("    page: docs/en/best_practices/handling_oom.md\n", "")
    bad = _write(tmp_path, "bad.yaml", text)
    _expect_error(tmp_path, bad, "reference")


def test_loader_rejects_card_without_fix(tmp_path):
    text = re.sub(r"fixes:\n(?:  .*\n|    .*\n)+", "fixes: []\n", GOOD_CARD.format(id="bad"))
    bad = _write(tmp_path, "bad.yaml", text)
    _expect_error(tmp_path, bad, "fixes")


def test_loader_rejects_fix_without_action(tmp_path):
    text = GOOD_CARD.format(id="bad").replace("  - action: Do the thing\n    key:", "  - key:")
    bad = _write(tmp_path, "bad.yaml", text)
    _expect_error(tmp_path, bad, "action")


def test_loader_rejects_unknown_field(tmp_path):
    bad = _write(tmp_path, "bad.yaml", GOOD_CARD.format(id="bad") + "severity: high\n")
    _expect_error(tmp_path, bad, "severity")


def test_loader_rejects_bad_id(tmp_path):
    bad = _write(tmp_path, "bad.yaml", GOOD_CARD.format(id="'bad id!'"))
    _expect_error(tmp_path, bad, "bad id!")


def test_loader_rejects_invalid_yaml(tmp_path):
    bad = _write(tmp_path, "broken.yaml", "id: broken\ntitle: [unclosed\n  - : :\n")
    _expect_error(tmp_path, bad, "YAML")


def test_loader_rejects_non_mapping(tmp_path):
    bad = _write(tmp_path, "list.yaml", "- just\n- a list\n")
    _expect_error(tmp_path, bad, "mapping")
