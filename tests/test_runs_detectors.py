"""The run-health rules (tools/runs/detectors.yaml) and the metric vocabulary on curves in memory:
each pathology is found under verl's, slime's and AReaL's key names with its metric and first
step, healthy runs stay quiet, the data files are validated, long curves keep spikes and NaNs."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from rlmedic.errors import UserError
from rlmedic.tools.runs import detectors, vocabulary
from rlmedic.tools.runs.curves import MAX_POINTS, Run, make_curve
from rlmedic.tools.runs.detectors import builtin_rules, detect
from rlmedic.tools.runs.spark import marked, sparkline
from rlmedic.tools.runs.vocabulary import builtin_vocabulary

from runs_data import KEYS, LOGGED_BY, PATHOLOGIES, curves


def _run(series: dict, **meta) -> Run:
    run = Run(path="mem", source="jsonl", name="mem", **meta)
    run.curves = {k: make_curve(k, s, v) for k, (s, v) in series.items()}
    run.framework = builtin_vocabulary().framework_of(list(run.curves))
    return run


@pytest.mark.parametrize("framework", ["verl", "slime", "areal"])
@pytest.mark.parametrize("pathology", sorted(PATHOLOGIES))
def test_each_pathology_is_found_with_its_metric_and_first_step(pathology: str, framework: str) -> None:
    series, onset = curves(pathology, framework, seed=3)
    run = _run(series)
    assert run.framework == framework
    found, keys = detect(run, builtin_vocabulary())
    rule = PATHOLOGIES[pathology]
    hits = [d for d in found if d.id == rule]
    if framework not in LOGGED_BY.get(pathology, (framework,)):
        assert not hits and "staleness" not in keys  # the framework logs no such metric
        return
    assert hits, f"{rule} not found: {[d.id for d in found]}"
    det = hits[0]
    concept = next(r.get("concept") for r in builtin_rules()["rules"] if r["id"] == rule)
    if rule == "nonfinite":
        assert det.key in (KEYS[framework]["loss"], KEYS[framework]["grad_norm"])
        assert det.step == onset
    elif rule == "reward-val-divergence":
        assert det.key == KEYS[framework]["val_score"]
        assert abs(det.step - onset) <= 20  # validation is logged every 10 steps; the peak is a 3-point mean
        assert det.before > det.after
    else:
        assert det.key == keys[concept] == KEYS[framework][concept]
        assert det.step == onset
    # nothing fires before the pathology starts (the length cap's reward fall comes after it, by design)
    assert all(d.step >= onset - (20 if d.id == "reward-val-divergence" else 0) for d in found)


@pytest.mark.parametrize("framework", ["verl", "slime", "areal"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_healthy_runs_are_quiet(framework: str, seed: int) -> None:
    found, keys = detect(_run(curves("healthy", framework, seed=seed)[0]), builtin_vocabulary())
    assert found == []
    assert {"reward", "entropy", "kl", "truncation_ratio", "grad_norm", "throughput"} <= set(keys)


def test_length_cap_reports_the_reward_before_and_after() -> None:
    series, onset = curves("length_cap", "verl", seed=5)
    found, _ = detect(_run(series), builtin_vocabulary())
    det = next(d for d in found if d.id == "length-cap")
    assert det.numbers["truncation_ratio"] > 0.7
    assert det.numbers["reward_before"] > 0.3 and det.numbers["reward_after"] == 0.0
    assert "critic/score/mean" in det.related


def test_length_cap_without_a_truncation_ratio_uses_the_configured_cap() -> None:
    series, onset = curves("length_cap", "verl", seed=5)
    del series["response_length/clip_ratio"], series["response_length/max"]
    run = _run(series, config={"max_response_length": 1024})
    det = next(d for d in detect(run, builtin_vocabulary())[0] if d.id == "length-cap")
    assert det.key == "response_length/mean" and det.step == onset and det.numbers["cap"] == 1024


def test_zero_reward_needs_the_circuit_breakers_streak() -> None:
    series, _ = curves("healthy", "verl", seed=1)
    steps, values = series["critic/score/mean"]
    values = list(values)
    values[50:59] = [0.0] * 9  # nine zero steps: under the breaker's ten
    series["critic/score/mean"] = (steps, values)
    assert not [d for d in detect(_run(series), builtin_vocabulary())[0] if d.id == "zero-reward"]
    values[50:60] = [0.0] * 10
    series["critic/score/mean"] = (steps, values)
    det = next(d for d in detect(_run(series), builtin_vocabulary())[0] if d.id == "zero-reward")
    assert det.step == 51 and det.numbers["zero_points"] == 10 and not det.numbers["ongoing"]


def test_stopped_run_against_the_age_of_its_files() -> None:
    series, _ = curves("healthy", "verl", seed=1)
    t_last = 1_700_000_000.0
    rules = [r for r in builtin_rules()["rules"] if r["id"] == "run-stopped"]
    run = _run(series, last_wall=t_last, files_mtime=t_last, step_interval=30.0)
    assert detect(run, builtin_vocabulary(), rules, now=t_last + 600)[0] == []  # ten minutes: may be mid-step
    det = detect(run, builtin_vocabulary(), rules, now=t_last + 7200)[0][0]
    assert det.id == "run-stopped" and det.step == 200 and det.numbers["silent_s"] == 7200
    slow = _run(series, last_wall=t_last, files_mtime=t_last, step_interval=600.0)  # 10-minute steps: 2 h is 12 steps
    assert detect(slow, builtin_vocabulary(), rules, now=t_last + 7200)[0] == []
    run.finished = True  # an exit record: finished, however old
    assert detect(run, builtin_vocabulary(), rules, now=t_last + 7200)[0] == []


def test_long_curves_are_bounded_and_keep_spikes_and_nans() -> None:
    n = 100_000
    steps = np.arange(n)
    grad = np.ones(n)
    grad[77_777] = 500.0
    c = make_curve("actor/grad_norm", steps, grad)
    assert len(c) <= MAX_POINTS + 1 and c.total == n
    det = detectors.spike(next(r for r in builtin_rules()["rules"] if r["id"] == "grad-norm-spike"), c)
    assert det is not None and det.step <= 77_777 < det.step + math.ceil(n / MAX_POINTS)
    loss = np.zeros(n)
    loss[91_234] = np.nan
    assert make_curve("actor/pg_loss", steps, loss).first_nonfinite[0] == 91_234


@pytest.mark.parametrize("pathology,framework,onset", [
    ("length_cap", "verl", 70_013), ("entropy_collapse", "slime", 61_237), ("zero_reward", "areal", 55_551),
    ("grad_spike", "verl", 48_889), ("kl_blowup", "areal", 80_000),
])
def test_a_bucketed_curve_still_names_the_exact_first_step(pathology: str, framework: str, onset: int) -> None:
    """100,000 steps are kept as 2,000 bucket means, but the finding's step is the raw onset, not the first
    step of the bucket after it (what the buckets alone would say)."""
    series, on = curves(pathology, framework, steps=100_000, seed=5, onset=onset)
    run = _run(series)
    assert all(len(c) <= MAX_POINTS + 1 for c in run.curves.values())
    found, _keys = detect(run, builtin_vocabulary())
    hit = next(d for d in found if d.id == PATHOLOGIES[pathology])
    assert hit.step == on, (hit.step, on)


def test_rolling_spike_matches_the_plain_loop() -> None:
    """The sorted window the spike check keeps gives numpy's median of the points before each one."""
    rule = next(r for r in builtin_rules()["rules"] if r["id"] == "grad-norm-spike")
    window, factor, start = rule["window"], rule["factor"], rule["min_points"]
    rng = np.random.default_rng(7)
    for trial in range(40):
        v = np.abs(rng.normal(1, 0.3, 300))
        v[rng.integers(5, 300)] *= rng.uniform(5, 30)
        if trial % 2:
            v = np.round(v, 1)  # ties in the window
        want = next((i for i in range(start, 300) if v[i] > factor * np.median(v[max(0, i - window):i])), None)
        got = detectors.spike(rule, make_curve("g", np.arange(300), v))
        assert (got is None) == (want is None) and (got is None or got.step == want), trial
        if got is not None:
            assert got.before == pytest.approx(float(np.median(v[max(0, want - window):want])))


