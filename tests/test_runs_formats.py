"""Metric dumps read in bulk: JSONL through orjson (with ``json`` for the lines it refuses), in
chunks of rows, and the CSV files TensorBoard's scalars dashboard downloads (one tag per file),
produced here by tensorboard's own scalars plugin from a run torch's SummaryWriter wrote."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from rlmedic.tools.runs import dumps
from rlmedic.tools.runs.diagnose import diagnose_runs, run_kind
from rlmedic.tools.runs.vocabulary import builtin_vocabulary

from runs_data import KEYS, curves, rows, write_tensorboard

HAVE_TB = importlib.util.find_spec("tensorboard") is not None


def test_jsonl_rows_with_nan_nulls_nested_objects_and_a_torn_line(tmp_path: Path, monkeypatch) -> None:
    """Python's json writes NaN/Infinity (orjson refuses them: those lines go through json); null is NaN; a
    nested object is flattened; a torn last line and a stray text line are skipped; chunks join up."""
    monkeypatch.setattr(dumps, "CHUNK_ROWS", 7)  # several chunks, groups cut across them
    path = tmp_path / "metrics.jsonl"
    lines = []
    for step in range(1, 41):
        row = {"step": step, "actor/entropy": 1.0 / step, "actor/grad_norm": float(step), "note": "text"}
        if step == 13:
            row["actor/grad_norm"] = math.nan
        if step == 20:
            row["actor/entropy"] = None
        if step == 25:
            row["actor"] = {"pg_loss": 0.5}  # a nested object: actor/pg_loss
        if step % 10 == 0:
            row["val-core/gsm8k/reward/mean@1"] = step / 100
        lines.append(json.dumps(row))
    lines.insert(5, "not json at all")
    path.write_text("\n".join(lines) + '\n{"step": 41, "actor/entr')
    run = dumps.read_dump(path, builtin_vocabulary().step_keys)
    ent, grad = run.curves["actor/entropy"], run.curves["actor/grad_norm"]
    assert ent.steps.tolist() == list(range(1, 41)) and grad.total == 40
    assert math.isnan(ent.values[19]) and ent.values[0] == 1.0 and ent.values[39] == 1 / 40
    assert run.curves["actor/grad_norm"].first_nonfinite == (13, math.nan) or math.isnan(grad.first_nonfinite[1])
    assert grad.first_nonfinite[0] == 13
    assert run.curves["actor/pg_loss"].steps.tolist() == [25]
    assert run.curves["val-core/gsm8k/reward/mean@1"].steps.tolist() == [10, 20, 30, 40]
    assert "note" not in run.curves and "note" in run.keys and "step" not in run.keys


def test_jsonl_keep_parses_only_the_columns_the_checks_read(tmp_path: Path) -> None:
    series, onset = curves("entropy_collapse", "verl", seed=8, onset=77)
    path = tmp_path / "metrics.jsonl"
    with open(path, "w") as fh:
        for step, data in rows(series):
            fh.write(json.dumps({"step": step, **data, **{f"actor/extra_{i}": i * 0.5 for i in range(30)}}) + "\n")
    vocab = builtin_vocabulary()
    run = dumps.read_dump(path, vocab.step_keys, keep=vocab.known)
    assert set(series) <= set(run.curves) and not any(k.startswith("actor/extra_") for k in run.curves)
    assert len(run.keys) == len(series) + 30
    d = diagnose_runs([path])
    assert d.root_finding.id == "entropy-collapse" and d.root_finding.evidence["step"] == onset
    assert d.stats["runs"][0]["curves"] == len(series) + 30  # every key is still counted


def _download_csvs(logdir: Path, out: Path) -> list[Path]:
    """What TensorBoard's dashboard downloads: the scalars plugin's CSV for each (run, tag), saved under the
    name the page gives it (``run-<run>-tag-<tag>.csv``, the tag's ``/`` written ``_``)."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.scalar import scalars_plugin

    mux = plugin_event_multiplexer.EventMultiplexer(size_guidance={"scalars": 0, "tensors": 0})
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, str(logdir))
    plugin = scalars_plugin.ScalarsPlugin(base_plugin.TBContext(data_provider=provider,
                                                                sampling_hints={"scalars": 100_000}))
    ctx = context.RequestContext()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for run, tags in plugin.index_impl(ctx, experiment="").items():
        for tag in tags:
            body, mime = plugin.scalars_impl(ctx, tag, run, "", scalars_plugin.OutputFormat.CSV)
            assert mime == "text/csv" and body.startswith("Wall time,Step,Value")
            path = out / f"run-{run}-tag-{tag.replace('/', '_')}.csv"
            path.write_text(body)
            written.append(path)
    return written


@pytest.mark.skipif(not HAVE_TB, reason="the tensorboard extra is not installed (CI installs it)")
@pytest.mark.parametrize("pathology,framework,rule,concept", [
    ("length_cap", "verl", "length-cap", "truncation_ratio"),
    ("entropy_collapse", "slime", "entropy-collapse", "entropy"),
])
def test_tensorboard_csv_downloads_are_read_with_their_tags(tmp_path: Path, pathology, framework, rule, concept) -> None:
    series, onset = curves(pathology, framework, seed=51, onset=120)
    write_tensorboard(tmp_path / "tb", series)
    files = _download_csvs(tmp_path / "tb", tmp_path / "downloads")
    assert len(files) == len(series)
    folder = tmp_path / "downloads"
    assert run_kind(folder) == "tb-csv"
    d = diagnose_runs([folder])
    root = d.root_finding
    assert root.id == rule and root.evidence["metric"] == KEYS[framework][concept] and root.evidence["step"] == onset
    assert d.stats["frameworks"] == [framework]
    # a zip of them (what the web app and Slack take) is the same run
    import zipfile

    archive = tmp_path / "downloads.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in files:
            zf.write(f, f"downloads/{f.name}")
    assert run_kind(archive) == "zip"
    dz = diagnose_runs([archive])
    assert dz.root_finding.id == rule and dz.root_finding.evidence["step"] == onset
    # one file alone is a dump whose tag is its name's
    one = next(f for f in files if f.name.endswith(KEYS[framework][concept].replace("/", "_") + ".csv"))
    assert run_kind(one) == "dump"
    d1 = diagnose_runs([one])
    assert d1.stats["runs"][0]["concepts"] == {concept: KEYS[framework][concept]}


def test_tensorboard_csv_downloads_of_two_runs_in_one_folder_is_one_clear_line(tmp_path: Path) -> None:
    from rlmedic.errors import UserError

    for run in ("exp1", "exp2"):
        (tmp_path / f"run-{run}-tag-actor_entropy.csv").write_text("Wall time,Step,Value\n1700000000.5,1,0.9\n")
    with pytest.raises(UserError, match="2 runs"):
        diagnose_runs([tmp_path])


def test_export_key_restores_slashes_the_vocabulary_knows() -> None:
    vocab = builtin_vocabulary()
    assert vocab.export_key("actor_entropy") == "actor/entropy"
    assert vocab.export_key("response_length_clip_ratio") == "response_length/clip_ratio"
    assert vocab.export_key("ppo_actor_update_approx_kl_avg") == "ppo_actor/update/approx_kl/avg"
    assert vocab.export_key("my_custom_metric") == "my_custom_metric"
