"""Answers derived from the evidence (issue 26): the specific before the generic, every time.

Each test is what a new user did, through ``ask`` (plain and ``--json``), the piped terminal chat,
the web app's API and the Slack bot: an empty log, an OOM with its config, a follow-up about
resuming, an AReaL run that must not get another framework's fixes, a reward that fell to zero
while responses ran into the length cap, the team's own runbook next to an attached log, and
the length of the answer.
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
ANSWERS = FIXTURES / "answers"
GEN_OOM = ANSWERS / "areal_generation_oom.log"
CONFIG = ANSWERS / "areal_config.yaml"
TRAIN_OOM = FIXTURES / "logs" / "signatures" / "cuda-oom.log"
LENGTH_CAP = FIXTURES / "logs" / "scenarios" / "length_cap_areal.log"
BASE_CONFIG = FIXTURES / "configs" / "areal" / "base.yaml"


def ask(*args: str) -> dict:
    result = runner.invoke(app, ["ask", *args, "--offline", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def chat(lines: list[str]) -> str:
    from rlmedic.agent.session import Session
    from rlmedic.ui.chat import chat_loop

    out = io.StringIO()
    assert chat_loop(Session(offline=True, persist=True, prefix="chat"), stdin=io.StringIO("\n".join(lines) + "\n"),
                     stdout=out, interactive=False) == 0
    return out.getvalue()


def short(data: dict) -> str:
    """The answer the user reads first, without its sources block."""
    return data["answer"].split("\nSources:")[0]


# ---------------------------------------------------------------------- 1. nothing to go on


def test_an_empty_log_gets_nothing_to_diagnose_and_no_invented_cause(tmp_path: Path) -> None:
    empty = tmp_path / "train.log"
    empty.write_text("")
    data = ask("why did my run die?", "--attach", str(empty))
    text = data["answer"]
    assert text.startswith("Nothing to diagnose here: ") and "is empty" in text
    assert "What was checked: " in text and "attach the training log" in text
    assert data["fixes"] == [] and data["cards"] == [] and data["category"] == ""
    assert "playbook)" not in text and "mem_fraction" not in text  # no cause taken from a card
    out = chat([f"/attach {empty}", "why did my run die?", "/quit"])
    assert "Nothing to diagnose here" in out and "mem_fraction" not in out


def test_an_unrelated_file_is_nothing_to_diagnose_too(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("Lunch order for Friday: two pizzas, one salad.\nRemember the offsite on Tuesday.\n")
    data = ask("why did my run die?", "--attach", str(notes))
    assert data["answer"].startswith("Nothing to diagnose here: ") and data["fixes"] == []


# ---------------------------------------------------------------------- 2. the error line is the evidence


def test_the_marked_error_line_leads_the_evidence_with_at_most_two_lines_of_context(tmp_path: Path) -> None:
    data = ask("why did my run die?", "--attach", str(TRAIN_OOM))
    lines = data["answer"].splitlines()
    at = lines.index("Evidence:")
    shown = [line for line in lines[at + 1:] if line.startswith("  ") and not re.match(r"  \d+\. ", line)]
    shown = shown[:next((i for i, line in enumerate(shown) if not line.startswith(("  >", "    "))), len(shown))]
    assert shown[0].startswith("  > ") and "out of memory" in shown[0].lower()
    assert 1 <= len(shown) <= 3
    root = data["root_cause"]["evidence"][0]
    assert shown[0].split()[1] == f"{Path(root.rsplit(':', 1)[0]).name}:{root.rsplit(':', 1)[1]}"


# ---------------------------------------------------------------------- 3. the root's own setting, from the config


def test_with_its_config_the_roots_own_settings_lead_as_exact_edits_and_unrelated_rules_follow(tmp_path: Path) -> None:
    data = ask("why did my run die?", "--attach", str(GEN_OOM), "--attach", str(CONFIG))
    assert data["category"] == "oom_generation"
    keys = [f["key"] for f in data["fixes"]]
    share = keys.index("sglang.mem_fraction_static")
    fix = data["fixes"][share]
    assert fix["op"] == "set" and fix["old"] == 0.9 and fix["new"] < 0.9  # from the value in effect
    assert keys[0] == "rollout.max_concurrent_rollouts" and "max_concurrent_rollouts: 192" in data["config_diff"]
    # the timeout rule is a real config problem, but not this failure's: it comes after the root's settings
    assert keys.index("rollout.request_timeout") > share
    assert "Your config: rollout.max_concurrent_rollouts = 256" in data["answer"]


def test_a_fix_whose_value_is_already_in_effect_is_dropped(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(BASE_CONFIG.read_text().replace("gradient_checkpointing: false", "gradient_checkpointing: true"))
    data = ask("why did my run die?", "--attach", str(TRAIN_OOM), "--attach", str(config))
    assert not [f for f in data["fixes"] if f["key"] == "actor.gradient_checkpointing"]
    assert all(f["old"] != f["new"] for f in data["fixes"] if f["op"] == "set")


# ---------------------------------------------------------------------- 4. follow-ups


def test_a_follow_up_about_resuming_answers_the_new_question_and_refers_to_the_first_in_one_line(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    shutil.copy(TRAIN_OOM, log)
    first = ask("why did my run die?", "--attach", str(log), "--thread", "resume-1")
    again = ask("and how do I resume from the last good checkpoint?", "--thread", "resume-1")
    text = short(again)
    assert text != short(first)
    assert text.count("Earlier in this thread:") == 1 and first["root_cause"]["text"][:40] in text
    assert "Evidence:" not in text  # the first answer's sections are not repeated
    assert "attach the checkpoint folder" in text
    assert re.search(r"recover|resume", text.split("Earlier in this thread")[0], re.I)
    assert not [f for f in again["fixes"] if f["key"] == "actor.mb_spec.max_tokens_per_mb"]


def test_a_follow_up_asking_what_to_change_leads_with_the_fixes_not_the_known_issue_again(tmp_path: Path) -> None:
    """The first answer told the known upstream issue and why it happens; "what should I change first?" in the
    same thread answers with the edits, the known issue's paragraph kept for --verbose (it was repeated whole)."""
    log = tmp_path / "train.log"
    shutil.copy(FIXTURES / "logs" / "scenarios" / "latin1_oom.log", log)
    first = ask("why did my run die?", "--attach", str(log), "--thread", "fixes-1")
    assert short(first).startswith("Known issue:") and "Cause:" in short(first)
    again = ask("what should I change first?", "--thread", "fixes-1")
    text = short(again)
    assert text.startswith("What to change"), text[:200]
    assert "Cause:" not in text and "Why it happens" not in text  # told in the first answer
    assert text.count("Earlier in this thread:") == 1
    assert "Cause:" in again["more"]  # still there, for --verbose
    assert again["fixes"] and again["fixes"][0]["key"] == first["fixes"][0]["key"]
    bare = ask("why?", "--thread", "fixes-1")  # a bare "why?" asks for the explanation: it leads again
    assert short(bare).startswith("Known issue:")


