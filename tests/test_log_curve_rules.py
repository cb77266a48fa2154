"""Text logs get the curve rules of detectors.yaml that run folders get (entropy collapse, KL blow-up,
log-prob gap, stale samples, throughput drop, step-time rise, flat reward, reward/validation divergence),
by the same check functions: each fires on a log written as verl (``step:N - key:value``), slime
(``step N: {...}`` dicts) and AReaL (StatsLogger tables) write them, naming the metric, the first step
and the log line of that step, with the framework's fixes; healthy logs stay quiet; numpy stays out.

The curves are the run-health tests' (``runs_data.curves``), printed as each framework prints them."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest

from rlmedic.tools.logs.diagnose import diagnose_text
from rlmedic.tools.logs.metrics import MetricCollector
from rlmedic.tools.logs.signatures import builtin_catalog
from rlmedic.tools.runs.detectors import SERIES_CHECKS, builtin_rules, series_rules
from rlmedic.tools.runs.vocabulary import builtin_vocabulary

from runs_data import KEYS, LOGGED_BY, PATHOLOGIES, curves

#: the curve rules text logs had no check for before they shared the runs' checks
NEW_RULES = ("entropy_collapse", "kl_blowup", "logprob_mismatch", "stale_samples", "throughput_drop",
             "step_time_rise", "flat_reward", "reward_val_divergence")
_SGLANG = "[2025-11-22 10:02:20 TP0] Decode batch. #running-req: 121, #token: 54779, token usage: 0.87, gen throughput (token/s): 2067.77"


def _by_step(series: dict[str, tuple[list[int], list[float]]]) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for key, (steps, values) in series.items():
        for s, v in zip(steps, values):
            out.setdefault(int(s), {})[key] = v
    return dict(sorted(out.items()))


def verl_log(series: dict[str, Any]) -> str:
    """verl's console logger: one ``step:N - key:value - ...`` line a step, SGLang lines between."""
    lines = ["(TaskRunner pid=1024) Training from scratch"]
    for step, row in _by_step(series).items():
        lines.append(f"(WorkerDict pid=2211) {_SGLANG}")
        pairs = " - ".join(f"{k}:{v:.6g}" for k, v in row.items())
        lines.append(f"(TaskRunner pid=1024) step:{step} - global_seqlen/mean:8123 - {pairs}")
    return "\n".join(lines) + "\n"


def slime_log(series: dict[str, Any]) -> str:
    """slime: ``rollout N: {...}`` (rollout/), ``step N: {...}`` (train/), ``perf N: {...}``, ``eval N: {...}``."""
    lines = ["(TrainRayActor pid=2345) [2025-11-22 10:01:00] arguments.py:40 - Using megatron backend"]
    groups = (("rollout", "rollout/", "rollout_utils.py:88"), ("step", "train/", "model.py:512"),
              ("perf", "perf/", "train_metric_utils.py:60"), ("eval", "eval/", "rollout_utils.py:120"))
    for step, row in _by_step(series).items():
        lines.append(f"(SGLangEngine pid=4417) {_SGLANG}")
        for word, prefix, where in groups:
            pairs = {k: v for k, v in row.items() if k.startswith(prefix)}
            if pairs:
                body = ", ".join(f"'{k}': {v:.6g}" for k, v in pairs.items())
                lines.append(f"(TrainRayActor pid=2345) [2025-11-22 10:03:11] {where} - {word} {step}: {{{body}}}")
    return "\n".join(lines) + "\n"


def areal_log(series: dict[str, Any]) -> str:
    """AReaL's StatsLogger: ``Train step N/M done.`` then a grid table of ``│ key │ value │`` pairs."""
    lines = ["(TrainWorker pid=3101) [AReaL] 20251122-10:00:00.000 Launcher INFO: starting"]
    for step, row in _by_step(series).items():
        lines.append(f"(RolloutWorker pid=2101) {_SGLANG}")
        lines.append(f"(TrainWorker pid=3101) [AReaL] 20251122-10:01:40.500 StatsLogger INFO: Epoch 1/5 Step {step}/233 "
                     f"Train step {step}/1165 done.")
        lines.append("(TrainWorker pid=3101) [AReaL] 20251122-10:01:40.500 StatsLogger INFO: Stats (1/1):")
        lines.append("╒" + "═" * 60 + "╕")
        cells = [f"│ {k:<58} │ {v: .4e} " for k, v in row.items()]
        for i in range(0, len(cells), 2):
            lines.append("".join(cells[i:i + 2]) + "│")
        lines.append("╘" + "═" * 60 + "╛")
    return "\n".join(lines) + "\n"


