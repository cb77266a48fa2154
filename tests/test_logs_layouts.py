"""One answer whatever the file layout: a run's log merged into one file, split per rank,
with the driver's or a rank's file gzipped, or concatenated in another order, gives the same
root (signature, category and the line that started it), chosen by time and causality.

The run written here: a slime job whose rank 2 hangs in an all-reduce; its NCCL watchdog
fires first (10:15:02), the other ranks' a few seconds later (glog times without a year),
and the driver then reports the actor as dead (an undated Ray traceback).
"""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import pytest

from conftest import ANYWHERE
from rlmedic.tools.logs.diagnose import diagnose


def _run() -> tuple[list[str], dict[int, list[str]]]:
    driver = [
        "[2025-11-20 10:00:00] train.py:31 - slime: actor 4 GPUs (Megatron), rollout 4 GPUs",
        "(RolloutManager pid=3101) [2025-11-20 10:00:40] sglang_engine.py:88 - Launching SGLang server on 10.1.0.3:15000",
    ]
    ranks: dict[int, list[str]] = {}
    for r in range(4):
        p = f"(TrainRayActor pid={5000 + r}) "
        ranks[r] = [p + f"[2025-11-20 10:01:0{r}] model.py:102 - rank {r}: Megatron model built"]
        ranks[r] += [
            p + f"[2025-11-20 10:{2 + s:02d}:1{r}] model.py:512 - step {s}: {{'train/loss': 0.01, 'train/grad_norm': 0.2}}"
            for s in range(3)
        ]
    fire = {2: "10:15:02", 0: "10:15:09", 1: "10:15:09", 3: "10:15:10"}
    for r, clock in fire.items():
        p = f"(TrainRayActor pid={5000 + r}) "
        ranks[r] += [
            p + f"[rank{r}]:[E1120 {clock}.481516 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=412, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
            "ran for 600031 milliseconds before timing out.",
            p + f"[rank{r}]:[F1120 {clock}.482000 ProcessGroupNCCL.cpp:1595] [PG 0 Rank {r}] Terminating the process "
            "after attempting to dump debug info, due to collective timeout or exception.",
        ]
    driver += [
        "Traceback (most recent call last):",
        '  File "/root/slime/train.py", line 70, in train',
        "    ray.get(actor_model.async_train(rollout_id, rollout_data_ref))",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: TrainRayActor",
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR",
    ]
    return driver, ranks


def _merged(driver: list[str], ranks: dict[int, list[str]]) -> list[str]:
    lines = driver[:2] + [ranks[r][s] for s in range(4) for r in range(4)]
    for r in (2, 0, 1, 3):
        lines += ranks[r][4:]
    return lines + driver[2:]


def _write(path: Path, lines: list[str], gz: bool = False) -> None:
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    old = time.time() - 3600
    os.utime(path, (old, old))


def _layout(kind: str, root: Path) -> Path:
    driver, ranks = _run()
    if kind == "merged":
        _write(root / "job.log", _merged(driver, ranks))
        return root / "job.log"
    if kind == "merged-gz":
        _write(root / "job.log.gz", _merged(driver, ranks), gz=True)
        return root / "job.log.gz"
    if kind == "concatenated":  # the per-rank files pasted one after another: no time order in the lines
        _write(root / "all.log", [line for r in (3, 1, 0, 2) for line in ranks[r]] + driver)
        return root / "all.log"
    folder = root / "logs"
    folder.mkdir()
    for r, lines in ranks.items():
        # file order (rank0 first) differs from time order (rank 2 fired first)
        _write(folder / f"rank{r}.log{'.gz' if kind == 'split-rank-gz' and r == 2 else ''}", lines, gz=kind == "split-rank-gz" and r == 2)
    _write(folder / f"driver.log{'.gz' if kind == 'split-driver-gz' else ''}", driver, gz=kind == "split-driver-gz")
    return folder


LAYOUTS = ["merged", "merged-gz", "concatenated", "split", "split-driver-gz", "split-rank-gz"]


@pytest.mark.parametrize("kind", LAYOUTS)
def test_same_root_whatever_the_layout(kind: str, tmp_path: Path) -> None:
    (tmp_path / "ref").mkdir()
    reference = diagnose([_layout("merged", tmp_path / "ref")], confinement=ANYWHERE)
    ref = reference.root_finding
    assert ref is not None and ref.id == "nccl-watchdog-timeout" and ref.category == "nccl_timeout"
    assert "[Rank 2]" in ref.evidence["line_text"]

    (tmp_path / kind).mkdir()
    d = diagnose([_layout(kind, tmp_path / kind)], confinement=ANYWHERE)
    root = d.root_finding
    assert root is not None, [f.id for f in d.findings]
    assert (root.id, root.category) == (ref.id, ref.category)
    assert root.evidence["line_text"] == ref.evidence["line_text"]
    assert root.evidence["first_seen"] == ref.evidence["first_seen"] == "2025-11-20 10:15:02.481516"
    cascades = {f.id for f in d.findings if f.root == d.root and f is not root}
    assert "ray-actor-died" in cascades
