"""Root across ranks by time and causality (causality.yaml), timestamps of several formats, phase
from the collective."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from rlmedic.confine import Confinement
from rlmedic.errors import UserError
from rlmedic.tools.logs.causality import TABLE_PATH, builtin_table, parse_table
from rlmedic.tools.logs.diagnose import diagnose
from rlmedic.tools.logs.scan import parse_timestamp
from rlmedic.tools.logs.signatures import builtin_catalog

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
RANKS = FIXTURES / "causal_ranks"

WATCHDOG = (
    "[rank{r}]:[E{md} {hms}.412875301 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=88412, OpType={op}, NumelIn=1024, NumelOut=1024, Timeout(ms)=120000) ran for 120043 "
    "milliseconds before timing out."
)
PEER_LOST = [
    "Traceback (most recent call last):",
    '  File "/root/slime/slime/backends/megatron_utils/model.py", line 402, in train_one_step',
    "    losses_reduced = forward_backward_func(",
    '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py", line 2806, in all_reduce',
    "    work = group.allreduce([tensor], opts)",
    "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:77, remote process exited or there was a "
    "network error, NCCL version 2.21.5",
]
TRAINING = [
    "{ts} INFO slime.ray.rollout: rollout 43: generated 512 samples with sglang in 39.1s",
    "{ts} INFO slime.backends.megatron_utils.data: rollout 43: received 512 samples, 8 micro-batches",
]


def _diag(folder: Path):
    return diagnose([folder], confinement=Confinement([folder]))


def test_the_table_loads_and_names_only_known_signatures() -> None:
    table = builtin_table()
    assert table.rules and table.effects and table.collectives
    known = set(builtin_catalog().by_id)
    for effect in table.effects.values():
        assert effect.signatures <= known


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"effects": [{"id": "x", "signatures": ["no-such-signature"]}]}, "unknown signature"),
        ({"rules": [{"id": "r", "effect": "nope", "cause": {"roles": ["cause"]}}]}, "not one of the effects"),
        ({"rules": [{"id": "r", "effect": "peer-lost", "cause": {"roles": ["marker"]}}]}, "cause role"),
        ({"rules": [{"id": "r", "effect": "peer-lost", "cause": {}}]}, "needs signatures or roles"),
        ({"rules": [{"id": "r", "effect": "peer-lost", "cause": {"roles": ["crash"]}, "within_s": -1}]}, "within_s"),
        ({"collectives": [{"ops": ["ALLREDUCE"], "phase": "lunch"}]}, "phase"),
        ({"effects": [{"id": "x", "text": ["(unclosed"]}]}, "invalid regex"),
        ({"colour": 1}, "unknown field"),
    ],
)
def test_a_bad_table_is_one_clear_error(patch: dict, message: str) -> None:
    data = yaml.safe_load(TABLE_PATH.read_text())
    data.update(patch)
    with pytest.raises(UserError, match=message):
        parse_table(data, "t.yaml", set(builtin_catalog().by_id))


def test_rank_folder_root_is_the_first_failure_in_time() -> None:
    """Eight ranks: rank 3's watchdog timeout at 11:16:00, the others lose their peer at 11:16:02."""
    diag = _diag(RANKS)
    root = diag.root_finding
    assert root is not None
    assert root.id == "nccl-watchdog-timeout"
    assert root.file.endswith("rank3.log")
    assert root.evidence["ranks"] == [3]
    assert root.evidence["phase"] == "training"
    assert "SGLang generation" not in root.summary and "during training" in root.summary
    explains = root.evidence["explains"]
    assert explains[0]["finding"] == "nccl-error" and explains[0]["where"] == "ranks 0-2,4-7"
    assert explains[0]["after_s"] == pytest.approx(1.7, abs=0.5)
    peer = next(f for f in diag.findings if f.id == "nccl-error")
    assert peer.root == 0  # listed as the root's cascade
    assert "ranks 0-2,4-7 reported the loss of a peer" in root.summary


def _write_ranks(folder: Path, cause_line: str, effect_stamp: list[str], *, op: str = "ALLREDUCE") -> None:
    """rank0..rank2 lose their peer at the times given (one format each); rank9 holds the watchdog."""
    folder.mkdir()
    for r, stamp in enumerate(effect_stamp):
        lines = [t.format(ts=stamp) for t in TRAINING] + [f"{stamp} ERROR train step failed", *PEER_LOST]
        (folder / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    lines = [t.format(ts="2026-11-26 11:13:58") for t in TRAINING] + [cause_line.format(op=op)]
    (folder / "rank9.log").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "stamps",
    [
        # ISO with a UTC offset, month-first with a 12-hour clock, syslog with no year
        ["2026-11-26T19:16:02.5+08:00", "11/26/2026 11:16:03 AM", "Nov 26 11:16:04"],
        ["[2026/11/26 11:16:02]", "2026-11-26T11:16:05Z", "Thu Nov 26 11:16:03 2026"],
    ],
)
def test_timestamps_of_different_formats_are_compared(tmp_path: Path, stamps: list[str]) -> None:
    cause = WATCHDOG.replace("{r}", "9").replace("{md}", "1126").replace("{hms}", "11:16:00").replace("{op}", "{op}")
    _write_ranks(tmp_path / "run", cause, stamps)
    root = _diag(tmp_path / "run").root_finding
    assert root is not None and root.id == "nccl-watchdog-timeout" and root.file.endswith("rank9.log")
    assert root.evidence["explains"][0]["where"] == "ranks 0-2"


