"""Large checkpoint trees: only the newest step folders are read file by file; the answer stays right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ANYWHERE
from rlmedic.tools.checkpoints import listing
from rlmedic.tools.checkpoints.listing import list_checkpoints, recovery_plan
from test_checkpoints import VOLUME, areal_tree, megatron_tree, write


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "LAZY_LIMIT", 10)
    monkeypatch.setattr(listing, "DETAIL", 3)
    monkeypatch.setattr(listing, "LIST_LIMIT", 8)


def _facts(report) -> list[tuple]:
    return [(c.step, c.kind, c.path, c.valid, c.size_bytes, c.files, tuple(c.issues)) for c in report.checkpoints]


def test_the_newest_are_checked_exactly_as_in_a_full_listing(tmp_path: Path, monkeypatch, small_limits) -> None:
    trial = areal_tree(tmp_path / "root", steps=tuple(range(10, 310, 10)), recover_step=300)
    large = list_checkpoints(tmp_path / "root", mounts=VOLUME, confinement=ANYWHERE)
    monkeypatch.setattr(listing, "LAZY_LIMIT", 10_000)
    full = list_checkpoints(tmp_path / "root", mounts=VOLUME, confinement=ANYWHERE)
    assert large.total == len(full.checkpoints) == 31 and len(large.checkpoints) < 31
    checked = [c for c in large.checkpoints if c.checked]
    assert len(checked) == 4  # the newest 3 step folders and the recovery checkpoint
    full_by_path = {c.path: c for c in full.checkpoints}
    for c in checked:
        f = full_by_path[c.path]
        assert (c.step, c.valid, c.size_bytes, c.files, c.issues) == (f.step, f.valid, f.size_bytes, f.files, f.issues)
    older = [c for c in large.checkpoints if not c.checked]
    assert older and all(not c.valid and not c.issues and c.files == 0 for c in older)
    assert recovery_plan(large).to_dict() == recovery_plan(full).to_dict()
    assert any(i.id == "large-tree" for i in large.issues)
    data = large.to_dict()
    assert data["all_checkpoints"] == 31 and data["listed"] == 8 and len(data["checkpoints"]) == 8
    assert data["checkpoints"][-1]["step"] == 300 and data["checkpoints"][0]["checked"] is False
    assert trial.is_dir()


def test_when_the_newest_are_damaged_it_looks_further_back(tmp_path: Path, small_limits) -> None:
    save = megatron_tree(tmp_path / "ckpt", iters=tuple(range(100, 2100, 100)), tracker="2000")
    for it in (1800, 1900, 2000):  # the last three saves were cut: empty shards
        for shard in (save / f"iter_{it:07d}").glob("*.distcp"):
            shard.write_bytes(b"")
    report = list_checkpoints(save, mounts=VOLUME, confinement=ANYWHERE)
    latest = report.latest()
    assert latest is not None and latest.step == 1700 and latest.checked
    assert {c.step for c in report.checkpoints if not c.valid and c.checked} >= {1800, 1900, 2000}


def test_before_step_checks_the_newest_before_it(tmp_path: Path, small_limits) -> None:
    areal_tree(tmp_path / "root", steps=tuple(range(10, 310, 10)), recover_step=None)
    report = list_checkpoints(tmp_path / "root", before_step=105, mounts=VOLUME, confinement=ANYWHERE)
    assert report.latest().step == 100
    assert [c.step for c in report.selected() if c.checked] == [80, 90, 100]


def test_a_hundred_thousand_names_without_a_stat_each(tmp_path: Path, monkeypatch) -> None:
    """Only the newest folders are stat'ed: count the stats of a 3,000-folder tree."""
    base = tmp_path / "save"
    for it in range(1, 3001):
        (base / f"iter_{it:07d}").mkdir(parents=True)
    for it in (2999, 3000):
        write(base / f"iter_{it:07d}" / "__0_0.distcp", b"\x05" * 8)
        write(base / f"iter_{it:07d}" / ".metadata", b"\x06")
    write(base / "latest_checkpointed_iteration.txt", "3000")
    calls = []
    real_stat = listing.os.stat
    monkeypatch.setattr(listing.os, "stat", lambda *a, **k: calls.append(a[0]) or real_stat(*a, **k))
    report = list_checkpoints(base, mounts=VOLUME, confinement=ANYWHERE)
    assert report.latest().step == 3000 and report.total == 3000
    assert len(calls) < 50
    json.dumps(report.to_dict())