def test_a_follow_up_keeps_the_framework_the_first_answer_learned_from_a_known_issue(tmp_path: Path) -> None:
    """The log names no framework; its error is a record only verl has, which made the first answer verl's. A
    follow-up on another subject (resuming) stays verl's: it gave slime's --load advice before."""
    log = tmp_path / "train.log"
    shutil.copy(FIXTURES / "logs" / "scenarios" / "latin1_oom.log", log)
    first = ask("why did my run die?", "--attach", str(log), "--thread", "fw-1")
    assert "verl" in short(first)
    again = ask("how do I resume?", "--thread", "fw-1")
    keys = [f["key"] for f in again["fixes"] if f["key"]]
    assert keys and all(k.split(".")[0] in ("trainer", "actor_rollout_ref") for k in keys), keys  # verl's
    assert "--load" not in short(again) and "[slime]" not in short(again)


# ---------------------------------------------------------------------- 5. other frameworks, shared words


def test_an_areal_run_gets_no_fix_or_known_issue_of_another_framework(tmp_path: Path) -> None:
    data = ask("why did my run die?", "--attach", str(GEN_OOM), "--attach", str(CONFIG))
    for fix in data["fixes"]:
        assert not fix["key"].startswith(("--", "actor_rollout_ref.", "trainer.")), fix
        assert fix["framework"] in ("", "areal", "generic"), fix
    cited = [c["ref"] for c in data["citations"] if c["kind"] == "issue"]
    assert not [r for r in cited if r.split("#")[0].split("/")[-1].lower() in ("verl", "slime", "trl")], cited
    assert "upgrade verl" not in data["answer"].lower()