def test_a_peer_lost_before_the_timeout_is_not_explained_by_it(tmp_path: Path) -> None:
    """Time decides: the same lines with the peer lost 30 s BEFORE the watchdog fired keep the old order."""
    cause = WATCHDOG.replace("{r}", "9").replace("{md}", "1126").replace("{hms}", "11:16:00").replace("{op}", "{op}")
    _write_ranks(tmp_path / "run", cause, ["2026-11-26 11:15:30", "2026-11-26 11:15:31", "2026-11-26 11:15:32"])
    diag = _diag(tmp_path / "run")
    assert diag.root_finding is not None and diag.root_finding.id == "nccl-error"
    assert "explains" not in diag.root_finding.evidence


def test_outside_the_window_the_later_loss_is_not_a_consequence(tmp_path: Path) -> None:
    cause = WATCHDOG.replace("{r}", "9").replace("{md}", "1126").replace("{hms}", "09:00:00").replace("{op}", "{op}")
    _write_ranks(tmp_path / "run", cause, ["2026-11-26 11:16:02"] * 3)
    assert _diag(tmp_path / "run").root_finding.id == "nccl-error"  # type: ignore[union-attr]


def test_phase_from_the_collective_not_from_rollout_lines(tmp_path: Path) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    lines = [t.format(ts="2026-11-26 11:13:58") for t in TRAINING]
    line = WATCHDOG.format(r=0, md="1126", hms="11:16:00", op="ALLREDUCE")
    (folder / "trainer.log").write_text("\n".join([*lines, line]) + "\n")
    assert _diag(folder).root_finding.evidence["phase"] == "training"  # type: ignore[union-attr]
    # the same timeout printed by an SGLang tensor-parallel worker stays in generation
    (folder / "trainer.log").write_text("\n".join([*lines, f"(SGLangEngine pid=77) {line}"]) + "\n")
    assert _diag(folder).root_finding.evidence["phase"] == "generation"  # type: ignore[union-attr]
    # a broadcast is not a training collective: the lines around it still decide
    (folder / "trainer.log").write_text("\n".join([*lines, line.replace("ALLREDUCE", "BROADCAST")]) + "\n")
    assert _diag(folder).root_finding.evidence["phase"] == "generation"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2026-11-26 11:16:02,118 INFO", datetime(2026, 11, 26, 11, 16, 2, 118000)),
        ("[2026-11-26T11:16:02.123456789Z] x", datetime(2026, 11, 26, 11, 16, 2, 123456)),
        ("2026-11-26T19:16:02+08:00 x", datetime(2026, 11, 26, 11, 16, 2)),
        ("2026-11-26T06:16:02-05:00 x", datetime(2026, 11, 26, 11, 16, 2)),
        ("2026/11/26 11:16:02 x", datetime(2026, 11, 26, 11, 16, 2)),
        ("11/26/2026 11:16:02 PM x", datetime(2026, 11, 26, 23, 16, 2)),
        ("Nov 26 11:16:02 host kernel: x", datetime(2026, 11, 26, 11, 16, 2)),
        ("Thu Nov 26 11:16:02 2026 x", datetime(2026, 11, 26, 11, 16, 2)),
        ("[rank3]:[E1126 11:16:00.412875301 ProcessGroupNCCL.cpp:632]", datetime(2026, 11, 26, 11, 16, 0, 412875)),
        ("[AReaL] 20261126-11:16:00.250 x", datetime(2026, 11, 26, 11, 16, 0, 250000)),
        ("step 10/100 took 12:30:11", None),
    ],
)
def test_timestamp_formats(line: str, expected: datetime | None) -> None:
    assert parse_timestamp(line, 2026) == expected


def test_through_the_cli_json() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlmedic", "diagnose", "--json", str(RANKS)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    data = json.loads(out.stdout)
    root = data["findings"][data["root"]]
    assert root["id"] == "nccl-watchdog-timeout" and root["evidence"]["phase"] == "training"
    assert root["evidence"]["ranks"] == [3]