RENDER = {"verl": verl_log, "slime": slime_log, "areal": areal_log}
#: slime prints perf/ and eval/ on their own lines: the scanner hands them over by the metric literals
#: 'perf/ and 'eval/ of signatures.yaml (without them its throughput, step time and validation score went unread)
SLIME_OWN_LINES = {"throughput_drop", "step_time_rise", "reward_val_divergence"}


def _cases() -> list[Any]:
    out = []
    for pathology in NEW_RULES:
        for fw in ("verl", "slime", "areal"):
            if fw not in LOGGED_BY.get(pathology, (fw,)):
                continue
            out.append(pytest.param(pathology, fw, id=f"{pathology}-{fw}"))
    return out


def _step_of_line(text: str, line: int, fw: str) -> int:
    """The training step a log line belongs to: its own (verl, slime) or the last AReaL 'Train step' above it."""
    rows = text.splitlines()
    if fw == "areal":
        for j in range(line - 1, -1, -1):
            m = re.search(r"Train step (\d+)/", rows[j])
            if m:
                return int(m.group(1))
        raise AssertionError("no step above the line")
    m = re.search(r"(?:step|rollout|perf|eval)[: ](\d+)", rows[line - 1])
    assert m, rows[line - 1]
    return int(m.group(1))


@pytest.mark.parametrize("pathology,fw", _cases())
def test_each_curve_rule_fires_on_a_text_log(pathology: str, fw: str) -> None:
    series, onset = curves(pathology, fw, seed=3)
    text = RENDER[fw](series)
    d = diagnose_text(text, f"{fw}.log")
    rule_id = PATHOLOGIES[pathology]
    hits = [f for f in d.findings if f.id == rule_id]
    assert hits, f"{rule_id} not found: {[f.id for f in d.findings]}"
    f = hits[0]
    rule = next(r for r in builtin_rules()["rules"] if r["id"] == rule_id)
    concept = rule["concept"]
    assert f.evidence["metric"] == f.key == KEYS[fw][concept]
    step = f.evidence["step"]
    if pathology == "reward_val_divergence":
        assert abs(step - onset) <= 20 and f.evidence["before"] > f.evidence["after"]
    else:
        assert step == onset, (step, onset)
    # the evidence is a line of the user's log: the line of that step, holding the metric (AReaL: its table)
    assert f.file == f"{fw}.log" and f.evidence["occurrences"] == [f"{fw}.log:{f.line}"]
    assert _step_of_line(text, f.line, fw) == step
    if fw != "areal":
        assert f.evidence["metric"] in text.splitlines()[f.line - 1]
    assert f"from step {step}" in f.summary or f"at step {step}" in f.summary or rule["check"] == "diverge"
    assert f.summary.startswith(rule["title"]) and f.evidence["metric"] in f.summary
    assert f.severity == rule["severity"] and f.category == rule["category"] and f.card == rule["card"]
    # the rule's fixes for this framework, as a run folder's finding gets them
    table = rule["fixes"]
    want = [x.get("key") or "" for x in (table.get(fw) or table["generic"])]
    assert [x.key for x in f.fixes] == want
    assert any(c.kind == "log" and c.text == f"{fw}.log:{f.line}" for c in f.citations)
    # the log's other curves raise nothing before the pathology starts
    assert all(g.evidence.get("step", onset) >= onset - 20 for g in d.findings if g.evidence.get("signature", "").startswith("metric:"))


