"""What a question asks for and rules out (agent/intents.yaml): the shipped file and its validator."""

from __future__ import annotations

import pytest

from rlmedic.agent.intents import intents, parse
from rlmedic.errors import UserError


@pytest.mark.parametrize("question,intent", [
    ("did this run finish ok?", "status"),
    ("what exactly should I change in my config?", "fixes"),
    ("is anything left on the GPUs?", "gpus"),
    ("how do I resume from the last checkpoint?", "resume"),
    ("why did my run crash at step 40?", "cause"),
])
def test_the_shipped_intents_read_plain_questions(question: str, intent: str) -> None:
    assert intent in [i.id for i in intents().asked(question)]


@pytest.mark.parametrize("question,ruled", [
    ("memory is fine, why does it hang?", {"oom_generation", "oom_training", "oom_weight_update"}),
    ("it is not an OOM", {"oom_generation", "oom_training", "oom_weight_update"}),
    ("NCCL is not the problem here", {"nccl_timeout"}),
    ("sglang keeps running out of memory during rollout", set()),
    ("rewards are stuck at zero", set()),
])
def test_what_a_question_rules_out(question: str, ruled: set[str]) -> None:
    assert intents().ruled_out(question) == ruled


@pytest.mark.parametrize("data,message", [
    ([], "expected a mapping"),
    ({"intents": [{"id": "x", "lead": "nope", "needs": "logs", "patterns": ["a"]}], "negations": ["{topic}"]}, "lead must be"),
    ({"intents": [{"id": "x", "lead": "cause", "needs": "logs", "patterns": ["("]}], "negations": ["{topic}"]}, "bad pattern"),
    ({"intents": [], "negations": ["no topic here"]}, "negations"),
    ({"intents": [], "negations": ["{topic}"], "rule_out": [{"categories": ["oom"], "topics": ["memory"]}]}, "categories"),
])
def test_the_validator_names_the_entry_and_the_problem(data: object, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse(data, "intents.yaml")


@pytest.mark.parametrize("text,framework", [
    ("AReaL run dies in rollout", "areal"),
    ("slime run dies in rollout", "slime"),
    ("I set actor.mb_spec.max_tokens_per_mb=4096", "areal"),
    ("launched with --sglang-mem-fraction-static 0.7", "slime"),
    ("rollout.backend=vllm:d1p2t4 actor.backend=megatron:d1p4t2 and --debug-mode", "areal"),
    ("why did my run die?", ""),
])
def test_the_framework_a_question_is_about(text: str, framework: str) -> None:
    from rlmedic.agent.compose import detect_framework

    assert detect_framework(text) == framework
