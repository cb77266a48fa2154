"""Run folders written by the real libraries (wandb offline in a child process, TensorBoard through
torch's SummaryWriter) read back and diagnosed: the pathology, its metric and its first step by
``rlmedic diagnose`` on W&B and TensorBoard folders of verl, slime and AReaL runs; a run killed
mid-way (no exit record); torn files; the committed fixtures; the extra's one-line error."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlmedic.errors import UserError
from rlmedic.tools.runs import tensorboard as tb
from rlmedic.tools.runs import wandb as wb
from rlmedic.tools.runs.diagnose import diagnose_runs, run_kind

from runs_data import CAP, KEYS, curves, write_jsonl, write_tensorboard, write_wandb

FIXTURES = Path(__file__).parent / "fixtures" / "runs"
HAVE_WANDB = importlib.util.find_spec("wandb") is not None
HAVE_TB = importlib.util.find_spec("tensorboard") is not None
needs_wandb = pytest.mark.skipif(not HAVE_WANDB, reason="the wandb extra is not installed (CI installs it); "
                                 "test_committed_wandb_fixture covers the reader")
needs_tb = pytest.mark.skipif(not HAVE_TB, reason="the tensorboard extra is not installed (CI installs it); "
                              "test_committed_tensorboard_fixture covers the reader")

#: (pathology, framework, onset, crash) of the W&B runs one child process writes for this module
WANDB_RUNS = [("length_cap", "verl", 140, False), ("entropy_collapse", "slime", 90, False),
              ("stale_samples", "verl", 100, False), ("kl_blowup", "areal", 80, True)]  # the crash last: it ends the writer


@pytest.fixture(scope="module")
def wandb_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int]]:
    if not HAVE_WANDB:
        pytest.skip("wandb extra not installed")
    work = tmp_path_factory.mktemp("wandb-runs")
    jobs = []
    for pathology, fw, onset, crash in WANDB_RUNS:
        series, on = curves(pathology, fw, seed=21, onset=onset)
        jobs.append({"dir": str(work / f"{pathology}-{fw}"), "name": f"{pathology}-{fw}", "series": series,
                     "config": {"data": {"max_response_length": CAP}}, "crash": crash})
    folders = write_wandb(jobs, work)
    return {f"{p}-{fw}": (folder, onset) for (p, fw, onset, _c), folder in zip(WANDB_RUNS, folders)}


def _cli(*args: str) -> tuple[int, str]:
    from rlmedic.ui.cli import app

    result = CliRunner().invoke(app, ["diagnose", *args])
    return result.exit_code, result.output


@needs_wandb
@pytest.mark.parametrize("name,rule,metric", [
    ("length_cap-verl", "length-cap", "response_length/clip_ratio"),
    ("entropy_collapse-slime", "entropy-collapse", "train/entropy_loss"),
    ("kl_blowup-areal", "kl-blowup", "ppo_actor/update/approx_kl/avg"),
])
def test_diagnose_names_pathology_metric_and_first_step_on_wandb(wandb_runs, name: str, rule: str, metric: str) -> None:
    folder, onset = wandb_runs[name]
    code, out = _cli(str(folder.parent), "--json")  # the wandb/ folder: its newest run
    data = json.loads(out)
    root = data["findings"][data["root"]]
    assert root["id"] == rule
    assert root["evidence"]["metric"] == metric and root["evidence"]["step"] == onset
    assert f"{metric} " in root["summary"] and f"from step {onset}" in root["summary"]
    assert root["fix_details"] and root["fix_details"][0]["citation"]
    framework = name.split("-")[1]
    assert data["stats"]["frameworks"] == [framework]
    assert all(f["framework"] in ("", framework) for f in root["fix_details"])
    code, text = _cli(str(folder))
    assert "ROOT CAUSE" in text and f"^ step {onset}" in text  # the sparkline and its marker
    assert text.startswith("rlmedic diagnose: 1 run(s), ") and " points in " in text.splitlines()[0]


@needs_wandb
def test_length_cap_summary_carries_the_reward_fall(wandb_runs) -> None:
    folder, onset = wandb_runs["length_cap-verl"]
    d = diagnose_runs([folder])
    root = d.root_finding
    assert root.id == "length-cap"
    assert "critic/score/mean" in root.summary and "-> 0)" in root.summary
    assert "cap 1024 tokens" in root.summary  # from the run's config
    assert any(f.key == "data.max_response_length" for f in root.fixes)
    assert d.stats["runs"][0]["finished"] is True and d.stats["health"]["verdict"] == "failed"


@needs_wandb
def test_a_killed_run_has_no_exit_record_and_is_reported_stopped(wandb_runs) -> None:
    folder, onset = wandb_runs["kl_blowup-areal"]
    run = wb.read_run(folder)
    assert run.finished is None and run.exit_code is None
    assert run.last_step is not None and run.last_step > onset
    later = time.time() + 3 * 3600
    d = diagnose_runs([folder], now=later)
    stopped = next(f for f in d.findings if f.id == "run-stopped")
    assert f"last step {run.last_step}" in stopped.summary and "no exit record" in stopped.summary
    assert d.root_finding.id == "kl-blowup"  # the earlier failure leads
    assert "run-stopped" not in {f.id for f in diagnose_runs([folder]).findings}  # just written: may be running


@needs_wandb
def test_all_runs_of_a_wandb_folder(wandb_runs, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "wandb"
    for name in ("length_cap-verl", "entropy_collapse-slime"):
        folder, _ = wandb_runs[name]
        shutil.copytree(folder, root / folder.name)
    newest = diagnose_runs([root])
    assert len(newest.stats["runs"]) == 1
    both = diagnose_runs([root], all_runs=True)
    assert {r["framework"] for r in both.stats["runs"]} == {"verl", "slime"}
    assert {"length-cap", "entropy-collapse"} <= {f.id for f in both.findings}
    code, out = _cli(str(root), "--all", "--json")
    assert len(json.loads(out)["stats"]["runs"]) == 2


@needs_wandb
def test_stale_samples_on_a_wandb_run_names_the_metric_step_and_the_cited_fix(wandb_runs) -> None:
    folder, onset = wandb_runs["stale_samples-verl"]
    d = diagnose_runs([folder])
    hit = next(f for f in d.findings if f.id == "stale-samples")
    assert hit.evidence["metric"] == "training/off_policy/trajectory_staleness/mean" and hit.evidence["step"] == onset
    assert f"from step {onset}" in hit.summary and hit.severity == "warning"
    fix = hit.fixes[0]
    assert fix.key == "async_training.staleness_threshold" and fix.citations[0].ref.startswith("verl docs/advance/fully_async")
    assert d.stats["frameworks"] == ["verl"]


@needs_wandb
def test_a_zip_of_several_runs_is_read_whole(wandb_runs, tmp_path: Path) -> None:
    """What the web app and Slack get: a zip of a wandb/ folder with two runs. Both are read (a zip is what
    its sender picked; there is no --all to pass), each finding labelled with its run."""
    import shutil
    import zipfile

    root = tmp_path / "wandb"
    for name in ("length_cap-verl", "entropy_collapse-slime"):
        folder, _ = wandb_runs[name]
        shutil.copytree(folder, root / folder.name)
    archive = tmp_path / "runs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in root.rglob("*"):
            if f.is_file():
                zf.write(f, f.relative_to(tmp_path).as_posix())
    d = diagnose_runs([archive])
    assert len(d.stats["runs"]) == 2 and {r["framework"] for r in d.stats["runs"]} == {"verl", "slime"}
    ids = {f.id: f for f in d.findings}
    assert {"length-cap", "entropy-collapse"} <= set(ids)
    assert ids["length-cap"].summary.startswith("length_cap-verl: ")  # the run's name
    from rlmedic.tools.runs.chart import caption

    assert caption(ids["length-cap"]).startswith("length_cap-verl: response_length/clip_ratio (blue)")  # web, Slack
    assert all(r["path"].startswith(str(archive) + ":") for r in d.stats["runs"])
    assert not list(tmp_path.glob("rlmedic-runs-*"))


@needs_wandb
def test_a_torn_transaction_log_is_read_up_to_its_last_whole_record(wandb_runs, tmp_path: Path) -> None:
    folder, _ = wandb_runs["length_cap-verl"]
    log = next(folder.glob("run-*.wandb"))
    data = log.read_bytes()
    cut = tmp_path / "offline-run-20260101_000000-torn0001"
    cut.mkdir()
    (cut / "run-torn0001.wandb").write_bytes(data[: len(data) * 2 // 3 + 5])
    run = wb.read_run(cut)
    full = wb.read_run(folder)
    assert 0 < run.last_step < full.last_step and run.finished is None
    before = log.stat().st_mtime
    assert log.read_bytes() == data and log.stat().st_mtime == before  # the user's files are never modified


@needs_tb
@pytest.mark.parametrize("pathology,framework,rule", [
    ("zero_reward", "verl", "zero-reward"), ("length_cap", "areal", "length-cap"),
    ("logprob_mismatch", "slime", "logprob-mismatch"), ("throughput_drop", "verl", "throughput-drop"),
])
def test_diagnose_names_pathology_metric_and_first_step_on_tensorboard(tmp_path: Path, pathology, framework, rule) -> None:
    series, onset = curves(pathology, framework, seed=31, onset=110)
    logdir = tmp_path / "tensorboard_log" / "project" / "experiment"  # verl's layout
    write_tensorboard(logdir, series)
    assert run_kind(tmp_path / "tensorboard_log") == "tensorboard"
    code, out = _cli(str(tmp_path / "tensorboard_log"), "--json")
    data = json.loads(out)
    hit = next(f for f in data["findings"] if f["id"] == rule)
    concept = {"zero-reward": "reward", "length-cap": "truncation_ratio", "logprob-mismatch": "logprob_diff",
               "throughput-drop": "throughput"}[rule]
    assert hit["evidence"]["metric"] == KEYS[framework][concept] and hit["evidence"]["step"] == onset
    assert data["stats"]["frameworks"] == [framework]


@needs_tb
@pytest.mark.parametrize("pathology,framework", [
    ("flat_reward", "areal"), ("reward_val_divergence", "slime"), ("nan", "verl"), ("grad_spike", "areal"),
    ("kl_blowup", "slime"), ("step_time_rise", "verl"), ("entropy_collapse", "areal"), ("stale_samples", "areal"),
])
def test_every_rule_on_tensorboard_runs_written_by_the_real_writer(tmp_path: Path, pathology, framework) -> None:
    from runs_data import PATHOLOGIES

    series, onset = curves(pathology, framework, seed=41, onset=130)
    write_tensorboard(tmp_path / "run", series)
    d = diagnose_runs([tmp_path / "run"])
    rule = PATHOLOGIES[pathology]
    hit = next(f for f in d.findings if f.id == rule)
    if rule == "reward-val-divergence":
        assert hit.evidence["metric"] == KEYS[framework]["val_score"] and abs(hit.evidence["step"] - onset) <= 20
    elif rule == "nonfinite":
        assert hit.evidence["metric"] in (KEYS[framework]["loss"], KEYS[framework]["grad_norm"])
        assert hit.evidence["step"] == onset and "nan" in hit.summary
    else:
        assert hit.evidence["step"] == onset and hit.evidence["metric"] in KEYS[framework].values()
    assert d.stats["frameworks"] == [framework]


@needs_tb
def test_fast_scalar_path_equals_tensorboards_own_parse(tmp_path: Path) -> None:
    series, _ = curves("nan", "verl", seed=4)
    write_tensorboard(tmp_path, series)
    data = tb.event_files(tmp_path)[0].read_bytes()
    fast, walls, covered, _skipped = tb._fast(data)
    slow, _ = tb._slow(data)
    assert covered > len(data) * 0.99
    assert fast.keys() == slow.keys() == series.keys()
    import numpy as np

    for key in slow:
        order = np.argsort(fast[key][0], kind="stable")  # blocks read at once come after the walked records
        assert np.asarray(fast[key][0])[order].tolist() == slow[key][0]
        assert [repr(v) for v in np.asarray(fast[key][1])[order].tolist()] == [repr(v) for v in slow[key][1]]  # NaN too


@needs_tb
def test_tensor_summaries_are_read_through_tensorboards_protobufs(tmp_path: Path) -> None:
    """tf.summary (TF2) writes scalars as tensors with the scalars plugin: the slow path reads them."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    writer = EventFileWriter(str(tmp_path))
    for step in range(1, 61):
        value = 0.9 if step < 40 else 0.005
        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
            tag="actor/entropy", metadata=meta, tensor=tensor_util.make_tensor_proto(value))])
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    writer.close()
    run = tb.read_logdir(tmp_path)
    assert run.curves["actor/entropy"].total == 60
    d = diagnose_runs([tmp_path])
    assert d.root_finding.id == "entropy-collapse" and d.root_finding.evidence["step"] == 40


