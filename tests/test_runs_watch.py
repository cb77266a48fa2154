"""``rlmedic watch`` on a live TensorBoard run folder: the writer appends steps between ticks; the
collapse is alerted once at its first step, an unchanged run costs stat calls only, and a run
that stops writing without finishing is alerted once after the stall time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlmedic.tools.logs.watch import WatchOptions
from rlmedic.tools.runs.watch import RunWatcher

from runs_data import curves, rows

pytest.importorskip("tensorboard", reason="the tensorboard extra (CI installs it) writes the live run")


def test_watch_follows_a_live_tensorboard_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils.tensorboard import SummaryWriter

    series, onset = curves("entropy_collapse", "verl", seed=13, onset=150)
    steps = rows(series)
    writer = SummaryWriter(str(tmp_path))
    now = [time.time()]
    watcher = RunWatcher([str(tmp_path)], WatchOptions(stall_minutes=30), clock=lambda: now[0])

    def write(upto: int) -> None:
        for step, data in steps:
            if write.done < step <= upto:
                for k, v in data.items():
                    writer.add_scalar(k, v, step)
        write.done = upto
        writer.flush()
    write.done = 0

    write(120)
    assert watcher.tick() == []
    reads = []
    monkeypatch.setattr("rlmedic.tools.runs.diagnose.load_run",
                        lambda *a, **k: reads.append(a) or pytest.fail("an unchanged run is read again"))
    assert watcher.tick() == []  # nothing new: not read
    monkeypatch.undo()
    write(200)
    alerts = watcher.tick()
    assert [a.kind for a in alerts] == ["entropy_collapse"]
    assert "actor/entropy" in alerts[0].summary and f"from step {onset}" in alerts[0].summary
    assert "^ step 150" in alerts[0].evidence and alerts[0].fixes
    write(200)
    writer.add_scalar("actor/entropy", 0.01, 201)
    writer.flush()
    assert watcher.tick() == []  # the same incident: not posted again
    now[0] = watcher.last[str(tmp_path)].last_wall + 3 * 3600  # three hours without a write
    import os
    for f in tmp_path.iterdir():
        os.utime(f, (now[0] - 3 * 3600, now[0] - 3 * 3600))
    stalled = watcher.tick()
    assert [a.kind for a in stalled] == ["stall"] and "stopped at step 201" in stalled[0].summary
    assert watcher.tick() == []
    writer.close()


def test_watch_cli_once_on_a_run_folder() -> None:
    from typer.testing import CliRunner

    from rlmedic.ui.cli import app

    folder = Path(__file__).parent / "fixtures" / "runs" / "tensorboard-slime-grad-spike"
    result = CliRunner().invoke(app, ["watch", str(folder), "--once", "--stall-minutes", "0"])
    assert result.exit_code == 1, result.output  # it alerted
    assert "gradient norm spiked" in result.output and "train/grad_norm" in result.output


def test_watch_follows_a_growing_wandb_transaction_log(tmp_path: Path) -> None:
    """The committed W&B run's log, made to grow in the watched folder as the SDK appends to it (a torn
    last record included): no alert while the curves are healthy, one when the length cap is hit."""
    pytest.importorskip("wandb", reason="the wandb extra reads the transaction log (CI installs it)")
    src = next((Path(__file__).parent / "fixtures" / "runs" / "wandb-verl-length-cap" / "wandb").glob("offline-run-*"))
    data = next(src.glob("run-*.wandb")).read_bytes()
    run_dir = tmp_path / "wandb" / src.name
    run_dir.mkdir(parents=True)
    log = run_dir / next(src.glob("run-*.wandb")).name
    watcher = RunWatcher([str(tmp_path / "wandb")], WatchOptions(stall_minutes=30))
    log.write_bytes(data[: len(data) * 2 // 5 + 3])  # about step 45, cut inside a record
    assert watcher.tick() == []
    assert 30 < watcher.last[str(run_dir)].last_step < 70
    log.write_bytes(data)
    alerts = watcher.tick()
    assert [a.kind for a in alerts] == ["length_cap"] and "from step 70" in alerts[0].summary
    assert "then reward stuck at zero (critic/score/mean from step 80)" in alerts[0].summary
    assert watcher.tick() == []
