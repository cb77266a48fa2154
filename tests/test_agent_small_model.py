"""Small-model behaviours, replayed: each ``tests/scenarios/small_model/*.json`` is one.

A scenario is a recorded transcript of what a 7-8B model served by SGLang (or the server
itself) did: the replies in order (content, tool calls with their raw argument text,
``finish_reason``, a stream that closes early, a stall, an HTTP status with
``Retry-After``), plus what rlmedic must make of it. The fake server replays the replies
over real HTTP/SSE; the engine runs unchanged. Add a behaviour by adding a file.

Expectations (all optional): ``engine``, ``category``, ``root_cause``/``fixes``/``citations``
(non-empty), ``notices`` (substrings of some notice), ``answer_contains`` /
``no_notice`` (a substring no notice may hold), ``answer_excludes``, ``answer_starts``, ``summary_contains``, ``stream_excludes`` / ``stream_starts``
(streamed text), ``sent_excludes`` (anything sent
back to the model), ``tools_ok`` (tools that ran successfully), ``no_tool_arg`` (text no
tool call's arguments may contain), ``requests`` (chat requests made), ``max_seconds``,
``last_tool_message_under`` (characters of the longest tool output in the last request),
``later_requests_without_tools`` (the requests after the first send no tool definitions).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES
from fake_openai import FakeOpenAI, replies_from
from rlmedic.agent.engine import answer_events
from rlmedic.agent.events import Final, Notice, TextDelta, ToolFinished, ToolStarted
from rlmedic.agent.llm import LLMConfig
from rlmedic.tools.registry import ToolContext

SCENARIOS = sorted((Path(__file__).parent / "scenarios" / "small_model").glob("*.json"))
LOG = FIXTURES / "logs" / "signatures" / "cuda-oom.log"


def test_every_behaviour_of_the_issue_has_a_scenario() -> None:
    names = {p.stem for p in SCENARIOS}
    assert len(names) >= 15
    for required in ("wrong-argument-type", "missing-argument", "cut-tool-arguments", "runaway-stream",
                     "invented-key", "hermes-text-call", "cut-answer", "stream-closed-early", "think-leak",
                     "stalled-server", "retry-after-429"):
        assert required in names


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = json.loads(path.read_text(encoding="utf-8"))
    work = tmp_path / "run"
    work.mkdir()
    attachments = []
    for name in scenario.get("attach", []):
        shutil.copy(LOG, work / name)
        attachments.append(work / name)
    for key, value in scenario.get("env", {}).items():
        monkeypatch.setenv(key, value)
    fill = {"dir": str(work), "log": str(attachments[0]) if attachments else ""}
    expect = scenario["expect"]
    with FakeOpenAI(replies_from(scenario["replies"], fill)) as server:
        ctx = ToolContext.for_roots([str(p) for p in attachments])
        started = time.monotonic()
        events = list(answer_events(scenario["question"], attachments=attachments, ctx=ctx,
                                    config=LLMConfig.resolve(base_url=server.base_url)))
        seconds = time.monotonic() - started
    assert isinstance(events[-1], Final), events[-1]
    answer = events[-1].answer
    notices = [e.text for e in events if isinstance(e, Notice)] + list(answer.notices)
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    finished = [e for e in events if isinstance(e, ToolFinished)]
    sent = json.dumps(server.requests)

    if "engine" in expect:
        assert answer.engine == expect["engine"], notices
    if "category" in expect:
        assert answer.category == expect["category"]
    for part in ("root_cause", "fixes", "citations"):
        if expect.get(part):
            assert getattr(answer, part), f"{part} is empty"
    for text in expect.get("notices", []):
        assert any(text in n for n in notices), (text, notices)
    if "no_notice" in expect:  # e.g. the safety net did not have to stand in for an unparsed call
        assert not any(expect["no_notice"] in n for n in notices), notices
    for text in expect.get("answer_contains", []):
        assert text in answer.answer, answer.answer
    for text in expect.get("answer_excludes", []):
        assert text not in answer.answer, answer.answer
    for text in expect.get("stream_excludes", []):
        assert text not in streamed, streamed
    if "answer_starts" in expect:
        assert answer.answer.startswith(expect["answer_starts"]), answer.answer
    if "stream_starts" in expect:
        assert streamed.startswith(expect["stream_starts"]), streamed
    if "summary_contains" in expect:
        assert expect["summary_contains"] in answer.summary.lower(), answer.summary
    for text in expect.get("sent_excludes", []):
        # the first request carries only the question; later ones carry the model's earlier turns
        assert all(text not in json.dumps(r.get("messages", [])) for r in server.requests[1:]), text
    if "tools_ok" in expect:
        assert [f.name for f in finished if f.ok][: len(expect["tools_ok"])] == expect["tools_ok"]
    if "no_tool_arg" in expect:
        started_args = [json.dumps(e.args) for e in events if isinstance(e, ToolStarted)]
        assert all(expect["no_tool_arg"] not in a for a in started_args), started_args
    if "requests" in expect:
        assert len(server.requests) == expect["requests"]
    if "last_tool_message_under" in expect:
        last = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
        assert last and max(len(str(m["content"])) for m in last) < expect["last_tool_message_under"]
    if expect.get("later_requests_without_tools"):
        assert "tools" in server.requests[0] and all("tools" not in r for r in server.requests[1:])
    if "max_seconds" in expect:
        assert seconds < expect["max_seconds"], seconds
    # every generation is bounded (langchain-openai sends max_tokens as max_completion_tokens)
    assert all("max_tokens" in r or "max_completion_tokens" in r for r in server.requests)


def test_every_request_is_bounded_by_max_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMEDIC_MAX_TOKENS", "321")
    path = tmp_path / "train.log"
    shutil.copy(LOG, path)
    rows: list[dict[str, Any]] = [{"calls": [{"name": "diagnose", "arguments": {"paths": [str(path)]}}]},
                                  {"content": "Root cause: OOM."}]
    with FakeOpenAI(replies_from(rows)) as server:
        list(answer_events("why?", attachments=[path], ctx=ToolContext.for_roots([str(path)]),
                           config=LLMConfig.resolve(base_url=server.base_url)))
    assert server.requests and all(r.get("max_tokens") == 321 or r.get("max_completion_tokens") == 321
                                   for r in server.requests)


def test_the_terminal_prints_the_model_text_then_what_the_tools_established(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rlmedic.ui.cli import app

    log = tmp_path / "train.log"
    shutil.copy(LOG, log)
    rows = [{"calls": [{"name": "diagnose", "arguments": {"paths": [str(log)]}}]},
            {"content": "Root cause: OOM. Set foo_bar=3."}]
    with FakeOpenAI(replies_from(rows)) as server:
        result = CliRunner().invoke(app, ["ask", "why did it die?", "--attach", str(log), "--base-url", server.base_url,
                                          "--timeout", "60"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    # the model's text, then what rlmedic composes without the model (never less than offline)
    assert out.index("Set foo_bar=3") < out.index("What rlmedic established without the model:")
    assert "From the log:" in out and "max_tokens_per_mb" in out and "Sources:" in out
    assert f"{log.name}:" in out  # the evidence line
    assert out.count("Set foo_bar=3") == 1  # the model's prose is printed once
    assert "unverified" in result.stderr and "foo_bar=3" in result.stderr


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    from rlmedic.agent.llm import retry_after

    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "1500"}) == 1.5
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after({"retry-after": "soon"}) is None and retry_after({}) is None


def test_a_busy_server_probe_is_retried_then_answers(tmp_path: Path) -> None:
    from rlmedic.agent.llm import probe

    waits: list[float] = []
    with FakeOpenAI(models_status=429) as server:
        original = server.models_status

        def sleep(seconds: float) -> None:  # the server recovers while rlmedic waits
            waits.append(seconds)
            server.models_status = 200

        server.models_headers = {"Retry-After": "1"}
        assert original == 429
        assert probe(LLMConfig.resolve(base_url=server.base_url), sleep=sleep) == server.model
    assert waits == [1.0]


def test_the_offline_answer_is_printed_once_without_a_second_grounded_block(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rlmedic.ui.cli import app

    log = tmp_path / "train.log"
    shutil.copy(LOG, log)
    result = CliRunner().invoke(app, ["ask", "why did it die?", "--attach", str(log), "--offline"])
    assert result.exit_code == 0, result.output
    assert "(from the tools)" not in result.stdout and result.stdout.count("Sources:") == 1


def test_a_model_answer_never_has_less_than_the_offline_answer(tmp_path: Path) -> None:
    """Structured parts with a model = the offline engine's on the same evidence; the model adds prose."""
    from rlmedic.agent.offline import answer_offline

    log = tmp_path / "train.log"
    shutil.copy(LOG, log)
    rows = [{"calls": [{"name": "diagnose", "arguments": {"paths": [str(log)]}}]}, {"content": "It ran out of memory."}]
    with FakeOpenAI(replies_from(rows)) as server:
        events = list(answer_events("why did my run die?", attachments=[log], ctx=ToolContext.for_roots([str(log)]),
                                    config=LLMConfig.resolve(base_url=server.base_url)))
    llm = events[-1].answer
    offline = answer_offline("why did my run die?", attachments=[log], ctx=ToolContext.for_roots([str(log)]))
    assert llm.engine == "llm" and llm.answer == "It ran out of memory."
    assert llm.category == offline.category and llm.root_cause == offline.root_cause
    assert [str(f) for f in offline.fixes] == [str(f) for f in llm.fixes]
    assert {str(c) for c in offline.citations} <= {str(c) for c in llm.citations}
    # the whole offline answer: its short text and the rest behind it (Answer.more)
    assert llm.grounded.strip() == (offline.answer + ("\n" + offline.more if offline.more else "")).strip()
    assert llm.to_dict()["grounded"] == llm.grounded  # JSON carries it too


