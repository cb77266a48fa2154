"""Text tool calls in the dialects small models write, the JSON repair, and the reply checks."""

from __future__ import annotations

import time

import pytest

from rlmedic.agent import replies
from rlmedic.agent.textcalls import MAX_CALLS_PER_REPLY, loads_lenient, parse_tool_calls

NAMES = ["diagnose", "excerpt"]
ARGS = {"paths": ["/r/train.log"]}


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "diagnose", "arguments": {"paths": ["/r/train.log"]}}</tool_call>',
    'Reading it.\n```tool_code\nprint(diagnose(paths=["/r/train.log"]))\n```',
    '```tool_code\ndiagnose(paths=["/r/train.log"])\n```',
    '[diagnose(paths=["/r/train.log"])]',
    '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>diagnose\n```json\n{"paths": ["/r/train.log"]}\n'
    '```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>diagnose<｜tool▁sep｜>{"paths": ["/r/train.log"]}<｜tool▁call▁end｜>'
    '<｜tool▁calls▁end｜>',
    'Thought: read the log.\nAction: diagnose\nAction Input: {"paths": ["/r/train.log"]}\nObservation:',
    '<|tool_call|>[{"name": "diagnose", "arguments": {"paths": ["/r/train.log"]}}]<|/tool_call|>',
    '[TOOL_CALLS][{"name": "diagnose", "arguments": {"paths": ["/r/train.log"]}}]',
])
def test_each_dialect_gives_the_call_and_no_markup(text: str) -> None:
    calls, prose = parse_tool_calls(text, NAMES)
    assert [(c.name, c.args) for c in calls] == [("diagnose", ARGS)]
    for markup in ("tool_code", "tool▁", "Action", "tool_call", "TOOL_CALLS", "diagnose("):
        assert markup not in prose


def test_python_calls_are_read_never_run() -> None:
    calls, _ = parse_tool_calls('```tool_code\ndiagnose(paths=__import__("os").listdir("/"))\n```', NAMES)
    assert calls == []  # not a literal: refused, not evaluated
    calls, prose = parse_tool_calls('```tool_code\nshutil.rmtree(path="/")\n```', NAMES)
    assert calls == []  # not one of the tools


def test_unknown_names_and_prose_stay_prose() -> None:
    text = "Action: rm_rf\nAction Input: {\"path\": \"/\"}"
    assert parse_tool_calls(text, NAMES) == ([], text)
    assert parse_tool_calls("Root cause: OOM. Fix: lower the batch.", NAMES)[0] == []


@pytest.mark.parametrize("raw,value", [
    ('{"paths": ["x",],}', {"paths": ["x"]}),
    ('{"paths": ["x"]', {"paths": ["x"]}),
    ('{"paths": ["x"]}}', {"paths": ["x"]}),
    ("{'paths': ['x'], 'strict': True}", {"paths": ["x"], "strict": True}),
    ("not json", None),
])
def test_json_repair(raw: str, value: object) -> None:
    assert loads_lenient(raw) == value


def test_calls_per_reply_and_argument_size_are_bounded() -> None:
    many = "".join(f'<tool_call>{{"name": "diagnose", "arguments": {{"paths": ["/r/{i}.log"]}}}}</tool_call>'
                   for i in range(3000))
    started = time.process_time()
    calls, _ = parse_tool_calls(many, NAMES)
    assert len(calls) == MAX_CALLS_PER_REPLY and time.process_time() - started < 1.0
    huge = '<tool_call>{"name": "diagnose", "arguments": {"paths": ["' + "a" * 2_000_000 + '"]}}</tool_call>'
    assert parse_tool_calls(huge, NAMES)[0] == []


def test_a_repetition_loop_is_degenerate_and_prose_is_not() -> None:
    assert replies.degenerate("Root cause: " + "the " * 2000)
    assert replies.degenerate("The run died of an OOM. " + "I am not sure. " * 60)
    assert replies.degenerate("Root cause:\n" + "- lower the batch size\n" * 200)
    prose = ("Root cause: the trainer ran out of GPU memory in the backward pass of step 52 [train.log:52]. "
             "Fix: lower actor.mb_spec.max_tokens_per_mb from 10240 to 2048, or enable gradient checkpointing; "
             "the rollout engine was fine (SGLang kept serving until the trainer died). Sources: [1] [2]. ") * 3
    assert not replies.degenerate(prose)
    assert not replies.degenerate("short " * 20)


def test_a_question_back_for_evidence() -> None:
    assert replies.asks_back("Could you please share the full training log?")
    assert replies.asks_back("I can't see the log. Could you paste the error message?")
    assert replies.asks_back("Please attach your config file so I can check it.")
    assert not replies.asks_back("Root cause: CUDA OOM while training. Fix: lower the micro-batch.")
    long_answer = "Root cause: CUDA OOM while training [train.log:52]. " * 20 + "Could you share your config?"
    assert not replies.asks_back(long_answer)


@pytest.mark.parametrize("text,category,against", [
    ("Root cause: an NCCL timeout between ranks killed the job.", "oom_training", "nccl"),
    ("Root cause: the reward collapsed to zero.", "oom_training", "reward"),
    ("Root cause: the trainer ran out of GPU memory. Fix: lower actor.mb_spec.max_tokens_per_mb.", "oom_training", ""),
    ("Root cause: CUDA OOM in SGLang's KV cache.", "oom_training", ""),  # both out of memory
    ("The NCCL watchdog timed out because rank 3 ran out of memory.", "oom_training", ""),  # names the tools' cause
    ("Root cause: NaN loss after step 10.", "nccl_timeout", "nan"),
    ("Root cause: unclear, more logs would help.", "oom_training", ""),
    ("Root cause: an NCCL timeout.", "config_constraint", ""),  # a loose category contradicts nothing
    ("I found no errors in the log; the run looks healthy.", "oom_training", "healthy"),  # ignores the result
    ("Root cause: CUDA OOM in the trainer; SGLang was fine.", "oom_training", ""),
])
def test_a_cause_against_the_tools(text: str, category: str, against: str) -> None:
    assert replies.contradiction(text, category) == against