def test_checks_take_plain_lists_as_they_take_curves() -> None:
    """One implementation: a text log's series (plain lists) and a run's curve (numpy arrays) give the same
    detection, and the detection says at which point it starts (a text log names that point's line)."""
    series, onset = curves("entropy_collapse", "verl", seed=3)
    steps, values = series["actor/entropy"]
    rule = next(r for r in builtin_rules()["rules"] if r["id"] == "entropy-collapse")
    a = detectors.falls_below(rule, make_curve("actor/entropy", steps, values))
    b = detectors.falls_below(rule, detectors.Points("actor/entropy", list(map(int, steps)), list(map(float, values))))
    assert a is not None and b is not None and (a.step, a.before, a.after, a.index) == (b.step, b.before, b.after, b.index)
    assert int(steps[a.index]) == a.step == onset


def test_vocabulary_cites_every_framework_key_and_validates() -> None:
    import yaml
    from importlib import resources

    data = yaml.safe_load(resources.files("rlmedic.tools.runs").joinpath("vocabulary.yaml").read_text())
    for name, spec in data["concepts"].items():
        for fw in ("verl", "slime", "areal"):
            assert spec["keys"][fw].get("source") or spec["keys"][fw].get("absent"), (name, fw)
    bad = copy.deepcopy(data)
    bad["concepts"]["entropy"]["keys"]["verl"]["patterns"] = ["actor/(entropy"]
    with pytest.raises(UserError, match="bad pattern"):
        vocabulary.validate(bad)
    bad = copy.deepcopy(data)
    del bad["concepts"]["kl"]["keys"]["slime"]["source"]
    with pytest.raises(UserError, match="upstream source"):
        vocabulary.validate(bad)
    bad = copy.deepcopy(data)
    bad["concepts"]["kl"]["keys"]["megatron"] = {"patterns": ["x"], "source": "y"}
    with pytest.raises(UserError, match="unknown framework"):
        vocabulary.validate(bad)
    bad = copy.deepcopy(data)
    bad["log_series"]["reward"] = "rewardz"
    with pytest.raises(UserError, match="log_series"):
        vocabulary.validate(bad)
    bad = copy.deepcopy(data)
    bad["concepts"]["staleness"]["keys"]["slime"] = {"absent": ""}
    with pytest.raises(UserError, match="absent"):
        vocabulary.validate(bad)  # a framework without the key must say why


