"""Scenarios of the answer pipeline (issue 17), through ``rlmedic ask`` and a second front door.

Each scenario is what a user would do: a question with files attached, offline (no model),
and the answer read as text. The second front door is the terminal chat driven through a
pipe (same Session, same engine), the Slack bot against the fake Web API for a thread, and
the scripted model server for a follow-up with a model.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES
from rlmedic.ui.cli import app

runner = CliRunner()
OOM_LOG = FIXTURES / "logs" / "signatures" / "cuda-oom.log"
HEALTHY = FIXTURES / "logs" / "scenarios" / "healthy_areal.log"
LEFTOVERS = FIXTURES / "gpu" / "a40_leftovers.json"
AREAL_CONFIG = FIXTURES / "configs" / "areal" / "base.yaml"


def ask(*args: str) -> dict:
    result = runner.invoke(app, ["ask", *args, "--offline", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def chat(lines: list[str], tmp_path: Path) -> str:
    """The terminal chat through a pipe, in-process (one Session for the whole conversation)."""
    from rlmedic.agent.session import Session
    from rlmedic.ui.chat import chat_loop

    out = io.StringIO()
    code = chat_loop(Session(offline=True, persist=True, prefix="chat"), stdin=io.StringIO("\n".join(lines) + "\n"),
                     stdout=out, interactive=False)
    assert code == 0
    return out.getvalue()


def fixes_text(answer: dict) -> str:
    return json.dumps(answer["fixes"])


# ---------------------------------------------------------------------- a healthy run


def test_a_healthy_run_is_an_answer_through_ask_and_chat(tmp_path: Path) -> None:
    data = ask("did this run finish ok?", "--attach", str(HEALTHY))
    text = data["answer"]
    assert re.match(r"The run (finished cleanly|looks healthy): no error", text)
    assert "What was checked: " in text and "1 file(s)" in text and re.search(r"clean (finish|shutdown)", text)
    assert "known issue" not in text.lower()  # nothing "possibly related" to a run that is fine
    assert not data["root_cause"]["text"] and not data["cards"]  # no invented failure, no card
    assert "preempt" not in text.lower() and "wandb" not in text.lower()
    out = chat([f"/attach {HEALTHY}", "did this run finish ok?", "/quit"], tmp_path)
    assert re.search(r"The run (finished cleanly|looks healthy)", out) and "preempt" not in out.lower()


# ---------------------------------------------------------------------- GPUs


def test_a_leftover_process_on_the_gpus_is_named_with_what_to_do(tmp_path: Path) -> None:
    data = ask("is anything left on the GPUs?", "--attach", str(LEFTOVERS))
    text = data["answer"]
    assert text.startswith("GPU check:")
    assert "pid 4121 (sglang)" in text and "leftover" in text and "kill 4121" in text
    assert "kill 4121" in str(data["fixes"][0]["action"])
    out = chat([f"/attach {LEFTOVERS}", "is anything left on the GPUs?", "/quit"], tmp_path)
    assert "pid 4121" in out and "kill 4121" in out


# ---------------------------------------------------------------------- checkpoints


def _areal_checkpoints(root: Path) -> Path:
    """An AReaL fileroot with saves at steps 49..199 whose newest save is damaged (empty weights)."""
    trial = root / "checkpoints" / "root" / "gsm8k-grpo" / "trial_1"
    for i, step in enumerate((49, 99, 149, 199)):
        save = trial / "default" / f"epoch{i // 2}epochstep{step % 100}globalstep{step}"
        save.mkdir(parents=True)
        (save / "config.json").write_text('{"model_type": "qwen2"}')
        (save / "model.safetensors").write_bytes(b"" if step == 199 else b"\x02" * 128)
    return root


def test_an_areal_checkpoint_folder_with_a_damaged_newest_save_gets_the_areal_plan(tmp_path: Path) -> None:
    root = _areal_checkpoints(tmp_path / "fileroot")
    data = ask("how do I resume this run?", "--attach", str(root))
    text = data["answer"]
    head = text.split("\n", 1)[0]
    assert "newest checkpoint (step 199" in head and "damaged" in head
    assert "Recovery plan: areal recovery (from-weights) from step 149" in text
    assert "recover.mode=auto" in text and "actor.path=" in text and "globalstep149" in text
    assert "--load" not in text and "--ckpt-step" not in text  # no slime advice for an AReaL run
    out = chat([f"/attach {root}", "how do I resume this run?", "/quit"], tmp_path)
    assert "from step 149" in out and "--load" not in out


# ---------------------------------------------------------------------- frameworks and what the question rules out


def test_the_same_question_gets_areal_keys_for_areal_and_slime_flags_for_slime() -> None:
    areal = ask("AReaL: sglang keeps running out of memory during rollout, what should I set?")
    slime = ask("slime: sglang keeps running out of memory during rollout, what should I set?")
    areal_keys = [f["key"] for f in areal["fixes"] if f["key"]]
    slime_keys = [f["key"] for f in slime["fixes"] if f["key"]]
    assert areal_keys and slime_keys
    assert not [k for k in areal_keys if k.startswith("--")], areal_keys
    assert all(k.startswith("--") for k in slime_keys), slime_keys
    assert "rollout.max_concurrent_rollouts" in areal["answer"] and "--sglang-mem-fraction-static" in slime["answer"]
    assert "--sglang-mem-fraction-static" not in areal["answer"].split("Sources:")[0]


def test_the_framework_keys_hold_in_the_chat_too(tmp_path: Path) -> None:
    out = chat(["AReaL: sglang keeps running out of memory during rollout, what should I set?", "/reset",
                "slime: sglang keeps running out of memory during rollout, what should I set?", "/quit"], tmp_path)
    areal, slime = out.split("conversation reset")
    assert "rollout.max_concurrent_rollouts" in areal and "--sglang-mem-fraction-static" not in areal.split("Sources:")[0]
    assert "--sglang-mem-fraction-static" in slime and "rollout.max_concurrent_rollouts" not in slime


def test_a_question_that_rules_out_memory_gets_no_oom_cards(tmp_path: Path) -> None:
    data = ask("memory is fine, but my GRPO run crashed during rollout with sglang")
    from rlmedic.knowledge.cards import card_by_id

    assert data["cards"]
    assert not [c for c in data["cards"] if card_by_id(c).category.startswith("oom_")], data["cards"]
    assert "ruled it out: oom_generation, oom_training, oom_weight_update" in data["answer"]
    out = chat(["memory is fine, but my GRPO run crashed during rollout with sglang", "/quit"], tmp_path)
    assert "ruled it out" in out and "CUDA out of memory while SGLang generates" not in out


# ---------------------------------------------------------------------- follow-ups


def test_a_follow_up_in_a_thread_sees_the_earlier_files_and_answers_the_new_question(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    shutil.copy(OOM_LOG, log)
    first = ask("why did my run die?", "--attach", str(log), "--thread", "t-1")
    assert first["category"] == "oom_training" and first["tool_calls"]
    # the follow-up names no file: the thread's log is still read (its evidence reused, not re-run)
    again = ask("what exactly should I change in my config?", "--thread", "t-1")
    assert again["answer"] != first["answer"]
    assert again["category"] == "oom_training" and again["root_cause"]["evidence"] == first["root_cause"]["evidence"]
    assert again["answer"].startswith("What to change")
    assert "attach the config you launch with" in again["answer"]  # the file it needs and does not have
    assert again["tool_calls"] == []
    # the config arrives: the same thread now gives the exact edit as a diff
    config = tmp_path / "config.yaml"
    shutil.copy(AREAL_CONFIG, config)
    third = ask("what exactly should I change in my config?", "--attach", str(config), "--thread", "t-1")
    assert third["config_diff"] and "max_tokens_per_mb: 2048" in third["config_diff"]
    assert third["fixes"][0]["key"] == "actor.mb_spec.max_tokens_per_mb"
    assert "attach the config" not in third["answer"]
    # another thread knows nothing of it
    other = ask("what exactly should I change in my config?", "--thread", "t-2")
    assert not other["root_cause"]["text"]


def test_a_follow_up_with_the_model_can_read_the_earlier_attachment(tmp_path: Path) -> None:
    from fake_openai import FakeOpenAI, Reply, tool

    log = tmp_path / "train.log"
    shutil.copy(OOM_LOG, log)
    replies = [Reply(calls=[tool("diagnose", paths=[str(log)])]), Reply(content="OOM in actor_train."),
               Reply(calls=[tool("excerpt", paths=[str(log)], max_lines=20)]), Reply(content="Lower max_tokens_per_mb.")]
    with FakeOpenAI(replies) as server:
        first = runner.invoke(app, ["ask", "why?", "--attach", str(log), "--thread", "m-1", "--base-url", server.base_url,
                                    "--json"])
        second = runner.invoke(app, ["ask", "show me the lines before the error", "--thread", "m-1",
                                     "--base-url", server.base_url, "--json"])
    assert first.exit_code == 0 and second.exit_code == 0, second.output
    data = json.loads(second.stdout)
    assert data["engine"] == "llm"
    assert data["tool_calls"] == [{"name": "excerpt", "args": {"paths": [str(log)], "max_lines": 20}, "ok": True}]
    # the model was told which files the thread has and what the earlier turn found
    prompt = json.dumps(server.requests[-2]["messages"])
    assert str(log) in prompt and "oom_training" in prompt
    assert data["category"] == "oom_training"  # grounded in the thread's evidence too


def test_a_slack_thread_follow_up_reads_the_files_of_the_thread(tmp_path: Path) -> None:
    from fake_slack import BOT_TOKEN, FakeSlack
    from rlmedic.agent.session import SessionStore
    from rlmedic.ui.slack_app import SlackBot, SlackSettings

    fake = FakeSlack().start()
    try:
        bot = SlackBot(SlackSettings(bot_token=BOT_TOKEN, offline=True, api_url=fake.api_url),
                       store=SessionStore(tmp_path / "sessions"))
        bot.handle({"channel": "C1", "user": "U1", "ts": "100.1", "text": "<@UBOT> why did it die?",
                    "files": [fake.serve_file("train.log", OOM_LOG.read_bytes())]})
        bot.on_message({"channel": "C1", "user": "U1", "ts": "100.2", "thread_ts": "100.1",
                        "text": "what exactly should I change in my config?"})
        answers = [json.dumps(c.args) for c in fake.of("chat.update")]
    finally:
        fake.stop()
    final = [a for a in answers if "max_tokens_per_mb" in a]
    assert len(final) >= 2  # the follow-up, with no file of its own, still answers from the thread's log
    assert "attach the config" in answers[-1]


# ---------------------------------------------------------------------- a log whose exception no signature knows


def test_an_unknown_exception_is_answered_from_its_own_text(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "[AReaL] 20251122-10:00:00.000 INFO: step 3 done\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/areal/areal/workflow/rlvr.py", line 88, in arun_episode\n'
        '    answer = sample["solution_text_v2"]\n'
        "KeyError: 'solution_text_v2'\n"
    )
    data = ask("why did my run die?", "--attach", str(log))
    assert "solution_text_v2" in data["answer"].split("Sources:")[0]
    assert data["root_cause"]["evidence"] and data["root_cause"]["evidence"][0].startswith(str(log))
    out = chat([f"/attach {log}", "why did my run die?", "/quit"], tmp_path)
    assert "solution_text_v2" in out.split("Sources:")[0]


# ---------------------------------------------------------------------- redaction at the front door


def test_what_leaves_a_front_door_is_redacted_even_when_the_model_wrote_it(tmp_path: Path) -> None:
    from fake_openai import FakeOpenAI, Reply

    secret = "hf_abcdefghijklmnopqrstuvwxyz0123456789AB"
    with FakeOpenAI([Reply(content=f"Set HF_TOKEN={secret} and retry.")]) as server:
        streamed = runner.invoke(app, ["ask", "why?", "--base-url", server.base_url])
        as_json = runner.invoke(app, ["ask", "why again?", "--base-url", server.base_url, "--json"])
    assert streamed.exit_code == 0 and as_json.exit_code == 0, streamed.output
    assert "retry" in streamed.stdout and secret not in streamed.stdout
    assert "retry" in as_json.stdout and secret not in as_json.stdout


def test_a_follow_up_on_the_web_page_answers_from_the_earlier_upload(tmp_path: Path) -> None:
    """The web front door (gradio_client): a second question with no file is answered from the first upload."""
    import socket

    from gradio_client import Client, handle_file

    from rlmedic.ui.web import WebSettings, launch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo, sessions = launch(WebSettings(offline=True, uploads_root=tmp_path / "uploads"), port=port, block=False)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        client.predict({"text": "why did my run die?", "files": [handle_file(str(OOM_LOG))]}, [], api_name="/chat")
        _box, history, diag, *_ = client.predict({"text": "what exactly should I change in my config?", "files": []},
                                                  [], api_name="/chat")
    finally:
        demo.close()
        sessions.close_all()
    last = str(history[-1].get("content"))
    assert "What to change" in last and "max_tokens_per_mb" in last
    assert "attach the config you launch with" in last
    assert "cuda-oom.log" in diag


def test_a_slack_thread_reaches_the_model_with_one_memory(tmp_path: Path, monkeypatch) -> None:
    """With a model, a thread's earlier question reaches it once (its own memory), not again in the text."""
    from fake_openai import FakeOpenAI, Reply, tool
    from fake_slack import BOT_TOKEN, FakeSlack
    from rlmedic.agent.session import SessionStore
    from rlmedic.ui.slack_app import SlackBot, SlackSettings

    first_question = "why did the run on node seven die?"
    fake = FakeSlack().start()
    try:
        with FakeOpenAI([Reply(calls=[tool("diagnose", paths=["PLACEHOLDER"])]), Reply(content="OOM in training."),
                         Reply(content="Lower actor.mb_spec.max_tokens_per_mb.")]) as server:
            monkeypatch.setenv("RLMEDIC_BASE_URL", server.base_url)
            store = SessionStore(tmp_path / "sessions")
            bot = SlackBot(SlackSettings(bot_token=BOT_TOKEN, offline=False, api_url=fake.api_url), store=store)
            log_path = store.files_dir("C1:200.1") / "train.log"  # where the bot saves the thread's file
            server.replies[0] = Reply(calls=[tool("diagnose", paths=[str(log_path)])])
            bot.handle({"channel": "C1", "user": "U1", "ts": "200.1", "text": f"<@UBOT> {first_question}",
                        "files": [fake.serve_file("train.log", OOM_LOG.read_bytes())]})
            bot.on_message({"channel": "C1", "user": "U1", "ts": "200.2", "thread_ts": "200.1",
                            "text": "and what should I change?"})
            last = json.dumps(server.requests[-1]["messages"])
    finally:
        fake.stop()
    assert last.count(first_question) == 1
    assert "and what should I change?" in last and "oom_training" in last  # the earlier finding, told once


def test_chat_continues_a_thread_started_with_ask(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    shutil.copy(OOM_LOG, log)
    ask("why did my run die?", "--attach", str(log), "--thread", "shared-1")
    result = runner.invoke(app, ["chat", "--offline", "--thread", "shared-1"],
                           input="what exactly should I change in my config?\n/quit\n")
    assert result.exit_code == 0, result.output
    assert "What to change" in result.stdout and "max_tokens_per_mb" in result.stdout
    assert "> diagnose" not in result.stdout  # the thread's evidence, not a new investigation


def test_a_config_question_is_answered_from_the_config_alone(tmp_path: Path) -> None:
    clean = ask("is my config ok?", "--attach", str(AREAL_CONFIG))
    assert clean["answer"].startswith("No problem found in what was checked (config)")
    assert not clean["cards"] and "attach" not in clean["answer"]
    broken = ask("is my config ok?", "--attach", str(FIXTURES / "configs" / "areal" / "mb_tokens.yaml"))
    assert "From the config: actor.mb_spec.max_tokens_per_mb = 1536" in broken["answer"]
    assert broken["fixes"][0]["key"] == "actor.mb_spec.max_tokens_per_mb" and broken["fixes"][0]["new"] == 2048