@pytest.mark.parametrize("fw", ["verl", "slime", "areal"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_healthy_logs_stay_healthy(fw: str, seed: int) -> None:
    series, _ = curves("healthy", fw, seed=seed)
    d = diagnose_text(RENDER[fw](series), f"{fw}.log")
    assert [f.id for f in d.findings if str(f.evidence.get("signature", "")).startswith("metric:")] == []
    assert d.stats["health"]["verdict"] in ("healthy", "finished", "ended-early")
    got = set(d.stats["metrics"])
    assert {"reward", "entropy", "kl", "grad_norm", "logprob_diff"} <= got
    if fw != "slime":
        assert {"throughput", "step_time", "val_score"} <= got


def test_every_concept_a_curve_rule_reads_is_a_log_series() -> None:
    """A concept missing from log_series would leave its rule silent on every text log."""
    series = set(builtin_vocabulary().log_series.values())
    rules = series_rules()
    assert {r["id"] for r in rules} >= {PATHOLOGIES[p] for p in NEW_RULES}
    for r in rules:
        assert r["check"] in SERIES_CHECKS and not r.get("logs")
        assert r["concept"] in series and r.get("other", r["concept"]) in series, r["id"]
    # rules with a text-log check of their own keep it (their ids, wording and cards are the log's)
    assert not {r["id"] for r in rules} & {"zero-reward", "grad-norm-spike", "nonfinite"}


def test_a_framework_key_wins_over_a_generic_one() -> None:
    """verl's rollout_corr/kl is its log-prob gap (the framework's own pattern), not a generic KL key."""
    mc = MetricCollector(builtin_catalog().metrics)
    assert mc.kind_of("rollout_corr/kl") == "logprob_diff"
    assert mc.kind_of("actor/kl_loss") == "kl" and mc.kind_of("my/kl") == "kl"
    assert mc.kind_of("timing_s/step") == "step_time" and mc.kind_of("timing_s/gen") is None


def test_a_slime_eval_line_feeds_the_validation_score_only() -> None:
    mc = MetricCollector(builtin_catalog().metrics)
    mc.feed(0, 5, "step 3: {'train/loss': 0.1, 'train/grad_norm': 0.2}")
    mc.feed(0, 6, "eval 3: {'eval/gsm8k': 0.41, 'eval/gsm8k/response_len/mean': 800}")
    kinds = {s.key: s.kind for s in mc.series.values()}
    assert kinds == {"train/loss": "loss", "train/grad_norm": "grad_norm", "eval/gsm8k": "val_score"}
    assert mc.series[(0, "eval/gsm8k")].points[0].step == 3 and mc.current_step[0] == 3


def test_a_text_log_diagnosis_does_not_import_numpy(tmp_path) -> None:
    """numpy costs ~0.15 s of CPU to import: more than a small log's whole scan. The curve rules run on plain
    lists, so a text log that fires them (and the CLI on it) never imports it."""
    series, _ = curves("entropy_collapse", "verl", seed=3)
    log = tmp_path / "verl.log"
    log.write_text(verl_log(series))
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['rlmedic', 'diagnose', {str(log)!r}]\n"
        "try:\n    runpy.run_module('rlmedic', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('NUMPY' if 'numpy' in sys.modules else 'NO-NUMPY')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "entropy" in out.stdout and "collapsed" in out.stdout, out.stdout + out.stderr
    assert out.stdout.strip().endswith("NO-NUMPY"), out.stdout[-500:]


@pytest.mark.parametrize("pathology", sorted(SLIME_OWN_LINES))
def test_slime_perf_and_eval_lines_fire_only_by_their_literals(pathology: str) -> None:
    """slime's perf N: and eval N: lines reach the collector by the literals 'perf/ and 'eval/ alone: without
    them the same log fires nothing (what the shipped catalog's test above then guards)."""
    import yaml
    from importlib import resources

    from rlmedic.tools.logs.diagnose import diagnose_texts
    from rlmedic.tools.logs.signatures import parse_catalog

    data = yaml.safe_load(resources.files("rlmedic.tools.logs").joinpath("signatures.yaml").read_text(encoding="utf-8"))
    data["metrics"]["literals"] = [t for t in data["metrics"]["literals"] if t not in ("'perf/", "'eval/")]
    series, _onset = curves(pathology, "slime", seed=3)
    d = diagnose_texts([("slime.log", slime_log(series))], catalog=parse_catalog(data))
    assert not any(f.id == PATHOLOGIES[pathology] for f in d.findings)


def test_points_of_one_step_are_averaged_and_keep_the_steps_first_line() -> None:
    """Eight rollout workers print their throughput at every step: six low and two high lines a step are no
    drop (a run's logger averages them), a drop of every worker is, at the line of its step's first print."""
    mc = MetricCollector(builtin_catalog().metrics)
    line = 0
    first_line = {}
    for step in range(1, 41):
        workers = [300.0] * 8 if step >= 30 else [2000.0, 2000.0] + [200.0] * 6
        for w, value in enumerate(workers):
            line += 1
            first_line.setdefault(step, line)
            mc.feed(0, line, f"(RolloutWorker pid={2100 + w}) step={step} throughput={value}")
    events = [ev for ev in mc.detect() if ev.rule == "throughput-drop"]
    assert len(events) == 1 and events[0].step == 30 and events[0].line == first_line[30]
    assert events[0].numbers["before"] == pytest.approx(650.0) and events[0].numbers["after"] == pytest.approx(300.0)


def test_the_log_checks_are_the_runs_functions() -> None:
    """Zero streak, spike and NaN/Inf of a text log are detectors.zero_streak, .spike and .first_nonfinite: a
    text log's zero-reward streak is the longest (``pick: longest`` under the rule's ``logs:``: the streak that
    ended the run), a run's the first (the circuit breaker stops there); a spike before the first NaN is
    named on both paths (the NaN by the non-finite rule)."""
    from rlmedic.tools.runs import detectors
    from rlmedic.tools.runs.curves import make_curve

    reward = [0.4] * 5 + [0.0] * 10 + [0.5] * 10 + [0.0] * 30
    lines = "".join(f"step:{i} - critic/score/mean:{v} - actor/grad_norm:{60.0 if i == 40 else 0.5} - "
                    f"actor/pg_loss:{'nan' if i >= 45 else 0.1}\n" for i, v in enumerate(reward, 1))
    d = diagnose_text(lines, "verl.log")
    ids = {f.id: f for f in d.findings}
    zero = ids["zero-reward-streak"]
    assert zero.line == 26 and zero.evidence["numbers"]["zero_steps"] == 30 and "until the log ends" in zero.summary
    assert ids["grad-norm-spike"].line == 40 and ids["nonfinite-loss"].line == 45
    rule = next(r for r in builtin_rules()["rules"] if r["id"] == "zero-reward")
    run_det = detectors.zero_streak(rule, make_curve("critic/score/mean", range(1, 56), reward))
    assert run_det is not None and run_det.step == 6 and run_det.numbers["zero_points"] == 10
    grad = [0.5] * 39 + [60.0] + [0.5] * 5 + [float("nan")] * 10
    spike_rule = next(r for r in builtin_rules()["rules"] if r["id"] == "grad-norm-spike")
    assert detectors.spike(spike_rule, make_curve("actor/grad_norm", range(1, 56), grad)).step == 40


def test_validation_scores_do_not_crowd_out_the_training_series() -> None:
    """verl prints its validation scores per data source and statistic first (validation before training):
    64 of them would have taken all of a file's 64 series; a file keeps 8, and its reward and loss."""
    from rlmedic.tools.logs.metrics import MAX_SERIES_OF_KIND

    from rlmedic.tools.logs.scan import MAX_LINE_CHARS

    val = " - ".join(f"val-core/d{j}/acc/mean@{n}:.5" for j in range(16) for n in (1, 2, 4, 8))
    lines = [f"step:0 - {val}"]
    assert len(lines[0]) < MAX_LINE_CHARS  # all 64 are read
    lines += [f"(TaskRunner pid=1024) step:{i} - critic/score/mean:0.0 - actor/pg_loss:0.1 - actor/kl_loss:0.001 - "
              f"actor/entropy:0.5 - actor/grad_norm:0.3 - perf/throughput:1000 - timing_s/step:30 - "
              + " - ".join(f"x{j}/grad_norm:0.1" for j in range(30)) for i in range(1, 15)]
    d = diagnose_text("\n".join(lines) + "\n", "verl.log")
    assert len(d.stats["metrics"]["val_score"]) == MAX_SERIES_OF_KIND["val_score"]
    assert "critic/score/mean" in d.stats["metrics"]["reward"] and "zero-reward-streak" in [f.id for f in d.findings]


@pytest.mark.parametrize("fw", ["verl", "slime", "areal"])
def test_a_truncation_ratio_over_a_fifth_is_the_runs_length_cap(fw: str) -> None:
    """A fifth or more of the responses cut for 3 steps (the runs' length-cap rule, by its function) where the
    log's own length checks are silent (under no-eos' 0.9, no length plateau); where one of those fires it
    alone speaks (the same cause)."""
    series, onset = curves("healthy", fw, seed=4)
    ratio = KEYS[fw]["truncation_ratio"]
    steps, values = series[ratio]
    series[ratio] = (steps, [0.35 if s >= 120 else v for s, v in zip(steps, values)])
    text = RENDER[fw](series)
    d = diagnose_text(text, f"{fw}.log")
    f = next(f for f in d.findings if f.id == "length-cap")
    assert f.key == ratio and f.evidence["step"] == 120 and _step_of_line(text, f.line, fw) == 120
    assert f.evidence["numbers"]["truncation_ratio"] == pytest.approx(0.35)
    assert KEYS[fw]["reward"] in f.evidence["related"]
    assert not {"generation-never-stops", "response-length-cap"} & {g.id for g in d.findings}
    series, onset = curves("length_cap", fw, seed=4)  # the ratio at 0.85 and the length pressed at the cap
    ids = {g.id for g in diagnose_text(RENDER[fw](series), f"{fw}.log").findings}
    assert "response-length-cap" in ids and "length-cap" not in ids
