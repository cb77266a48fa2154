"""verl as a framework: questions are recognised as verl's by their Hydra keys or by name, verl
cards answer them, and neither framework gets the other's fixes (issue 17)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rlmedic.agent.compose import detect_framework, fits
from rlmedic.knowledge.cards import builtin_cards, card_by_id
from rlmedic.types import FRAMEWORKS, Fix
from rlmedic.ui.cli import app

QUESTIONS = Path(__file__).parent / "data" / "verl_questions.yaml"
VERL_KEY = re.compile(r"^(?:actor_rollout_ref|critic|trainer|reward_model|reward|custom_reward_function|algorithm|data"
                      r"|ray_init|ray_kwargs)\.")
runner = CliRunner()


def _questions() -> list[dict]:
    return yaml.safe_load(QUESTIONS.read_text(encoding="utf-8"))


def _verl_cards():
    """The cards written for verl alone (a card for several frameworks may carry verl fixes too)."""
    return [c for c in builtin_cards() if tuple(c.frameworks) == ("verl",)]


# --- the framework in play ---------------------------------------------------------------


@pytest.mark.parametrize("text,framework", [
    ("I set trainer.max_actor_ckpt_to_keep=1 and lost every checkpoint", "verl"),
    ("actor_rollout_ref.rollout.gpu_memory_utilization=0.8 then OOM", "verl"),
    ("data.train_batch_size=60 with actor_rollout_ref.actor.ppo_mini_batch_size=16", "verl"),
    ("algorithm.adv_estimator=grpo and reward stays flat", "verl"),
    ("running verl with vllm, it hangs", "verl"),
    # AReaL's actor./rollout. inside a verl key are not AReaL keys
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu and actor_rollout_ref.rollout.n", "verl"),
    # 'verl' inside another word is not the name
    ("overlong responses in my run, overload of memory", ""),
    ("I set actor.mb_spec.max_tokens_per_mb=4096", "areal"),
    ("launched with --sglang-mem-fraction-static 0.7", "slime"),
    ("why did my run die?", ""),
])
def test_verl_questions_are_recognised_by_keys_and_name(text: str, framework: str) -> None:
    assert detect_framework(text) == framework


def test_fixes_for_one_framework_stay_out_of_another() -> None:
    verl_fix = Fix.from_dict({"op": "action", "action": "x", "key": "trainer.save_freq", "framework": "verl"})
    areal_fix = Fix.from_dict({"op": "action", "action": "x", "key": "saver.freq_steps", "framework": "areal"})
    untagged_verl = Fix.from_dict({"op": "action", "action": "x", "key": "actor_rollout_ref.rollout.n"})
    untagged_areal = Fix.from_dict({"op": "action", "action": "x", "key": "cluster.fileroot"})
    flag = Fix.from_dict({"op": "action", "action": "x", "key": "--save-interval"})
    generic = Fix.from_dict({"op": "action", "action": "restart the job"})
    assert fits(verl_fix, "verl") and not fits(verl_fix, "areal") and not fits(verl_fix, "slime")
    assert not fits(areal_fix, "verl")
    assert fits(untagged_verl, "verl") and not fits(untagged_verl, "areal")
    assert not fits(untagged_areal, "verl") and fits(untagged_areal, "areal")
    assert not fits(flag, "verl") and fits(flag, "slime")
    assert all(fits(generic, fw) for fw in ("areal", "slime", "verl", ""))


# --- the verl cards ------------------------------------------------------------------------


def test_verl_is_a_framework_and_its_cards_speak_verl() -> None:
    assert "verl" in FRAMEWORKS
    cards = _verl_cards()
    assert len(cards) >= 12
    for card in cards:
        assert card.frameworks == ("verl",) or list(card.frameworks) == ["verl"], card.id
        assert any(r.project == "verl" for r in card.references), f"{card.id}: cites no verl source"
        for fix in card.fixes:
            assert fix.framework == "verl", f"{card.id}: untagged fix {fix}"
            key = fix.key
            # keys exactly as verl spells them: under a verl config root, never an AReaL key or slime flag
            assert not key or VERL_KEY.match(key), f"{card.id}: {key!r} is not a verl config key"


def test_every_verl_fix_of_any_card_names_a_verl_key() -> None:
    fixes = [(c.id, f) for c in builtin_cards() for f in c.fixes if f.framework == "verl"]
    assert any(tuple(card_by_id(cid).frameworks) != ("verl",) for cid, _ in fixes)  # shared cards are checked too
    for cid, fix in fixes:
        assert not fix.key or VERL_KEY.match(fix.key), f"{cid}: {fix.key!r} is not a verl config key"


def test_every_verl_card_has_a_question_and_every_question_a_verl_card() -> None:
    questions = _questions()
    asked = {q["card"] for q in questions}
    assert {c.id for c in _verl_cards()} <= asked
    for q in questions:
        assert set(q) == {"question", "card"}
        card = card_by_id(q["card"])
        assert card is not None and "verl" in card.frameworks, q


def test_verl_cards_do_not_copy_the_other_cards() -> None:
    """Own words: no 10-word run of a verl card's prose appears in another card."""
    def grams(text: str) -> set[str]:
        w = re.findall(r"[a-z0-9_.]+", text.lower())
        return {" ".join(w[i:i + 10]) for i in range(len(w) - 9)}

    others = set()
    for card in builtin_cards():
        if "verl" not in card.frameworks:
            others |= grams(" ".join([card.title, *card.symptoms, *card.causes, card.notes]))
    for card in _verl_cards():
        shared = grams(" ".join([card.title, *card.symptoms, *card.causes, card.notes])) & others
        assert not shared, f"{card.id}: {sorted(shared)[:2]}"


@pytest.mark.slow
def test_verl_questions_find_their_card_in_the_top_3(tmp_path: Path) -> None:
    from rlmedic.knowledge.index import KnowledgeBase

    kb = KnowledgeBase(tmp_path / "index")
    misses = []
    for q in _questions():
        ids = [r.card_id for r in kb.search(q["question"], 3, kind="card")]
        if q["card"] not in ids:
            misses.append((q["question"], ids))
    assert not misses, misses


# --- through `ask --offline` ----------------------------------------------------------------


def _ask(question: str) -> dict:
    result = runner.invoke(app, ["ask", question, "--offline", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("question", [
    "I set trainer.max_actor_ckpt_to_keep=1 in verl and now all my checkpoints are gone",
    "OOM during rollout with actor_rollout_ref.rollout.gpu_memory_utilization=0.85 on 8 H100s",
])
def test_a_verl_question_gets_verl_fixes_only(question: str) -> None:
    data = _ask(question)
    assert data["fixes"], data["answer"]
    for fix in data["fixes"]:
        assert fix["framework"] in ("verl", "generic", ""), fix
        assert not fix["key"].startswith("--"), fix
        assert not fix["key"] or VERL_KEY.match(fix["key"]), fix
    assert all(card_by_id(c) is None or set(card_by_id(c).frameworks) & {"verl", "generic"} for c in data["cards"])


@pytest.mark.slow
def test_an_areal_question_gets_no_verl_fix() -> None:
    data = _ask("AReaL rollout OOM: actor.sglang.mem_fraction_static is 0.9, what should I set?")
    assert data["fixes"], data["answer"]
    assert not [f for f in data["fixes"] if f["framework"] == "verl" or VERL_KEY.match(f["key"] or "")]
    assert not [c for c in data["cards"] if card_by_id(c) is not None and card_by_id(c).frameworks == ("verl",)]