def test_hugging_face_saves_of_a_large_tree_are_all_listed(tmp_path: Path, small_limits) -> None:
    from test_checkpoints import hf_save

    for step in range(100, 2100, 100):
        hf_save(tmp_path / "out" / f"checkpoint-{step}")
    report = list_checkpoints(tmp_path / "out", mounts=VOLUME, confinement=ANYWHERE)
    assert report.layout == "hf" and report.total == 20
    assert [c.step for c in report.checkpoints if c.checked] == [1800, 1900, 2000]
    assert report.latest().step == 2000 and report.latest().size_bytes > 0


def test_a_yaml_bomb_config_is_refused_before_the_tree_is_scanned(tmp_path: Path, monkeypatch) -> None:
    from rlmedic.tools.registry import REGISTRY, ToolContext

    areal_tree(tmp_path / "root")
    laughs = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        laughs.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]")
    bomb = tmp_path / "config.yaml"
    bomb.write_text("\n".join(laughs) + "\n")
    monkeypatch.setattr(listing, "list_checkpoints", lambda *a, **k: pytest.fail("scanned before the config was checked"))
    result = REGISTRY.call("list_checkpoints", {"root": str(tmp_path / "root"), "config": str(bomb)},
                           ToolContext.for_roots([tmp_path]))
    assert not result.ok and "alias" in result.error.lower()


# -- empty step folders (issue 31) -------------------------------------------------------------
def _empty_steps(trial_dir: Path, steps) -> None:
    for step in steps:
        (trial_dir / "default" / f"epoch0epochstep{step}globalstep{step}").mkdir(parents=True)


def _empty_finding(report) -> list:
    return [i for i in report.issues if i.id == "empty-step-folders"]


@pytest.mark.parametrize("lazy", [False, True])
def test_empty_step_folders_are_one_finding_and_no_checkpoints(tmp_path: Path, monkeypatch, lazy: bool) -> None:
    """Three trials; the newest step folders of each hold nothing; two real saves sit in between."""
    if lazy:
        monkeypatch.setattr(listing, "LAZY_LIMIT", 10)
        monkeypatch.setattr(listing, "DETAIL", 2)
    root = tmp_path / "root"
    trial = areal_tree(root, steps=(40, 50), recover_step=None)
    for t, name in enumerate((trial.name, "trial_b", "trial_c")):
        _empty_steps(trial.parent / name, range(100 + t, 160, 3))
    report = list_checkpoints(root, mounts=VOLUME, confinement=ANYWHERE)
    assert [c.step for c in report.checkpoints if c.checked] == [40, 50] and report.latest().step == 50
    assert all(c.step in (40, 50) or not c.checked for c in report.checkpoints)
    (finding,) = _empty_finding(report)
    empty = sum(len(range(100 + t, 160, 3)) for t in range(3))
    assert finding.summary.startswith(f"{empty} step folders across 3 trials hold no checkpoint")
    assert "the newest, step 159" in finding.summary and finding.severity == "warning"
    assert not [i for i in report.issues if i.id == "damaged-checkpoint"]
    assert report.to_dict()["empty_step_folders"] == empty
    assert recovery_plan(report).resume_from.step == 50


def test_an_old_empty_folder_is_named_as_such_not_as_the_newest(tmp_path: Path) -> None:
    root = tmp_path / "root"
    trial = areal_tree(root, steps=(40, 50), recover_step=None)
    _empty_steps(trial, (10,))
    (finding,) = _empty_finding(list_checkpoints(root, mounts=VOLUME, confinement=ANYWHERE))
    assert finding.summary.startswith("1 step folder holds no checkpoint") and "newest" not in finding.summary