def test_through_ask_offline() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlmedic", "ask", "--offline", "--json", "why did my run die?", "--attach", str(RANKS)],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    answer = data["answer"]
    assert "Watchdog" in answer or "watchdog" in answer
    assert "on rank 3" in answer and "ranks 0-2,4-7" in answer
    assert "SGLang generation" not in answer


def test_the_rank_that_did_not_time_out_is_named(tmp_path: Path) -> None:
    """Ranks 0, 1 and 3 time out in an all-reduce; rank 2 says nothing: it is the one they waited for."""
    folder = tmp_path / "run"
    folder.mkdir()
    for r in range(4):
        lines = ["2026-11-26 11:00:00,000 INFO step 5: loss=0.1"]
        if r != 2:
            lines.append(WATCHDOG.format(r=r, md="1126", hms="11:30:00", op="ALLREDUCE"))
        (folder / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    root = _diag(folder).root_finding
    assert root is not None and root.evidence["ranks"] == [0, 1, 3]
    assert root.evidence["silent_ranks"] == [2] and "Rank 2 reported no timeout" in root.summary
    # every rank timed out: nobody is singled out
    (folder / "rank2.log").write_text(WATCHDOG.format(r=2, md="1126", hms="11:30:00", op="ALLREDUCE") + "\n")
    root = _diag(folder).root_finding
    assert root is not None and "silent_ranks" not in root.evidence and "reported no timeout" not in root.summary


def test_ranks_that_failed_otherwise_are_not_silent() -> None:
    root = _diag(RANKS).root_finding
    assert root is not None and "silent_ranks" not in root.evidence


def test_one_merged_ray_log_orders_its_processes() -> None:
    """The same story in one driver log (Ray actor prefixes): processes, not files, tell the ranks apart."""
    from rlmedic.tools.logs.diagnose import diagnose_text

    lines = [f"(TrainWorker pid={100 + r}) 2026-11-26 11:13:58,700 INFO rollout 43: received 512 samples from sglang"
             for r in range(4)]
    lines.append("(TrainWorker pid=103) " + WATCHDOG.format(r=3, md="1126", hms="11:16:00", op="ALLREDUCE"))
    for r in range(3):
        lines += [f"(TrainWorker pid={100 + r}) 2026-11-26 11:16:02,100 ERROR step failed"]
        lines += [f"(TrainWorker pid={100 + r}) {t}" for t in PEER_LOST]
    root = diagnose_text("\n".join(lines) + "\n").root_finding
    assert root is not None and root.id == "nccl-watchdog-timeout" and root.evidence["phase"] == "training"
    assert "TrainWorker pid=100, TrainWorker pid=101, TrainWorker pid=102 reported the loss" in root.summary


def test_a_traceback_without_a_time_of_its_own_is_not_placed_before(tmp_path: Path) -> None:
    """The usual real layout: the other ranks' tracebacks carry no time, the last dated line above them is a
    progress line from minutes earlier. That time is a lower bound, not the failure's: rank 3's dated
    watchdog timeout is still the root. When the traceback was announced by a dated ERROR line, that
    time is its own and order decides as before."""
    folder = tmp_path / "run"
    folder.mkdir()
    for r in range(4):
        lines = ["2026-11-26 11:13:58,700 INFO rollout 43: received 512 samples, 8 micro-batches"]
        lines += [WATCHDOG.format(r=3, md="1126", hms="11:16:00", op="ALLREDUCE")] if r == 3 else PEER_LOST
        (folder / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    root = _diag(folder).root_finding
    assert root is not None and root.id == "nccl-watchdog-timeout"
    assert "ranks 0-2 reported the loss of a peer (nccl-error) afterwards" in root.summary
    assert root.evidence["explains"][0]["after_s"] is None


def test_any_failure_first_elsewhere_explains_the_lost_peers(tmp_path: Path) -> None:
    """Not only the watchdog: an error no signature knows on rank 5, logged a moment before the others lose
    their peer, is the root (the rule names roles, not a signature)."""
    folder = tmp_path / "run"
    folder.mkdir()
    for r in range(6):
        if r == 5:
            lines = ["2026-11-26 11:15:59,010 ERROR rank 5: reward worker failed", "Traceback (most recent call last):",
                     '  File "/home/me/rl/reward_utils.py", line 30, in parse_answer', '    return item["boxed"]',
                     "KeyError: 'boxed'"]
        else:
            lines = ["2026-11-26 11:16:02,500 ERROR train step failed", *PEER_LOST]
        (folder / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    diag = _diag(folder)
    root = diag.root_finding
    assert root is not None and root.file.endswith("rank5.log") and "'boxed'" in root.summary
    assert root.evidence["explains"][0]["where"] == "ranks 0-4"
    assert next(f for f in diag.findings if f.id == "nccl-error").root == 0