def test_committed_tensorboard_fixture() -> None:
    d = diagnose_runs([FIXTURES / "tensorboard-slime-grad-spike"])
    spike = next(f for f in d.findings if f.id == "grad-norm-spike")
    assert spike.evidence["metric"] == "train/grad_norm" and spike.evidence["step"] == 80
    assert d.stats["frameworks"] == ["slime"] and d.root is None
    assert d.stats["health"]["verdict"] == "healthy"
    assert any("grad-norm-spike (train/grad_norm)" in c for c in d.stats["health"]["checked"])


def test_committed_wandb_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = FIXTURES / "wandb-verl-length-cap"
    assert run_kind(folder) == "wandb-root"
    if not HAVE_WANDB:
        with pytest.raises(UserError, match=r"pip install 'rlmedic\[wandb\]'"):
            diagnose_runs([folder])
        return
    d = diagnose_runs([folder])
    root = d.root_finding
    assert root.id == "length-cap" and root.evidence["metric"] == "response_length/clip_ratio"
    assert root.evidence["step"] == 70 and "critic/score/mean 0.491 -> 0" in root.summary


def test_without_the_extra_one_line_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setattr(wb, "_PB", [])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "wandb.proto", None)
    with pytest.raises(UserError) as err:
        diagnose_runs([FIXTURES / "wandb-verl-length-cap"])
    assert str(err.value) == "reading W&B runs needs the wandb extra: pip install 'rlmedic[wandb]'"
    code, out = _cli(str(FIXTURES / "wandb-verl-length-cap"))
    assert code == 2 and "pip install 'rlmedic[wandb]'" in out and "Traceback" not in out