def test_a_named_model_is_used_when_the_server_has_no_model_list(tmp_path: Path) -> None:
    """--model given and /models answering 404 (some gateways): the named model answers, not offline."""
    log = tmp_path / "train.log"
    shutil.copy(LOG, log)
    rows = [{"calls": [{"name": "diagnose", "arguments": {"paths": [str(log)]}}]}, {"content": "Root cause: CUDA OOM."}]
    with FakeOpenAI(replies_from(rows), models_status=404) as server:
        events = list(answer_events("why?", attachments=[log], ctx=ToolContext.for_roots([str(log)]),
                                    config=LLMConfig.resolve(base_url=server.base_url, model="my-model")))
        assert server.requests and server.requests[0]["model"] == "my-model"
    assert events[-1].answer.engine == "llm"
    with FakeOpenAI(models_status=404) as server:  # without --model there is nothing to call
        events = list(answer_events("why?", config=LLMConfig.resolve(base_url=server.base_url)))
    assert events[-1].answer.engine == "offline"


@pytest.mark.parametrize("json_mode", [False, True])
def test_an_error_event_in_the_stream_ends_in_the_offline_answer_in_both_modes(tmp_path: Path, json_mode: bool) -> None:
    from typer.testing import CliRunner

    from rlmedic.ui.cli import app

    log = tmp_path / "train.log"
    shutil.copy(LOG, log)
    rows = [{"calls": [{"name": "diagnose", "arguments": {"paths": [str(log)]}}]},
            {"content": "Root cause", "error_event": {"message": "context length exceeded", "code": 400}, "error_after": 1}]
    with FakeOpenAI(replies_from(rows)) as server:
        result = CliRunner().invoke(app, ["ask", "why did it die?", "--attach", str(log), "--base-url", server.base_url,
                                          *(["--json"] if json_mode else [])])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    if json_mode:
        answer = json.loads(result.stdout)
        assert answer["engine"] == "offline" and any("context length exceeded" in n for n in answer["notices"])
    else:
        assert "context length exceeded" in result.stderr and "From the log:" in result.stdout


