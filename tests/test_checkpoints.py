"""Checkpoint trees for each layout (AReaL, slime/Megatron, Hugging Face), intact and damaged."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from conftest import ANYWHERE, FIXTURES
from rlmedic.confine import Confinement
from rlmedic.errors import UserError
from rlmedic.tools.config.areal import parse_areal_config
from rlmedic.tools.checkpoints.listing import (
    Mount,
    list_checkpoints,
    mount_for,
    recovery_plan,
    storage_issues,
)
from rlmedic.ui.cli import app
from typer.testing import CliRunner

runner = CliRunner()
# trees on a real disk (pytest's tmp dirs live under /tmp: give /tmp its own disk here)
VOLUME = [Mount("/", "ext4", "/dev/sda1"), Mount(tempfile.gettempdir(), "xfs", "/dev/sdb1")]


def write(path: Path, data: bytes | str = b"\x01" * 64) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def hf_save(directory: Path, *, shards: int = 1, empty: bool = False) -> Path:
    write(directory / "config.json", '{"model_type": "qwen2"}')
    write(directory / "tokenizer.json", "{}")
    if shards == 1:
        write(directory / "model.safetensors", b"" if empty else b"\x02" * 128)
    else:
        names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
        write(directory / "model.safetensors.index.json", json.dumps({"weight_map": {f"w{i}": n for i, n in enumerate(names)}}))
        for name in names:
            write(directory / name, b"\x02" * 64)
    return directory


def areal_tree(fileroot: Path, *, exp: str = "gsm8k-grpo-cloud-1hour", trial: str = "trial_20250101_120000",
               steps: tuple[int, ...] = (49, 99, 149, 199), recover_step: int | None = 199, ranks: int = 2) -> Path:
    trial_dir = fileroot / "checkpoints" / "root" / exp / trial
    for i, step in enumerate(steps):
        hf_save(trial_dir / "default" / f"epoch{i // 2}epochstep{step % 100}globalstep{step}")
    if recover_step is not None:
        rc = trial_dir / "default" / "recover_checkpoint"
        for r in range(ranks):
            write(rc / f"__{r}_0.distcp", b"\x03" * 256)
        write(rc / ".metadata", b"\x04" * 16)
        write(trial_dir / "recover_info" / "step_info.json",
              json.dumps({"epoch": 1, "epoch_step": recover_step % 100, "global_step": recover_step, "steps_per_epoch": 100}))
        write(trial_dir / "recover_info" / "dataloader_info.pkl", b"\x80\x04N.")
    return trial_dir


def megatron_tree(save: Path, iters: tuple[int, ...] = (100, 200), tracker: str | None = "200") -> Path:
    for it in iters:
        d = save / f"iter_{it:07d}"
        write(d / "__0_0.distcp", b"\x05" * 128)
        write(d / "__1_0.distcp", b"\x05" * 128)
        write(d / ".metadata", b"\x06" * 8)
        write(d / "common.pt", b"\x07" * 8)
    if tracker is not None:
        write(save / "latest_checkpointed_iteration.txt", tracker)
    return save


def tree_fingerprint(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


# --------------------------------------------------------------------------- AReaL


def test_areal_listing_steps_sizes_and_names(tmp_path: Path) -> None:
    areal_tree(tmp_path)
    report = list_checkpoints(tmp_path, mounts=VOLUME, confinement=ANYWHERE)
    assert report.layout == "areal"
    hf = [c for c in report.checkpoints if c.kind == "areal_hf"]
    assert [c.step for c in hf] == [49, 99, 149, 199]
    assert hf[2].epoch == 1 and hf[2].epoch_step == 49
    assert all(c.valid and c.size_bytes > 0 and c.mtime > 0 for c in hf)
    assert (hf[0].user, hf[0].experiment, hf[0].trial, hf[0].role) == ("root", "gsm8k-grpo-cloud-1hour", "trial_20250101_120000", "default")
    recover = [c for c in report.checkpoints if c.kind == "areal_recover"]
    assert [(c.step, c.ranks, c.valid) for c in recover] == [(199, 2, True)]
    assert report.experiments == {"gsm8k-grpo-cloud-1hour": ["trial_20250101_120000"]}
    assert [i.id for i in report.issues] == []


def test_any_level_of_the_tree_works(tmp_path: Path) -> None:
    trial_dir = areal_tree(tmp_path)
    for root in (tmp_path / "checkpoints", tmp_path / "checkpoints" / "root", trial_dir):
        report = list_checkpoints(root, mounts=VOLUME, confinement=ANYWHERE)
        assert len(report.checkpoints) == 5, root


def test_auto_recover_plan(tmp_path: Path) -> None:
    areal_tree(tmp_path)
    report = list_checkpoints(tmp_path, mounts=VOLUME, confinement=ANYWHERE)
    plan = recovery_plan(report)
    assert plan.mode == "auto-recover" and plan.resume_from.step == 199
    assert plan.config_lines == ["experiment_name=gsm8k-grpo-cloud-1hour", "trial_name=trial_20250101_120000", "recover.mode=auto"]
    assert "recover.mode=auto" in plan.command and "areal.launcher.local" in plan.command
    assert any("batch_size" in k for k in plan.keep_unchanged) and any("n_samples" in k for k in plan.keep_unchanged)
    assert any("n_nodes" in k for k in plan.keep_unchanged)


def test_step_188_before_step(tmp_path: Path) -> None:
    """Seed 004: rewards collapsed at step 188; the recovery checkpoint (199) is already past it."""
    areal_tree(tmp_path)
    report = list_checkpoints(tmp_path, before_step=188, mounts=VOLUME, confinement=ANYWHERE)
    assert [c.step for c in report.selected()] == [49, 99, 149]
    plan = recovery_plan(report)
    assert plan.mode == "from-weights" and plan.resume_from.step == 149
    assert f"actor.path={plan.resume_from.path}" in plan.config_lines and "recover.mode=auto" in plan.config_lines
    assert "trial_name=trial_20250101_120000_from_step149" in plan.config_lines
    assert any("not before step 188" in n for n in plan.notes)
    data = report.to_dict()
    assert [c["step"] for c in data["checkpoints"]] == [49, 99, 149] and data["all_checkpoints"] == 5
    cites = recovery_plan(report).to_dict()["citations"]
    assert [c["text"] for c in cites] == [str(c) for c in plan.citations] and cites[0]["kind"] == "card"
    assert any(c["kind"] == "doc" and c["ref"] == "AReaL docs/en/reference/checkpointing.md" for c in cites)


def test_from_weights_plan_pins_ref_path_when_the_config_derives_it_from_actor_path(tmp_path: Path) -> None:
    """actor.path=<saved weights> would carry ref.path: ${actor.path} along: the KL reference must stay the base model."""
    areal_tree(tmp_path)
    report = list_checkpoints(tmp_path, before_step=188, mounts=VOLUME, confinement=ANYWHERE)
    derived = parse_areal_config("actor:\n  path: Qwen/Qwen2.5-1.5B-Instruct\nref:\n  path: ${actor.path}\n")
    plan = recovery_plan(report, config=derived)
    assert plan.mode == "from-weights"
    assert "ref.path=Qwen/Qwen2.5-1.5B-Instruct" in plan.config_lines
    assert plan.config_lines.index("ref.path=Qwen/Qwen2.5-1.5B-Instruct") > plan.config_lines.index(f"actor.path={plan.resume_from.path}")
    assert "ref.path=Qwen/Qwen2.5-1.5B-Instruct" in plan.command
    assert any("ref.path is pinned to the base model" in n for n in plan.notes)
    # a ref.path of its own is left alone, and without a config the plan only says to keep it
    own = parse_areal_config("actor:\n  path: Qwen/Qwen2.5-1.5B-Instruct\nref:\n  path: /models/base\n")
    for config in (own, None):
        plan = recovery_plan(report, config=config)
        assert not any(line.startswith("ref.path=") for line in plan.config_lines)
        assert any("keep ref.path on the original base model" in n for n in plan.notes)


def test_plan_lists_what_differs_in_the_new_config(tmp_path: Path) -> None:
    areal_tree(tmp_path, ranks=4)
    report = list_checkpoints(tmp_path, mounts=VOLUME, confinement=ANYWHERE)
    config = parse_areal_config(
        f"experiment_name: gsm8k-grpo-cloud-1hour\ntrial_name: trial0\ncluster:\n  fileroot: {tmp_path}\n"
        "actor:\n  backend: fsdp:d8\ntrain_dataset:\n  batch_size: 4\ngconfig:\n  n_samples: 4\n"
    )
    plan = recovery_plan(report, config=config)
    assert any(d.startswith("trial_name: config has 'trial0'") for d in plan.differences)
    assert any("written by 4 rank(s)" in d and "fsdp:d8" in d for d in plan.differences)
    assert "train_dataset.batch_size = 4" in plan.keep_unchanged


def test_name_filters_and_mismatch_hints(tmp_path: Path) -> None:
    areal_tree(tmp_path)
    areal_tree(tmp_path, trial="trial_20250102_080000", steps=(10,), recover_step=None)
    report = list_checkpoints(tmp_path, trial_name="trial_20250102_080000", mounts=VOLUME, confinement=ANYWHERE)
    assert [c.step for c in report.checkpoints] == [10]
    report = list_checkpoints(tmp_path, experiment_name="gsm8k-grpo-cloud-1hr", mounts=VOLUME, confinement=ANYWHERE)
    issue = next(i for i in report.issues if i.id == "name-mismatch")
    assert "did you mean experiment 'gsm8k-grpo-cloud-1hour'" in issue.message
    assert issue.citation.ref == "recovery-config-changed"
    # one message: the mismatch lists what exists, so no second "no checkpoints under ROOT" contradicts it
    assert [i.id for i in report.issues if i.severity == "error"] == ["name-mismatch"]
    data = next(i for i in report.to_dict()["issues"] if i["id"] == "name-mismatch")
    assert data["message"] == issue.message and data["severity"] == issue.severity
    assert data["citation"]["ref"] == "recovery-config-changed" and data["citation"]["text"] == str(issue.citation)


def test_damaged_areal_checkpoints(tmp_path: Path) -> None:
    trial_dir = areal_tree(tmp_path, steps=(49, 99, 149))
    (trial_dir / "default" / "epoch0epochstep49globalstep49" / "model.safetensors").write_bytes(b"")
    sharded = hf_save(trial_dir / "default" / "epoch1epochstep0globalstep100", shards=3)
    (sharded / "model-00002-of-00003.safetensors").unlink()
    (trial_dir / "default" / "epoch0epochstep99globalstep99" / "config.json").unlink()
    (trial_dir / "recover_info" / "step_info.json").write_text("{not json")
    (trial_dir / "default" / "recover_checkpoint" / ".metadata").unlink()
    report = list_checkpoints(tmp_path, mounts=VOLUME, confinement=ANYWHERE)
    by_step = {c.step: c for c in report.checkpoints if c.kind == "areal_hf"}
    assert "empty weight file" in by_step[49].issues[0]
    assert "no config.json" in by_step[99].issues[0]
    assert "model-00002-of-00003.safetensors" in by_step[100].issues[0]
    assert by_step[149].valid
    recover = next(c for c in report.checkpoints if c.kind == "areal_recover")
    assert any("does not parse" in i for i in recover.issues) and any(".metadata" in i for i in recover.issues)
    assert any(i.severity == "error" and i.citation.ref == "recover-checkpoint-invalid" for i in report.issues)
    plan = recovery_plan(report)
    assert plan.mode == "from-weights" and plan.resume_from.step == 149
    assert any("damaged" in n for n in plan.notes)


def test_older_recover_layout_with_step_info_inside(tmp_path: Path) -> None:
    trial_dir = tmp_path / "checkpoints" / "root" / "exp" / "trial"
    rc = trial_dir / "recover_checkpoint"
    write(rc / "__0_0.distcp", b"\x01" * 8)
    write(rc / ".metadata", b"\x01")
    write(rc / "step_info.json", json.dumps({"epoch": 0, "epoch_step": 41, "global_step": 41, "steps_per_epoch": 100}))
    report = list_checkpoints(tmp_path, mounts=VOLUME, confinement=ANYWHERE)
    (c,) = report.checkpoints
    assert (c.kind, c.step, c.experiment, c.trial, c.valid) == ("areal_recover", 41, "exp", "trial", True)
    assert recovery_plan(report).mode == "auto-recover"


def test_no_recover_checkpoint_and_nothing_at_all(tmp_path: Path) -> None:
    areal_tree(tmp_path / "a", recover_step=None, steps=(20,))
    plan = recovery_plan(list_checkpoints(tmp_path / "a", mounts=VOLUME, confinement=ANYWHERE))
    assert plan.mode == "from-weights" and any("recover.freq" in n for n in plan.notes)
    (tmp_path / "empty").mkdir()
    report = list_checkpoints(tmp_path / "empty", mounts=VOLUME, confinement=ANYWHERE)
    assert report.layout == "empty" and [i.id for i in report.issues] == ["no-checkpoints"]
    assert report.issues[0].citation.ref == "no-checkpoints-found"
    assert recovery_plan(report).mode == "none"


# --------------------------------------------------------------------------- slime / Megatron


def test_megatron_listing_and_resume(tmp_path: Path) -> None:
    save = megatron_tree(tmp_path / "ckpt")
    report = list_checkpoints(save, mounts=VOLUME, confinement=ANYWHERE)
    assert report.layout == "slime" and report.tracker_iteration == 200
    assert [(c.step, c.valid) for c in report.checkpoints] == [(100, True), (200, True)]
    plan = recovery_plan(report)
    assert plan.mode == "megatron-load" and plan.config_lines == ["--load", str(save)]
    report = list_checkpoints(save, before_step=150, mounts=VOLUME, confinement=ANYWHERE)
    plan = recovery_plan(report)
    assert plan.config_lines == ["--load", str(save), "--ckpt-step", "100"]


def test_megatron_tracker_problems(tmp_path: Path) -> None:
    missing = megatron_tree(tmp_path / "a", tracker="300")
    ids = [i.id for i in list_checkpoints(missing, mounts=VOLUME, confinement=ANYWHERE).issues]
    assert ids == ["tracker-missing-iter"]
    behind = megatron_tree(tmp_path / "b", iters=(100, 200), tracker="100")
    report = list_checkpoints(behind, mounts=VOLUME, confinement=ANYWHERE)
    assert [i.id for i in report.issues] == ["tracker-behind"]
    assert recovery_plan(report).config_lines == ["--load", str(behind)]  # what the tracker names
    absent = megatron_tree(tmp_path / "c", tracker=None)
    issues = list_checkpoints(absent, mounts=VOLUME, confinement=ANYWHERE).issues
    assert [i.id for i in issues] == ["tracker-absent"] and issues[0].citation.ref == "megatron-tracker-file"
    garbage = megatron_tree(tmp_path / "d", tracker="latest")
    assert [i.id for i in list_checkpoints(garbage, mounts=VOLUME, confinement=ANYWHERE).issues] == ["tracker-invalid"]


def test_megatron_release_tracker(tmp_path: Path) -> None:
    """A tracker reading 'release' names {save}/release/ (converted weights, no iteration), not iteration 0."""
    save = megatron_tree(tmp_path / "converted", iters=(), tracker="release\n")
    write(save / "release" / "__0_0.distcp", b"\x05" * 128)
    write(save / "release" / ".metadata", b"\x06" * 8)
    report = list_checkpoints(save, mounts=VOLUME, confinement=ANYWHERE)
    assert report.layout == "slime" and report.tracker_release and report.tracker_iteration is None
    assert [(c.kind, c.step, c.path, c.valid) for c in report.checkpoints] == [("megatron", None, str(save / "release"), True)]
    assert report.issues == []
    assert report.to_dict()["tracker_release"] is True
    plan = recovery_plan(report)
    assert plan.mode == "megatron-load" and plan.resume_from.path == str(save / "release")
    assert plan.config_lines == ["--load", str(save)]  # no --ckpt-step: the tracker already names release/
    assert any("iteration 0" in n and "optimizer" in n for n in plan.notes)
    # iterations saved next to it: still what the tracker names, and the newer iteration is pointed out
    megatron_tree(save, iters=(100,), tracker="release")
    report = list_checkpoints(save, mounts=VOLUME, confinement=ANYWHERE)
    assert [i.id for i in report.issues] == ["tracker-behind"] and "--ckpt-step 100" in report.issues[0].message
    plan = recovery_plan(report)
    assert plan.resume_from.path == str(save / "release") and plan.config_lines == ["--load", str(save)]
    assert any("--ckpt-step 100" in n for n in plan.notes)
    assert recovery_plan(list_checkpoints(save, before_step=150, mounts=VOLUME, confinement=ANYWHERE)).config_lines == [
        "--load", str(save), "--ckpt-step", "100"]


def test_megatron_release_tracker_problems(tmp_path: Path) -> None:
    missing = megatron_tree(tmp_path / "a", iters=(), tracker="release")
    report = list_checkpoints(missing, mounts=VOLUME, confinement=ANYWHERE)
    assert report.layout == "slime" and [i.id for i in report.issues] == ["tracker-missing-release", "no-checkpoints"]
    assert "release/ does not exist" in report.issues[0].message
    assert report.issues[0].citation.ref == "megatron-tracker-file"
    plan = recovery_plan(report)
    assert plan.mode == "none" and "release/" in plan.notes[0]
    empty = megatron_tree(tmp_path / "b", iters=(), tracker="release")
    (empty / "release").mkdir()
    report = list_checkpoints(empty, mounts=VOLUME, confinement=ANYWHERE)
    assert [c.issues for c in report.checkpoints] == [["empty release directory (the conversion to a Megatron checkpoint did not finish)"]]
    assert [(i.id, i.severity) for i in report.issues] == [("damaged-checkpoint", "error")]
    assert recovery_plan(report).mode == "none"
    no_weights = megatron_tree(tmp_path / "c", iters=(100,), tracker="release")
    write(no_weights / "release" / "README.txt", "converted from HF")
    report = list_checkpoints(no_weights, mounts=VOLUME, confinement=ANYWHERE)
    assert [i.id for i in report.issues] == ["tracker-behind", "damaged-checkpoint"]
    plan = recovery_plan(report)  # the damaged release/ cannot be loaded: the intact iteration, named explicitly
    assert plan.config_lines == ["--load", str(no_weights), "--ckpt-step", "100"]
    # a directory called release/ beside a numeric tracker is not a checkpoint: behaviour unchanged
    numeric = megatron_tree(tmp_path / "d")
    write(numeric / "release" / "__0_0.distcp", b"\x05" * 128)
    report = list_checkpoints(numeric, mounts=VOLUME, confinement=ANYWHERE)
    assert [c.step for c in report.checkpoints] == [100, 200] and report.tracker_iteration == 200
    assert not report.tracker_release and report.issues == []
    assert recovery_plan(report).config_lines == ["--load", str(numeric)]


def test_megatron_release_tracker_in_the_cli(tmp_path: Path) -> None:
    save = megatron_tree(tmp_path / "converted", iters=(), tracker="release")
    write(save / "release" / "mp_rank_00" / "model_optim_rng.pt", b"\x05" * 128)
    result = runner.invoke(app, ["checkpoints", str(save), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["tracker_release"] is True and data["tracker_iteration"] is None
    assert [(c["path"], c["step"], c["valid"]) for c in data["checkpoints"]] == [(str(save / "release"), None, True)]
    assert data["plan"]["config_lines"] == ["--load", str(save)]
    human = runner.invoke(app, ["checkpoints", str(save)])
    assert "latest_checkpointed_iteration.txt: release" in human.output


def test_interrupted_megatron_save(tmp_path: Path) -> None:
    save = megatron_tree(tmp_path / "ckpt", iters=(100,), tracker="100")
    (save / "iter_0000200").mkdir()
    write(save / "iter_0000300" / "__0_0.distcp", b"\x01")
    report = list_checkpoints(save, mounts=VOLUME, confinement=ANYWHERE)
    by_step = {c.step: c for c in report.checkpoints}
    assert "empty iteration directory" in by_step[200].issues[0]
    assert ".metadata" in by_step[300].issues[0]
    plan = recovery_plan(report)
    assert plan.resume_from.step == 100


def test_slime_plan_differences(tmp_path: Path) -> None:
    from rlmedic.tools.config.slime import parse_slime_args

    save = megatron_tree(tmp_path / "ckpt")
    report = list_checkpoints(save, mounts=VOLUME, confinement=ANYWHERE)
    plan = recovery_plan(report, config=parse_slime_args(["--save", str(save), "--load", "/root/base"]))
    assert plan.differences == [f"--load is /root/base: it must point at {save}"]


# --------------------------------------------------------------------------- plain HF, storage, safety


def test_plain_hf_dirs(tmp_path: Path) -> None:
    hf_save(tmp_path / "run" / "checkpoint-500")
    hf_save(tmp_path / "run" / "checkpoint-1000", empty=True)
    report = list_checkpoints(tmp_path, mounts=VOLUME, confinement=ANYWHERE)
    assert report.layout == "hf"
    assert [(c.step, c.valid) for c in report.checkpoints] == [(500, True), (1000, False)]
    plan = recovery_plan(report)
    assert plan.mode == "from-weights" and plan.resume_from.step == 500


def test_a_damaged_newest_hf_save_exits_1_an_older_one_only_warns(tmp_path: Path) -> None:
    """README and --help: exit 1 when the checkpoint a resume would load is damaged."""
    hf_save(tmp_path / "run" / "checkpoint-500")
    hf_save(tmp_path / "run" / "checkpoint-1000", empty=True)
    result = runner.invoke(app, ["checkpoints", str(tmp_path), "--json"])
    assert result.exit_code == 1, result.output
    [issue] = [i for i in json.loads(result.stdout)["issues"] if i["id"] == "damaged-checkpoint"]
    assert issue["severity"] == "error" and "checkpoint-1000" in issue["file"]
    older = tmp_path / "older"
    hf_save(older / "run" / "checkpoint-500", empty=True)
    hf_save(older / "run" / "checkpoint-1000")
    result = runner.invoke(app, ["checkpoints", str(older), "--json"])
    assert result.exit_code == 0, result.output
    assert [i["severity"] for i in json.loads(result.stdout)["issues"] if i["id"] == "damaged-checkpoint"] == ["warning"]


def test_storage_warnings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    areal_tree(tmp_path)
    overlay = [Mount("/", "overlay", "overlay")]
    volume = [Mount("/", "overlay", "overlay"), Mount(str(tmp_path), "nfs4", "server:/vol")]
    assert [i.id for i in list_checkpoints(tmp_path, mounts=overlay, confinement=ANYWHERE).issues] == ["ephemeral-storage"]
    assert list_checkpoints(tmp_path, mounts=volume, confinement=ANYWHERE).issues == []
    monkeypatch.chdir(tmp_path)
    report = list_checkpoints("checkpoints", mounts=volume, confinement=ANYWHERE)
    assert [i.id for i in report.issues] == ["relative-root"]
    assert report.issues[0].citation.ref == "checkpoints-not-on-persistent-volume"
    assert mount_for("/workspace/outputs/x", [Mount("/", "overlay"), Mount("/workspace", "fuse")]).mountpoint == "/workspace"
    assert [i.id for i in storage_issues("/tmp/x", Path("/tmp/x"), [Mount("/", "ext4")])] == ["ephemeral-storage"]
    assert storage_issues("/tmp/x", Path("/tmp/x"), [Mount("/", "ext4"), Mount("/tmp", "xfs")]) == []


def test_listing_is_read_only_and_confined(tmp_path: Path) -> None:
    root = tmp_path / "root"
    areal_tree(root)
    secret = write(tmp_path / "outside" / "iter_0000999" / "__0_0.distcp")
    (root / "checkpoints" / "escape").symlink_to(secret.parent.parent, target_is_directory=True)
    before = tree_fingerprint(root)
    report = list_checkpoints(root, before_step=150, mounts=VOLUME, confinement=ANYWHERE)
    recovery_plan(report)
    assert tree_fingerprint(root) == before
    assert all("outside" not in c.path for c in report.checkpoints)
    with pytest.raises(UserError):
        list_checkpoints(root, confinement=Confinement(roots=[tmp_path / "elsewhere"]))


def test_huge_trees_stop_at_the_cap(tmp_path: Path) -> None:
    areal_tree(tmp_path)
    report = list_checkpoints(tmp_path, max_entries=10, mounts=VOLUME, confinement=ANYWHERE)
    assert report.truncated and any(i.id == "truncated" for i in report.issues)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a directory"):
        list_checkpoints(write(tmp_path / "f"), confinement=ANYWHERE)


# --------------------------------------------------------------------------- CLI


def test_cli_checkpoints_json(tmp_path: Path) -> None:
    areal_tree(tmp_path)
    result = runner.invoke(app, ["checkpoints", str(tmp_path), "--before-step", "188", "--json",
                                 "--experiment-name", "gsm8k-grpo-cloud-1hour"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [c["step"] for c in data["checkpoints"]] == [49, 99, 149]
    assert data["plan"]["mode"] == "from-weights"
    assert all({"step", "time", "size_bytes", "valid", "path"} <= set(c) for c in data["checkpoints"])


def test_cli_checkpoints_text_with_config(tmp_path: Path) -> None:
    areal_tree(tmp_path / "out")
    config = tmp_path / "c.yaml"
    config.write_text("experiment_name: gsm8k-grpo-cloud-1hour\ntrial_name: trial_20250101_120000\n")
    result = runner.invoke(app, ["checkpoints", str(tmp_path / "out"), "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "Recovery plan (areal, auto-recover)" in result.stdout
    assert "recover.mode=auto" in result.stdout and "step     199" in result.stdout


def test_cli_checkpoints_missing_root(tmp_path: Path) -> None:
    result = runner.invoke(app, ["checkpoints", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_fixture_dirs_exist() -> None:
    assert FIXTURES.is_dir() and os.access(FIXTURES, os.R_OK)


class _Unreadable(Confinement):
    """What a walk sees as another user: these directories cannot be listed (root can read anything,
    so the permission error is reproduced by the confinement the tool is given)."""

    def __init__(self, root: Path, hidden: list[Path]) -> None:
        super().__init__(roots=[root.resolve()])
        self.hidden = [h.resolve() for h in hidden]

    def walk_files(self, path, max_entries=200_000):  # noqa: ANN001, ANN202
        result = super().walk_files(path, max_entries)
        inside = lambda p: any(p == h or h in p.parents for h in self.hidden)  # noqa: E731
        result.files = [f for f in result.files if not inside(f.path)]
        result.dirs = [d for d in result.dirs if not inside(d) or d in self.hidden]
        result.unreadable += self.hidden
        return result


def test_unreadable_directories_are_not_called_interrupted_saves(tmp_path: Path) -> None:
    """An iter_* directory the user may not read used to be reported as 'empty (the save was interrupted)'."""
    save = megatron_tree(tmp_path / "ckpt", iters=(100, 200), tracker="200")
    (save / "private").mkdir()
    conf = _Unreadable(save, [save / "iter_0000200", save / "private"])
    report = list_checkpoints(save, confinement=conf, mounts=VOLUME)
    by_step = {c.step: c for c in report.checkpoints}
    assert by_step[100].valid and not by_step[100].unreadable
    assert by_step[200].unreadable and not by_step[200].valid
    assert "cannot read" in by_step[200].issues[0] and "interrupted" not in by_step[200].issues[0]
    assert any(i.id == "unreadable" and "private" in i.message for i in report.issues)
    assert recovery_plan(report).resume_from.step == 100  # an unchecked checkpoint is not resumed from blindly
    assert by_step[200].to_dict()["unreadable"] is True


def test_tracker_with_an_absurd_number_is_invalid(tmp_path: Path) -> None:
    save = megatron_tree(tmp_path / "ckpt", iters=(100,), tracker="9" * 5000)
    report = list_checkpoints(save, mounts=VOLUME, confinement=ANYWHERE)
    assert [i.id for i in report.issues] == ["tracker-invalid"]
    assert report.tracker_iteration is None and len(report.issues[0].message) < 300


def test_plan_never_shows_secrets_from_the_config(tmp_path: Path) -> None:
    """The plan quotes config values it compares (cluster.fileroot): a URL with credentials leaked."""
    fileroot = tmp_path / "fileroot"
    areal_tree(fileroot, exp="e", trial="t", steps=(5,), recover_step=None)
    config = write(tmp_path / "c.yaml", "experiment_name: e\ntrial_name: t\ncluster:\n"
                   "  fileroot: s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI@bucket/areal\n")
    for extra in ([], ["--json"]):
        result = runner.invoke(app, ["checkpoints", str(fileroot), "--config", str(config), *extra])
        assert result.exit_code == 0, result.output
        assert "cluster.fileroot" in result.stdout and "[REDACTED]" in result.stdout
        assert "AKIAIOSFODNN7EXAMPLE" not in result.stdout and "wJalrXUtnFEMI" not in result.stdout