def test_jsonl_dump_and_a_jsonl_log_are_told_apart(tmp_path: Path) -> None:
    series, onset = curves("entropy_collapse", "verl", seed=8, onset=77)
    dump = write_jsonl(tmp_path / "metrics.jsonl", series)
    assert run_kind(dump) == "dump"
    log = tmp_path / "events.jsonl"
    log.write_text('{"level": "INFO", "msg": "started", "host": "a"}\n{"level": "ERROR", "msg": "CUDA out of memory"}\n')
    assert run_kind(log) is None
    code, out = _cli(str(dump), "--json")
    root = json.loads(out)["findings"][0]
    assert root["id"] == "entropy-collapse" and root["evidence"]["step"] == 77


def test_a_run_folder_beside_a_log_is_diagnosed_with_it(tmp_path: Path) -> None:
    series, onset = curves("zero_reward", "slime", seed=9, onset=60)
    dump = write_jsonl(tmp_path / "metrics.jsonl", series)
    log = tmp_path / "train.log"
    log.write_text("step 1: {'train/loss': 0.1}\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    code, out = _cli(str(dump), str(log), "--json")
    ids = {f["id"] for f in json.loads(out)["findings"]}
    assert "zero-reward" in ids and any("oom" in i for i in ids)


def test_attachment_routing_sends_run_folders_to_diagnose() -> None:
    from rlmedic.agent.investigate import classify

    assert classify(FIXTURES / "wandb-verl-length-cap", b"") == "log"
    assert classify(FIXTURES / "tensorboard-slime-grad-spike", b"") == "log"


@needs_wandb
def test_wandb_history_short_form_equals_wandbs_protobuf_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN and Infinity, keys of the same length; nested keys and text values: the bulk read of history
    records off their bytes gives what wandb's Record parse gives (records that do not fit the short
    form, the second run's, are left to protobuf), also when every key mixes to the same number."""
    import math

    from rlmedic.tools.runs.curves import Run

    series = {"actor/entropy": ([1, 2, 3, 4], [0.5, float("nan"), float("inf"), 0.25]),
              "critic/score/mean": ([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])}
    short = {"actor/entropz": 0.75, "critic/score/meab": 0.5, "kl": 0.01}  # same lengths as the keys above, one short
    odd = {"nested": {"a": 1.5}, "note": "a text value"}
    folders = write_wandb([{"dir": str(tmp_path / name), "name": name, "series": series, "extra": extra,
                            "config": {"data": {"max_response_length": 512}}}
                           for name, extra in (("short", short), ("odd", {**short, **odd}))], tmp_path)
    misfits: list[int] = []
    bulk = wb._history_bulk

    def spy(hist, keep):
        out = bulk(hist, keep)
        misfits.append(len(out[3]))
        return out

    for folder, extra_keys, fitting in ((folders[0], set(short), True), (folders[1], {*short, "nested/a"}, False)):
        data = next(folder.glob("run-*.wandb")).read_bytes()
        misfits.clear()
        with monkeypatch.context() as m:
            m.setattr(wb, "_history_bulk", spy)
            m.setattr(wb, "BULK_RECORDS", 3)  # batches of 3 records: keys and pieces joined across them
            fast = Run(path="a", source="wandb", name="a")
            wb.read_transaction_log(data, fast)
        assert (misfits == [0]) is fitting  # the first run's records are all read in bulk, the second's none
        with monkeypatch.context() as m:
            m.setattr(wb, "_MIX", 0)  # every key mixes to one number: the keys are told apart by their bytes
            mixed = Run(path="c", source="wandb", name="c")
            wb.read_transaction_log(data, mixed)
        with monkeypatch.context() as m:
            m.setattr(wb, "_history_fast", lambda payload: None)
            slow = Run(path="b", source="wandb", name="b")
            wb.read_transaction_log(data, slow)
        assert fast.curves.keys() == slow.curves.keys() == mixed.curves.keys() == {*series, *extra_keys}
        for key in fast.curves:
            a, b, c = fast.curves[key], slow.curves[key], mixed.curves[key]
            assert a.steps.tolist() == b.steps.tolist() == c.steps.tolist() == [1, 2, 3, 4]
            assert [repr(v) for v in a.values.tolist()] == [repr(v) for v in b.values.tolist()] == \
                [repr(v) for v in c.values.tolist()]
        assert fast.curves["actor/entropz"].values.tolist() == [0.75] * 4
        assert math.isnan(fast.curves["actor/entropy"].values[1]) and fast.curves["actor/entropy"].first_nonfinite[0] == 2
        assert fast.config["max_response_length"] == 512 and fast.finished is True
        assert fast.keys == slow.keys and fast.last_wall == slow.last_wall


@pytest.mark.parametrize("folder,words", [
    ("wandb-verl-length-cap", ["length cap", "response_length/clip_ratio", "step 70", "data.max_response_length"]),
    ("tensorboard-slime-grad-spike", ["train/grad_norm", "step 80"]),
])
def test_ask_names_the_pathology_metric_and_first_step_of_an_attached_run(folder: str, words: list[str]) -> None:
    from rlmedic.ui.cli import app

    if folder.startswith("wandb") and not HAVE_WANDB:
        pytest.skip("the wandb extra is not installed; test_committed_wandb_fixture covers the message")
    result = CliRunner().invoke(app, ["ask", "why did the reward fall?", "--attach", str(FIXTURES / folder),
                                      "--offline", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    text = json.dumps(data)
    for w in words:
        assert w in text, w
    assert any(call["name"] == "diagnose" for call in data["tool_calls"])


def test_damaged_runs_get_one_clear_line_or_a_warning(tmp_path: Path) -> None:
    import random

    rnd = random.Random(5)
    bad_wandb = tmp_path / "wandb" / "offline-run-20260101_000000-bad00001"
    bad_wandb.mkdir(parents=True)
    (bad_wandb / "run-bad00001.wandb").write_bytes(bytes(rnd.randrange(256) for _ in range(3000)))
    code, out = _cli(str(tmp_path / "wandb"))
    assert code == 2 and "run-bad00001.wandb: not a W&B transaction log" in out and "Traceback" not in out
    tb_dir = tmp_path / "tb"
    tb_dir.mkdir()
    (tb_dir / "events.out.tfevents.1.host").write_bytes(bytes(rnd.randrange(256) for _ in range(5000)))
    d = diagnose_runs([tb_dir])
    assert [f.id for f in d.findings] == ["no-curves"] and d.root is None
    assert "No metric could be read" in d.findings[0].summary


def test_a_wandb_chart_csv_export_is_a_dump(tmp_path: Path) -> None:
    """W&B's "Export CSV": Step, "<run> - <key>", and __MIN/__MAX columns beside each key."""
    series, onset = curves("zero_reward", "verl", seed=12, onset=90)
    steps, values = series["critic/score/mean"]
    ent_steps, ent = series["actor/entropy"]
    lines = ['"Step","exp-7 - critic/score/mean","exp-7 - critic/score/mean__MIN","exp-7 - critic/score/mean__MAX",'
             '"exp-7 - actor/entropy"']
    lines += [f"{s},{v},{v},{v},{e}" for s, v, e in zip(steps, values, ent)]
    path = tmp_path / "wandb_export_2026-01-01.csv"
    path.write_text("\n".join(lines) + "\n")
    assert run_kind(path) == "dump"
    d = diagnose_runs([path])
    assert sorted(d.stats["runs"][0]["concepts"].values()) == ["actor/entropy", "critic/score/mean"]
    assert d.root_finding.id == "zero-reward" and d.root_finding.evidence["step"] == onset