def test_only_empty_folders_say_so_and_that_there_is_no_checkpoint(tmp_path: Path, small_limits) -> None:
    trial = tmp_path / "root" / "checkpoints" / "root" / "exp" / "trial"
    _empty_steps(trial, range(1, 40))
    (trial / "default" / "epoch0epochstep7globalstep7" / "sub").mkdir()  # folders inside, still no file
    report = list_checkpoints(tmp_path / "root", mounts=VOLUME, confinement=ANYWHERE)
    assert report.checkpoints == [] and [i.id for i in report.issues] == ["empty-step-folders", "no-checkpoints"]


@pytest.mark.slow
@pytest.mark.parametrize("trials, per", [(1, 100_000), (10, 2_000)])
def test_a_hundred_thousand_empty_folders_stay_bounded(tmp_path: Path, trials: int, per: int) -> None:
    import time
    import tracemalloc

    base = tmp_path / "root" / "checkpoints" / "root" / "exp"
    for t in range(trials):
        _empty_steps(base / f"trial{t}", range(1, per + 1))
    tracemalloc.start()
    start = time.process_time()
    report = list_checkpoints(tmp_path / "root", mounts=VOLUME, confinement=ANYWHERE)
    text = json.dumps(report.to_dict())
    cpu = time.process_time() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(report.issues) == 2 and len(text) < 10_000  # one summary and "no checkpoints", not one each
    assert report.to_dict()["empty_step_folders"] == trials * per
    assert peak < 300 << 20 and cpu < 30  # generous: tracemalloc slows it; benchmarks/checkpoints.py --empty times it
    import shutil

    shutil.rmtree(tmp_path / "root")  # here, not in a later pytest run's clean-up of old temp folders


def test_an_unreadable_step_folder_of_a_large_tree_is_not_called_empty(tmp_path: Path, monkeypatch, small_limits) -> None:
    """The large-tree walk counted a step folder it could not list as one that holds no file.

    Tests run as root, who can list any folder: ``listdir`` and ``scandir`` refuse this one as
    the kernel refuses another user (EACCES).
    """
    trial = areal_tree(tmp_path / "root", steps=tuple(range(10, 310, 10)), recover_step=None)
    locked = next(trial.glob("default/*globalstep300"))
    real_listdir, real_scandir = listing.os.listdir, listing.os.scandir

    def refuse(real):  # noqa: ANN001, ANN202
        def call(path, *a):  # noqa: ANN001, ANN202
            if str(path) == str(locked):
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, *a)
        return call

    monkeypatch.setattr(listing.os, "listdir", refuse(real_listdir))
    monkeypatch.setattr(listing.os, "scandir", refuse(real_scandir))
    report = list_checkpoints(tmp_path / "root", mounts=VOLUME, confinement=ANYWHERE)
    assert not _empty_finding(report) and report.to_dict()["empty_step_folders"] == 0
    (newest,) = [c for c in report.checkpoints if c.step == 300]
    assert newest.unreadable and not newest.valid and "cannot read" in newest.issues[0]
    assert recovery_plan(report).resume_from.step == 290


def test_step_folders_named_inside_a_step_folder_are_read_with_it(tmp_path: Path, small_limits) -> None:
    """A step folder that holds its weights in a sub-folder named like a step folder is not empty."""
    trial = areal_tree(tmp_path / "root", steps=tuple(range(10, 310, 10)), recover_step=None)
    newest = next(trial.glob("default/*globalstep300"))
    for f in list(newest.iterdir()):
        f.rename(tmp_path / f.name)
    write(newest / "iter_0000300" / "model.safetensors", b"\x02" * 64)
    report = list_checkpoints(tmp_path / "root", mounts=VOLUME, confinement=ANYWHERE)
    assert not _empty_finding(report)
    (c,) = [c for c in report.checkpoints if c.step == 300 and c.kind == "areal_hf"]
    assert c.checked and c.files == 1 and c.size_bytes == 64
