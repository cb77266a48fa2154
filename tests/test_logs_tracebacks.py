"""The general traceback reader: exceptions no literal signature names, classified by their
type, message and the packages of their frames through ``tools/logs/tracebacks.yaml``.

Each fixture is a short log written for the test from the error strings upstream projects
print (vLLM, SGLang, verl, slime, AReaL, OmegaConf, Ray, datasets).
"""

from __future__ import annotations

import gzip
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from conftest import ANYWHERE, FIXTURES
from rlmedic.errors import UserError
from rlmedic.knowledge.cards import card_by_id
from rlmedic.tools.logs.diagnose import diagnose, diagnose_text
from rlmedic.tools.logs.tracebacks import Frame, builtin_rules, classify, parse_table, read_traceback

TB = FIXTURES / "logs" / "tracebacks"

CASES = {
    "version-mismatch.log": ("model-type-unknown", "install_env", "install-version-mismatch"),  # a literal signature wins
    "native-library-mismatch.log": ("import-error", "install_env", "install-version-mismatch"),  # a literal signature wins
    "config-validation.log": ("config-validation", "config_constraint", "config-validation-error"),
    "reward-function-error.log": ("reward-function-error", "data_format", "reward-function-errors"),
    "dataset-error.log": ("dataset-error", "data_format", "data-format-errors"),
    "ray-resources-unavailable.log": ("ray-resources-unavailable", "ray_scheduling", "cluster-resources-placement"),
    "inference-engine-launch-failed.log": ("inference-engine-launch-failed", "sglang_crash", "inference-engine-launch-failure"),
    "weight-name-mismatch.log": ("weight-name-mismatch", "weight_sync", "weight-name-mismatch"),
    "settings-disagree.log": ("settings-disagree", "config_constraint", "config-validation-error"),
}


def _old(path: Path) -> None:
    old = time.time() - 3600
    os.utime(path, (old, old))


@pytest.mark.parametrize("name", sorted(CASES))
def test_traceback_classes(name: str, tmp_path: Path) -> None:
    fid, category, card = CASES[name]
    src = tmp_path / name
    shutil.copy(TB / name, src)
    _old(src)
    d = diagnose([src], confinement=ANYWHERE)
    root = d.root_finding
    assert root is not None, [f.id for f in d.findings]
    assert (root.id, root.category, root.card) == (fid, category, card)
    assert card_by_id(card) is not None and root.fixes
    assert root.line and f"> {root.line}" in root.evidence["excerpt"].replace("  ", " ")
    # the same log gzipped inside a per-rank folder beside a healthy rank gives the same root
    folder = tmp_path / "ranks"
    folder.mkdir()
    (folder / "rank0.log").write_text("[2025-11-18 05:00:00] rank 0 ready\n")
    (folder / "rank1.log.gz").write_bytes(gzip.compress(src.read_bytes()))
    for p in folder.iterdir():
        _old(p)
    split = diagnose([folder], confinement=ANYWHERE).root_finding
    assert split is not None and (split.id, split.category) == (root.id, root.category)


def test_reader_takes_frames_of_its_own_process() -> None:
    line = "(B pid=2) KeyError: 'w'"
    before = [
        "(B pid=2) Traceback (most recent call last):",
        '(A pid=1)   File "/usr/lib/python3/site-packages/ray/worker.py", line 3, in get',
        '(B pid=2)   File "/usr/lib/python3/site-packages/vllm/model_executor/models/llama.py", line 9, in load_weights',
    ]
    tb = read_traceback(line, before)
    assert tb is not None and tb.exc_type == "KeyError" and tb.message == "'w'"
    assert [f.package for f in tb.frames] == ["vllm"]
    rule = classify(tb)
    assert rule is not None and rule.id == "weight-name-mismatch"
    assert Frame("/home/me/reward.py", 1, "f").package == "user"


def test_unknown_exception_stays_unrecognised() -> None:
    d = diagnose_text("Traceback (most recent call last):\n  File \"/home/me/x.py\", line 1, in main\nZeroDivisionError: division by zero\n")
    root = d.root_finding
    assert root is not None and root.id == "python-exception" and root.category == "other"


def test_table_loads_and_rejects_bad_rules() -> None:
    rules = builtin_rules()
    assert len({r.id for r in rules}) == len(rules)
    for r in rules:
        assert card_by_id(r.card) is not None, r.id
    with pytest.raises(UserError, match="category"):
        parse_table({"rules": [{"id": "x", "title": "t", "category": "nope", "card": "c", "role": "cause", "types": ["E"]}]})
    with pytest.raises(UserError, match="at least one"):
        parse_table({"rules": [{"id": "x", "title": "t", "category": "other", "card": "c", "role": "cause"}]})
    with pytest.raises(UserError, match="unknown field"):
        parse_table({"rules": [{"id": "x", "title": "t", "category": "other", "card": "c", "role": "cause", "typo": 1}]})
    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "tools" / "logs" / "tracebacks.yaml").read_text())
    assert parse_table(raw)


def test_phase_comes_from_the_traceback_the_error_ends() -> None:
    """An NCCL timeout raised inside the weight update is a weight-sync problem, even after many training lines."""
    p = "(TrainRayActor pid=700) "
    lines = []
    for s in range(6):
        lines += [
            p + f"[2025-11-20 10:0{s}:00] model.py:512 - step {s}: {{'train/loss': 0.01, 'train/grad_norm': 0.2}}",
            p + f"[2025-11-20 10:0{s}:01] megatron: forward_backward micro batch {s} done, optimizer step",
        ]
    frames = [
        p + "Traceback (most recent call last):",
        p + '  File "/root/slime/slime/backends/megatron_utils/actor.py", line 410, in update_weights',
        p + "    self.weight_updater.update_weights()",
        p + '  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py", line 2714, in broadcast',
        p + "    work.wait()",
        p + "torch.distributed.DistBackendError: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
        "OpType=BROADCAST, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600009 milliseconds before timing out.",
    ]
    root = diagnose_text("\n".join(lines + frames) + "\n").root_finding
    assert root is not None and root.id == "nccl-watchdog-timeout"
    assert root.evidence["phase"] == "weight_update" and root.category == "weight_sync"
    # the same error without the traceback keeps the phase its surroundings give
    root = diagnose_text("\n".join(lines + frames[-1:]) + "\n").root_finding
    assert root is not None and root.evidence["phase"] == "training"