def test_a_pasted_verl_traceback_gets_verl_fixes_though_it_never_says_verl() -> None:
    """The framework comes from names only verl uses (a Ray actor class, its config keys), not the word."""
    question = ("rollout dies with\n(WorkerDict pid=60511) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                "2.00 GiB\nactor_rollout_ref.rollout.gpu_memory_utilization=0.9 use_remove_padding=True")
    data = ask(question)
    keyed = [f for f in data["fixes"] if f["key"]]
    assert keyed and all(f["key"].startswith(("actor_rollout_ref.", "data.", "trainer.")) for f in keyed), keyed
    assert all(f["framework"] in ("", "verl", "generic") for f in data["fixes"]), data["fixes"]


def test_a_described_host_memory_leak_leads_with_what_the_user_described_not_a_gpu_card() -> None:
    data = ask("the RSS of my rollout controller keeps growing every step until the node runs out of CPU memory")
    text = short(data)
    assert text.startswith("From the problem you describe: Host memory grows"), text
    assert "CUDA out of memory" not in text and "mem_fraction_static" not in text
    assert "tracemalloc" in text  # the host-memory card's way to find what grows


def test_a_known_issue_needs_its_error_in_the_evidence_not_a_shared_word(tmp_path: Path) -> None:
    data = ask("the weight update in my areal run is slow, what can I do?")
    assert "known issue" not in data["answer"].lower() and "known issue" not in data["more"].lower()


# ---------------------------------------------------------------------- 6. metrics are evidence


def test_zero_reward_with_responses_at_the_cap_names_the_cap_its_value_and_what_to_change(tmp_path: Path) -> None:
    data = ask("why did the reward drop to zero?", "--attach", str(LENGTH_CAP), "--attach", str(BASE_CONFIG))
    text = short(data)
    assert data["category"] == "reward_collapse"
    assert re.search(r"seq_len/avg rose from 600 to 1536 at step 8", text)
    assert "gconfig.max_new_tokens = 1024" in text
    first_fix = data["fixes"][0]
    assert first_fix["key"] == "gconfig.max_new_tokens" and "now 1024" in first_fix["action"]
    assert not [f for f in data["fixes"] if f["key"].startswith("--")]  # slime's reward-collapse flags are not AReaL's


# ---------------------------------------------------------------------- 7. the team's own docs stay in play


RUNBOOK = """# Team runbook

## Trainer out of memory in actor_train

When the actor runs out of CUDA memory in actor_train (torch.OutOfMemoryError in loss.backward), our
cluster rule is TEAMRULE-42: halve actor.mb_spec.max_tokens_per_mb, keep gradient checkpointing on, and
post the job id in #train-oncall before relaunching.
"""


def test_a_team_doc_that_matches_the_roots_evidence_is_in_the_answer_with_a_log(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "runbook.md").write_text(RUNBOOK)
    index = tmp_path / "index"
    assert runner.invoke(app, ["index", str(docs), "--index-dir", str(index)]).exit_code == 0
    result = runner.invoke(app, ["ask", "why did my run die?", "--attach", str(TRAIN_OOM), "--offline", "--json",
                                 "--index-dir", str(index)])
    data = json.loads(result.stdout)
    assert data["category"] == "oom_training"
    assert any(c["kind"] == "doc" and c["ref"].endswith("runbook.md") for c in data["citations"])
    assert "TEAMRULE-42" in data["answer"] + data["more"]


# ---------------------------------------------------------------------- 8. short by default


def test_one_root_is_about_forty_lines_and_the_rest_is_behind_verbose() -> None:
    data = ask("why did my run die?", "--attach", str(GEN_OOM), "--attach", str(CONFIG))
    assert len(data["answer"].splitlines()) <= 45
    assert len(re.findall(r"(?m)^  \d+\. ", short(data))) <= 5
    assert data["more"]
    plain = runner.invoke(app, ["ask", "why did my run die?", "--attach", str(GEN_OOM), "--attach", str(CONFIG),
                                "--offline"])
    verbose = runner.invoke(app, ["ask", "why did my run die?", "--attach", str(GEN_OOM), "--attach", str(CONFIG),
                                  "--offline", "--verbose"])
    assert "later error(s)" not in plain.stdout and "later error(s)" in verbose.stdout  # the cascade, folded
    assert "--verbose" in plain.stderr


def test_the_web_page_folds_the_rest_of_the_answer() -> None:
    from rlmedic.agent.events import Answer
    from rlmedic.ui.render import answer_markdown

    text = answer_markdown(Answer(answer="From the log: it broke.", more="Background (playbook): why.\nAlso check: x."))
    assert "<details><summary>More (2 lines" in text and "Background (playbook): why." in text


# ---------------------------------------------------------------------- the other front doors


def test_slack_says_nothing_to_diagnose_for_an_empty_file_and_sends_the_rest_as_a_second_message(tmp_path: Path) -> None:
    from fake_slack import BOT_TOKEN, FakeSlack
    from rlmedic.agent.session import SessionStore
    from rlmedic.ui.slack_app import SlackBot, SlackSettings

    fake = FakeSlack().start()
    try:
        bot = SlackBot(SlackSettings(bot_token=BOT_TOKEN, offline=True, api_url=fake.api_url),
                       store=SessionStore(tmp_path / "sessions"))
        bot.handle({"channel": "C1", "user": "U1", "ts": "300.1", "text": "<@UBOT> why did it die?",
                    "files": [fake.serve_file("train.log", b"")]})
        empty = json.dumps([c.args for c in fake.of("chat.update")][-1])
        bot.handle({"channel": "C2", "user": "U1", "ts": "301.1", "text": "<@UBOT> why did it die?",
                    "files": [fake.serve_file("train.log", GEN_OOM.read_bytes())]})
        posted = [json.dumps(c.args) for c in fake.of("chat.postMessage") if c.args.get("channel") == "C2"]
    finally:
        fake.stop()
    assert "Nothing to diagnose here" in empty and "mem_fraction" not in empty
    assert any("More on this answer" in p and "later error(s)" in p for p in posted)


def test_the_web_api_answers_an_empty_upload_with_nothing_to_diagnose(tmp_path: Path) -> None:
    import socket

    from gradio_client import Client, handle_file

    from rlmedic.ui.web import WebSettings, launch

    empty = tmp_path / "train.log"
    empty.write_text("")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo, sessions = launch(WebSettings(offline=True, uploads_root=tmp_path / "uploads"), port=port, block=False)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        _box, history, *_ = client.predict({"text": "why did my run die?", "files": [handle_file(str(empty))]}, [],
                                           api_name="/chat")
    finally:
        demo.close()
        sessions.close_all()
    last = str(history[-1].get("content"))
    assert "Nothing to diagnose here" in last and "mem_fraction" not in last


@pytest.mark.parametrize("question", ["why did my run die?"])
def test_piped_chat_gives_the_same_short_answer_as_ask(question: str) -> None:
    data = ask(question, "--attach", str(GEN_OOM), "--attach", str(CONFIG))
    out = chat([f"/attach {GEN_OOM}", f"/attach {CONFIG}", question, "/quit"])
    assert data["answer"].splitlines()[0] in out
    assert "later error(s)" not in out.split(data["answer"].splitlines()[0], 1)[1].split("Sources:")[0]


def test_warnings_answer_a_question_about_a_problem_on_a_run_without_failure() -> None:
    data = ask("why is the reward so low?", "--attach", str(FIXTURES / "logs" / "scenarios" / "no_eos_areal.log"))
    lines = data["answer"].splitlines()
    assert lines[0] == "No failure in the logs; these warnings are what they show:"
    assert "no_eos_ratios" in lines[1] and re.search(r"\[\d+\]\.$", lines[1])
    assert not [f for f in data["fixes"] if f["key"].startswith("--")]  # the warning's card is slime's
    healthy = ask("did this run finish ok?", "--attach", str(FIXTURES / "logs" / "scenarios" / "no_eos_areal.log"))
    assert not healthy["answer"].startswith("No failure in the logs; these warnings")


def test_a_cascade_known_issue_does_not_lead_in_a_big_log_either(tmp_path: Path) -> None:
    """The NCCL watchdogs after an OOM match a known issue of their own (a timeout at checkpoint save).
    In a small log that record is told apart as the cascade's; a log past the attachment budget is read
    as its head and tail, whose lines are not numbered as the file's, and the record led the answer."""
    failure = "".join(
        [f"(TrainWorker pid=48213, ip=10.0.0.5) {line}\n" for line in (
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward',
            "    torch.autograd.backward(",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 3 has a total capacity of "
            "79.11 GiB of which 1.02 GiB is free. Process 48213 has 78.07 GiB memory in use.")]
        + [f"(TrainWorker pid={48200 + r}, ip=10.0.0.5) [rank{r}]:[E1122 07:45:09.123456 ProcessGroupNCCL.cpp:616] "
           f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, "
           "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n" for r in (0, 1, 2)])
    noise = "".join(f"(RolloutWorker pid=2101) [2025-11-22 07:{i % 60:02d}:00 TP0] Decode batch. #running-req: {i % 200}, "
                    f"#token: {i * 7 % 90000}, gen throughput (token/s): 1052.87, #queue-req: 0\n" for i in range(30_000))
    small, big = tmp_path / "small.log", tmp_path / "big.log"
    small.write_text(failure)
    big.write_text(noise + failure)
    assert big.stat().st_size > 3_000_000  # past what an attachment is read of: its head and tail
    for log in (small, big):
        answer = ask("why did it die?", "--attach", str(log))["answer"]
        assert "CUDA out of memory" in answer.split("Evidence:")[0], (log.name, answer[:600])
        # no known issue leads on a watchdog line (records of NCCL timeouts at a save, after 10 minutes ...)
        assert not re.search(r"^  Your log: .*Watchdog caught", answer, re.M), (log.name, answer[:600])