def test_detector_file_validates() -> None:
    data = copy.deepcopy(builtin_rules())
    data["rules"][0]["check"] = "guess"
    with pytest.raises(UserError, match="unknown check"):
        detectors.validate(data)
    data = copy.deepcopy(builtin_rules())
    data["rules"][1]["fixes"]["verl"][0]["cite"] = "nowhere"
    with pytest.raises(UserError, match="known cite"):
        detectors.validate(data)
    data = copy.deepcopy(builtin_rules())
    data["rules"].append(dict(data["rules"][0]))
    with pytest.raises(UserError, match="unique id"):
        detectors.validate(data)


def test_each_rule_names_a_real_card() -> None:
    from rlmedic.knowledge.cards import card_by_id

    for rule in builtin_rules()["rules"]:
        assert card_by_id(rule["card"]).id == rule["card"]


def test_sparkline_shape_and_marker() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([1.0, float("nan"), 1.0]) == "▄!▄"
    text = marked("actor/entropy", range(100), [1.0] * 50 + [0.0] * 50, step=50, width=10)
    first, second = text.splitlines()
    assert first.startswith("actor/entropy  █████▁▁▁▁▁  1 -> 0 (steps 0-99)")
    assert second.index("^") == len("actor/entropy  ") + 5 and second.endswith("^ step 50")


def test_text_logs_and_run_folders_read_one_vocabulary_and_one_detector_file(tmp_path) -> None:
    """A key the vocabulary maps feeds a text log's series as it feeds a run's concept; the text-log checks take
    their thresholds from detectors.yaml, and a catalog's override of one threshold still applies."""
    from rlmedic.tools.logs.diagnose import diagnose_text
    from rlmedic.tools.logs.metrics import MetricCollector
    from rlmedic.tools.logs.signatures import builtin_catalog

    vocab = builtin_vocabulary()
    mc = MetricCollector(builtin_catalog().metrics)
    for kind, concept in vocab.log_series.items():
        for fw in ("verl", "slime", "areal"):
            key = KEYS[fw].get(concept)
            if key:
                assert vocab.pick(concept, [key], fw) == key
                assert mc.kind_of(key) == kind, (key, kind)
                assert mc.framework_of(key) in (fw, None)
    assert mc.framework_of("ppo_actor/task_reward/avg") == "areal" and mc.framework_of("actor/pg_loss") == "verl"
    rules = detectors.log_rules()
    zero = next(r for r in builtin_rules()["rules"] if r["id"] == "zero-reward")
    assert rules["zero_reward"]["min_steps"] == zero["min_steps"] and rules["zero_reward"]["card"] == zero["card"]
    assert detectors.log_rules({"zero_reward": {"min_steps": 3}})["zero_reward"]["card"] == zero["card"]
    # slime's rollout/response_len/mean was no text-log series before the vocabularies were one
    text = "".join(f"step {i}: {{'rollout/response_len/mean': {300 + 100 * min(i, 6)}, 'train/loss': 0.1}}\n"
                   for i in range(1, 12))
    d = diagnose_text(text)
    assert "rollout/response_len/mean" in d.stats["metrics"]["response_length"]
    assert "response-length-cap" in [f.id for f in d.findings]


def test_a_validation_key_is_no_training_reward() -> None:
    """The text-log forms the one vocabulary took in (``.../score/mean``, ``.../reward/mean``) do not take a
    generic dump's validation keys for the training reward."""
    vocab = builtin_vocabulary()
    assert vocab.assign(["val/score/mean", "train/loss"]) == {"val_score": "val/score/mean", "loss": "train/loss"}
    assert vocab.assign(["eval/reward/mean", "train/reward"]) == {"reward": "train/reward", "val_score": "eval/reward/mean"}
    assert vocab.assign(["my/score/mean"]) == {"reward": "my/score/mean"}


def test_log_rules_validate() -> None:
    data = copy.deepcopy(builtin_rules())
    rule = next(r for r in data["rules"] if r["id"] == "no-eos")
    rule["logs"]["check"] = "guess"
    with pytest.raises(UserError, match="logs: needs a check"):
        detectors.validate(data)
    data = copy.deepcopy(builtin_rules())
    del next(r for r in data["rules"] if r["id"] == "no-eos")["logs"]
    with pytest.raises(UserError, match="unknown check"):
        detectors.validate(data)  # a rule must run somewhere: on curves or on logs


def test_one_watch_loop() -> None:
    from rlmedic.tools.logs.watch import Ticking, Watcher
    from rlmedic.tools.runs.watch import RunWatcher

    assert RunWatcher.run is Watcher.run is Ticking.run