def test_plain_mode_marks_claims_inline_and_json_leads_with_the_tools_root(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rlmedic.ui.cli import app

    log = tmp_path / "train.log"
    shutil.copy(LOG, log)
    rows = [{"calls": [{"name": "diagnose", "arguments": {"paths": [str(log)]}}]},
            {"content": "Root cause: an NCCL timeout between ranks. Set nccl_timeout_s=7200."}]
    with FakeOpenAI(replies_from(rows)) as server:
        plain = CliRunner().invoke(app, ["ask", "why did it die?", "--attach", str(log), "--base-url", server.base_url])
    with FakeOpenAI(replies_from(rows)) as server:
        as_json = CliRunner().invoke(app, ["ask", "why did it die?", "--attach", str(log), "--base-url", server.base_url,
                                           "--json"])
    assert plain.exit_code == 0 and as_json.exit_code == 0, plain.output + as_json.output
    out = plain.stdout
    assert out.startswith("The model's explanation below contradicts")
    assert out.index("Root cause (from the tools") < out.index("NCCL timeout")
    assert "nccl_timeout_s=7200 [unverified]" in out  # marked inline in plain mode too
    answer = json.loads(as_json.stdout)
    assert "out of memory" in answer["summary"].lower() and "nccl" not in answer["summary"].lower()
    assert answer["answer"].startswith("The model's explanation below contradicts")


def test_a_huge_tool_argument_is_neither_parsed_nor_echoed(tmp_path: Path) -> None:
    """A 4 MB argument: refused at the wire, a short error goes back to the model, nothing big is shown or kept."""
    log = tmp_path / "train.log"
    shutil.copy(LOG, log)
    huge = json.dumps({"paths": ["/x/" + "a" * 4_000_000]})
    rows = [{"calls": [{"name": "diagnose", "arguments": huge}]}, {"content": "Root cause: CUDA OOM while training."}]
    started = time.monotonic()
    with FakeOpenAI(replies_from(rows)) as server:
        events = list(answer_events("why?", attachments=[log], ctx=ToolContext.for_roots([str(log)]),
                                    config=LLMConfig.resolve(base_url=server.base_url)))
        sent_back = sum(len(json.dumps(r["messages"])) for r in server.requests[1:])
    assert time.monotonic() - started < 30
    assert sent_back < 100_000, sent_back
    assert all(len(json.dumps(e.to_dict(), default=str)) < 100_000 for e in events)
    answer = events[-1].answer
    assert answer.category == "oom_training"
    assert any("exceeded 64000 characters" in n for n in answer.notices + [e.text for e in events if hasattr(e, "text")])


def test_tool_errors_never_echo_a_huge_argument(tmp_path: Path) -> None:
    """The registry (behind the loop and the MCP server) answers a 5 MB path with one short error."""
    from rlmedic.tools.registry import MAX_ERROR_CHARS, REGISTRY

    ctx = ToolContext.for_roots([str(tmp_path)])
    for args in ({"paths": [str(tmp_path / ("b" * 5_000_000))]}, {"paths": ["/etc/" + "c" * 50_000]}):
        result = REGISTRY.call("diagnose", args, ctx)
        assert not result.ok and len(result.error) <= MAX_ERROR_CHARS + 80, len(result.error)
        assert len(json.dumps(result.to_dict())) < 20_000
