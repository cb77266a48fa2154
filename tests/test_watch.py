"""``rlmedic watch``: live logs followed incrementally, one alert per incident, delivered to Slack, a webhook or stdout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest
from typer.testing import CliRunner

from fake_slack import BOT_TOKEN, FakeSlack
from rlmedic.tools.logs.watch import Watcher, WatchOptions
from rlmedic.tools.logs.follow import Follower
from rlmedic.ui.cli import app
from test_checkpoints import megatron_tree

OOM = ("(TrainWorker pid=3101) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a "
       "total capacity of 79.11 GiB of which 1.02 GiB is free.")
runner = CliRunner()


def steps(first: int, last: int, reward: float, grad: float = 0.2) -> list[str]:
    out = []
    for i in range(first, last + 1):
        out.append(f"[2025-11-22 10:{i // 60:02d}:{i % 60:02d}] train.py:100 - rollout {i}: {{'rollout/raw_reward': {reward}}}")
        out.append(f"[2025-11-22 10:{i // 60:02d}:{i % 60:02d}] train.py:101 - step {i}: "
                   f"{{'train/loss': 0.1, 'train/grad_norm': {grad}}}")
    return out


def append(path: Path, lines: list[str], *, newline: bool = True) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + ("\n" if newline else ""))


# -- following ---------------------------------------------------------------------


def test_follower_reads_only_new_lines_and_survives_rotation_truncation_and_new_files(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    append(log, ["a", "b"])
    f = Follower([tmp_path])
    [batch] = f.poll()
    assert batch.lines == ["a", "b"] and batch.first_line == 1
    assert f.poll() == []
    append(log, ["c", "half"], newline=False)
    assert [b.lines for b in f.poll()] == [["c"]], "an unfinished line waits for its newline"
    append(log, [" done"])
    [batch] = f.poll()
    assert batch.lines == ["half done"] and batch.first_line == 4
    # rotation: the old file keeps its offset under its new name, the new file starts at line 1
    os.rename(log, tmp_path / "rank0.log.1")
    append(tmp_path / "rank0.log.1", ["late line of the old file"])
    append(log, ["fresh"])
    got = {b.path.name: (b.first_line, b.lines) for b in f.poll()}
    assert got == {"rank0.log.1": (5, ["late line of the old file"]), "rank0.log": (1, ["fresh"])}
    # copytruncate: the file shrinks and is read again from its start
    log.write_text("x\n")
    [batch] = f.poll()
    assert batch.lines == ["x"] and batch.first_line == 1 and batch.restarted
    # a rank log that appears later is picked up
    append(tmp_path / "rank1.log", ["rank1 started"])
    assert [b.lines for b in f.poll()] == [["rank1 started"]]
    f.close()


def test_single_file_rotation_drains_the_old_file_then_follows_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    append(log, ["one"])
    f = Follower([log])
    f.poll()
    append(log, ["two"])
    os.rename(log, tmp_path / "train.log.old")  # outside what is watched (the path is a file)
    append(log, ["three"])
    assert [b.lines for b in f.poll()] == [["two"], ["three"]]
    f.close()


def test_a_huge_burst_is_read_only_up_to_the_cap(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    append(log, ["start"])
    f = Follower([log], max_read=1000)
    f.poll()
    append(log, [f"line {i:05d}" for i in range(2000)])
    [batch] = f.poll()
    assert batch.skipped_bytes > 0 and sum(len(x) + 1 for x in batch.lines) <= 1000
    assert batch.lines[-1] == "line 01999" and batch.lines[0].startswith("line ")
    f.close()


# -- incidents -----------------------------------------------------------------------


def test_each_incident_is_alerted_once(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    append(log, steps(1, 5, 0.5))
    w = Watcher([str(tmp_path)], WatchOptions(stall_minutes=0))
    assert w.tick() == []
    append(log, steps(6, 12, 0.0))
    assert w.tick() == [], "7 zero steps: below the breaker"
    append(log, steps(13, 16, 0.0))
    [alert] = w.tick()
    assert alert.kind == "zero_reward" and "stayed 0 for 11 consecutive steps" in alert.summary
    assert alert.evidence.startswith(f"{log}:11: ") and "rollout 6" in alert.evidence
    append(log, steps(17, 30, 0.0))
    assert w.tick() == [], "the same streak growing is the same incident"
    append(log, steps(31, 36, 0.7) + steps(37, 37, 0.6, grad=95.0))
    [spike] = w.tick()
    assert spike.kind == "grad_spike" and "train/grad_norm spiked to 95" in spike.summary
    append(log, [OOM])
    [oom] = w.tick()
    assert oom.kind == "failure" and "cuda-oom" in oom.title and f"{log}:{75}" in oom.evidence
    assert "\nFix: " in oom.text() and "card:oom-" in oom.text()
    append(log, ["(TrainWorker pid=3101) Traceback (most recent call last):", "  some cascade"])
    assert w.tick() == []
    assert w.tick() == []


def test_zero_reward_threshold_nan_and_stall(tmp_path: Path) -> None:
    now = [1000.0]
    log = tmp_path / "train.log"
    append(log, steps(1, 3, 0.4))
    w = Watcher([str(log)], WatchOptions(stall_minutes=5, zero_reward_steps=3), clock=lambda: now[0])
    w.tick()
    append(log, steps(4, 6, 0.0))
    assert [a.kind for a in w.tick()] == ["zero_reward"]
    append(log, ["[2025-11-22 11:00:00] train.py:101 - step 7: {'train/loss': nan, 'train/grad_norm': nan}"])
    kinds = sorted(a.kind for a in w.tick())
    assert kinds == ["nan", "nan"] or kinds == ["nan"]
    now[0] += 4 * 60
    assert w.tick() == []
    append(log, ["INFO: still waiting for rollouts"])  # output without a new step is no progress
    now[0] += 2 * 60
    [stall] = w.tick()
    assert stall.kind == "stall" and "after step 7" in stall.summary and "still waiting" in stall.evidence
    now[0] += 20 * 60
    assert w.tick() == [], "one alert per stall"
    append(log, steps(8, 8, 0.5))
    w.tick()
    now[0] += 6 * 60
    assert [a.kind for a in w.tick()] == ["stall"], "a new stall after progress is a new incident"


def test_the_recovery_plan_comes_with_a_failure_when_checkpoints_are_given(tmp_path: Path) -> None:
    save = megatron_tree(tmp_path / "ckpt", iters=(100, 200), tracker="200")
    log = tmp_path / "logs" / "train.log"
    log.parent.mkdir()
    append(log, steps(1, 2, 0.5) + [OOM])
    [alert] = Watcher([str(log.parent)], WatchOptions(checkpoints=str(save))).tick()
    assert alert.recovery and any("200" in line for line in alert.recovery)
    assert "Recovery plan:" in alert.text()


# -- delivery --------------------------------------------------------------------------


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


def _posts(fake: FakeSlack) -> list[str]:
    return [c.args.get("text", "") for c in fake.of("chat.postMessage")]


NCCL = ("[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
         "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600058 milliseconds before timing out.")


def _poll(condition, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_rlmedic_watch_posts_each_incident_once_to_slack_within_seconds(slack: FakeSlack, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "rank0.log"
    append(log, steps(1, 3, 0.5) + ["WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567"])
    env = {**os.environ, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_URL": slack.api_url}
    proc = subprocess.Popen([sys.executable, "-m", "rlmedic", "watch", str(logs), "--slack-channel", "CALERTS",
                             "--interval", "0.2", "--stall-minutes", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        _poll(lambda: any("rlmedic watch: following" in line for line in err_lines), what="watch to start")
        sample = psutil.Process(proc.pid)
        before, t0 = sample.cpu_times(), time.monotonic()
        time.sleep(2)  # a measurement window (ten ticks), not a wait for something to happen
        after, t1 = sample.cpu_times(), time.monotonic()
        idle_share = (after.user + after.system - before.user - before.system) / (t1 - t0)
        assert idle_share < 0.25, f"idle watch used {idle_share:.0%} of a core at a 0.2 s interval"
        assert _posts(slack) == []  # ten ticks over the healthy lines (and the key) alerted nothing

        started = time.monotonic()
        append(log, [OOM, "(TrainWorker pid=3101) RuntimeError: cascade after the OOM"])
        slack.wait_for(lambda f: len(_posts(f)) == 1, timeout=10)
        assert time.monotonic() - started < 5
        os.rename(log, logs / "rank0.log.1")  # rotation: neither file is read again from zero
        append(log, steps(4, 15, 0.0))
        slack.wait_for(lambda f: len(_posts(f)) == 2, timeout=10)
        # a third, different incident: once it is posted, the watcher has looked again after the
        # second post, so a repeat of either earlier incident would have been posted before it
        append(log, [NCCL])
        slack.wait_for(lambda f: len(_posts(f)) >= 3, timeout=10)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        reader.join(timeout=5)
    assert proc.returncode == 0, "".join(err_lines)
    posts = _posts(slack)
    assert len(posts) == 3, posts
    assert "cuda-oom" in posts[0] and "rank0.log:8: (TrainWorker pid=3101) torch.OutOfMemoryError" in posts[0]
    assert "zero-reward" in posts[1] and "stayed 0 for 12 consecutive steps" in posts[1]
    assert "nccl-watchdog-timeout" in posts[2]
    assert all(c.args["channel"] == "CALERTS" for c in slack.of("chat.postMessage"))
    assert "0123456789abcdef0123456789abcdef01234567" not in slack.posted_text()


def test_watch_once_prints_to_stdout_and_webhook_gets_json(slack: FakeSlack, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    log = tmp_path / "train.log"
    append(log, steps(1, 2, 0.5) + [OOM])
    result = runner.invoke(app, ["watch", str(log), "--once"])
    assert result.exit_code == 1, result.output  # it alerted: exit 1, as diagnose --fail-on
    assert result.stdout.count("rlmedic watch: the run failed (cuda-oom") == 1
    assert ":rotating_light:" not in result.stdout  # a Slack shortcode means nothing on a terminal
    result = runner.invoke(app, ["watch", str(log), "--once", "--webhook", slack.url + "/hooks/alerts"])
    assert result.exit_code == 1, result.output
    [hook] = [c for c in slack.calls if c.method == "/hooks/alerts"]
    assert "cuda-oom" in hook.args["text"] and hook.args["alert"]["kind"] == "failure"
    assert hook.args["text"].startswith(":rotating_light: ")  # Slack renders it
    result = runner.invoke(app, ["watch", str(log), "--once", "--slack-channel", "C1"])
    assert result.exit_code == 2 and "SLACK_BOT_TOKEN" in result.output


def test_watch_once_exits_0_on_a_healthy_log_and_1_once_it_fails(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    append(log, steps(1, 5, 0.5))
    result = runner.invoke(app, ["watch", str(log), "--once", "--stall-minutes", "0"])
    assert result.exit_code == 0, result.output
    assert "rlmedic watch: 0 alert(s)" in result.stderr
    append(log, [OOM])
    result = runner.invoke(app, ["watch", str(log), "--once", "--stall-minutes", "0"])
    assert result.exit_code == 1, result.output
    assert "rlmedic watch: 1 alert(s)" in result.stderr


def test_an_alert_is_not_lost_when_slack_refuses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlack(token="xoxb-1111111111-2222222222-SomeOtherWorkspace").start()  # our token is refused
    try:
        monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
        monkeypatch.setenv("SLACK_API_URL", fake.api_url)
        log = tmp_path / "train.log"
        append(log, [OOM])
        result = runner.invoke(app, ["watch", str(log), "--once", "--slack-channel", "C1"])
        assert result.exit_code == 1, result.output  # the alert went to stderr instead: still an alert
        assert "posting to Slack failed (SlackApiError)" in result.stderr and "cuda-oom" in result.stderr
        assert [c.method for c in fake.calls] == ["chat.postMessage"]
    finally:
        fake.stop()
