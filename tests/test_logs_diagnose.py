"""diagnose() on realistic fixture logs: root cause, line, phase, fix, cascades, metrics."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from conftest import ANYWHERE, FIXTURES
from rlmedic.confine import Confinement
from rlmedic.errors import AccessDenied, UserError
from rlmedic.tools.logs.diagnose import diagnose, diagnose_text
from rlmedic.types import Citation

LOGS = FIXTURES / "logs"
EXPECTED = yaml.safe_load((LOGS / "expected.yaml").read_text())
SIG_CASES = sorted(k for k in EXPECTED if k.startswith("signatures/"))


def _old_copy(src: Path, tmp_path: Path) -> Path:
    """A copy whose mtime is an hour old, so it does not look like a log still being written."""
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    old = time.time() - 3600
    os.utime(dst, (old, old))
    return dst


@pytest.mark.parametrize("name", SIG_CASES)
def test_signature_fixture(name: str, tmp_path: Path) -> None:
    exp = EXPECTED[name]
    diag = diagnose([_old_copy(LOGS / name, tmp_path)], confinement=ANYWHERE)
    by_id = {f.id: f for f in diag.findings}
    finding = by_id.get(exp["finding"])
    assert finding is not None, f"{name}: {exp['finding']} not found in {list(by_id)}"
    assert finding.line == exp["line"]
    assert finding.evidence["excerpt"] and f"> {exp['line']}" in finding.evidence["excerpt"].replace("  ", " ")
    assert any(str(c).endswith(f":{exp['line']}") for c in finding.citations), finding.citations
    assert finding.fixes and finding.card
    assert any(str(c).startswith("card:") for c in finding.citations)
    root = diag.root_finding
    assert (root.id if root else None) == exp["root"]
    if root is not None:
        assert diag.root == 0 and diag.findings[0] is root
    if "phase" in exp:
        assert finding.evidence["phase"] == exp["phase"]
    if "card" in exp:
        assert finding.card == exp["card"]
    if "fix" in exp:
        assert exp["fix"].lower() in json.dumps(finding.to_dict()).lower()


def test_oom_evidence_numbers_and_fix_order(tmp_path: Path) -> None:
    diag = diagnose([_old_copy(LOGS / "signatures" / "cuda-oom.log", tmp_path)], confinement=ANYWHERE)
    oom = diag.root_finding
    assert oom is not None and oom.id == "cuda-oom"
    nums = oom.evidence["numbers"]
    assert nums["tried_to_allocate_gib"] == 3.5
    assert nums["free_gib"] == 1.02
    assert nums["gpu"] == 0
    assert oom.evidence["phase"] == "training"
    assert oom.category == "oom_training"
    # reserved-but-unallocated (1.31) < requested (3.5): no fragmentation advice first
    assert "max_tokens_per_mb" in str(oom.fixes[0])


@pytest.mark.parametrize(
    ("context", "phase", "card", "category"),
    [
        ('File "/sglang/srt/managers/scheduler.py", line 12, in event_loop', "generation", "oom-sglang-generation", "oom_generation"),
        ('File "/areal/engine/fsdp_engine.py", line 5, in update_weights_from_distributed', "weight_update", "oom-weight-update", "oom_weight_update"),
        ("Loading checkpoint shards:  50%|#####     | 1/2", "initialization", "oom-initialization", "oom_training"),
        ('File "/areal/engine/ppo/actor.py", line 9, in ppo_update', "training", "oom-actor-train", "oom_training"),
    ],
)
def test_oom_phase_attribution(context: str, phase: str, card: str, category: str) -> None:
    text = f"Traceback (most recent call last):\n  {context}\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n"
    oom = diagnose_text(text).root_finding
    assert oom is not None
    assert (oom.evidence["phase"], oom.card, oom.category) == (phase, card, category)


def test_cuda_error_out_of_memory_defaults_to_data_transfer() -> None:
    oom = diagnose_text("RuntimeError: CUDA error: out of memory\n").root_finding
    assert oom is not None and oom.evidence["phase"] == "data_transfer" and oom.card == "oom-data-transfer"


def test_multirank_directory_root_and_cascades() -> None:
    diag = diagnose([LOGS / "multirank"], confinement=ANYWHERE)
    root = diag.root_finding
    assert root is not None and root.id == "cuda-oom"
    assert root.file.endswith("rank2.log") and root.line == 13
    assert root.evidence["numbers"]["tried_to_allocate_gib"] == 2.0
    cascades = [f for f in diag.findings if f.root == 0]
    assert {f.id for f in cascades} == {"nccl-watchdog-timeout", "ray-actor-died"}
    nccl = next(f for f in cascades if f.id == "nccl-watchdog-timeout")
    assert nccl.evidence["ranks"] == [0, 1, 3]  # rank 3 came from the .gz file
    assert nccl.evidence["count"] == 6
    assert any(s["reason"] == "not a log file name" for s in diag.stats["skipped"])
    assert diag.stats["files"] == 5


def test_gzip_file_is_read(tmp_path: Path) -> None:
    gz = tmp_path / "worker.log.gz"
    gz.write_bytes(gzip.compress((LOGS / "signatures" / "nccl-error.log").read_bytes()))
    diag = diagnose([gz], confinement=ANYWHERE)
    assert diag.root_finding is not None and diag.root_finding.id == "nccl-error"


@pytest.mark.parametrize("name", ["healthy_areal.log", "healthy_slime.log"])
def test_healthy_logs_have_no_error(name: str, tmp_path: Path) -> None:
    diag = diagnose([_old_copy(LOGS / "scenarios" / name, tmp_path)], confinement=ANYWHERE)
    assert diag.root is None
    assert all(f.severity in ("warning", "info") for f in diag.findings), [(f.id, f.severity) for f in diag.findings]
    assert diag.stats["clean_shutdown"] is True
    assert diag.stats["last_step"] >= 12


def test_startup_connection_retry_is_transient(tmp_path: Path) -> None:
    diag = diagnose([_old_copy(LOGS / "scenarios" / "healthy_areal.log", tmp_path)], confinement=ANYWHERE)
    conn = next(f for f in diag.findings if f.id == "rollout-connection-error")
    assert conn.severity == "warning" and "transient" in conn.summary


def test_interrupted_log(tmp_path: Path) -> None:
    diag = diagnose([_old_copy(LOGS / "scenarios" / "interrupted_areal.log", tmp_path)], confinement=ANYWHERE)
    root = diag.root_finding
    assert root is not None and root.id == "probable-interruption" and root.severity == "error"
    assert root.evidence["numbers"]["last_step"] == 9
    assert "step 9" in root.summary and root.card == "spot-interruption"
    assert any(f.id == "no-recover-checkpoint" for f in diag.findings)


def test_log_still_being_written_is_only_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "live.log"
    shutil.copy(LOGS / "scenarios" / "interrupted_areal.log", path)
    diag = diagnose([path], confinement=ANYWHERE)
    f = next(f for f in diag.findings if f.id == "probable-interruption")
    assert f.severity == "warning" and "still" in f.summary


def test_recover_info_dumped_reports_when_last(tmp_path: Path) -> None:
    diag = diagnose([_old_copy(LOGS / "scenarios" / "recover_dumped_then_cut.log", tmp_path)], confinement=ANYWHERE)
    dumped = next(f for f in diag.findings if f.id == "recover-info-dumped")
    assert dumped.severity == "info"
    assert dumped.evidence["numbers"]["last_line"] == 35 and dumped.evidence["numbers"]["last_step"] == 2
    assert not any(f.id == "no-recover-checkpoint" for f in diag.findings)


def test_zero_reward_after_sglang_disconnect_roots_at_the_disconnect() -> None:
    diag = diagnose([LOGS / "scenarios" / "zero_reward_sglang_down.log"], confinement=ANYWHERE)
    root = diag.root_finding
    assert root is not None and root.id == "rollout-connection-error" and root.severity == "error"
    streak = next(f for f in diag.findings if f.id == "zero-reward-streak")
    assert streak.root == 0
    assert streak.evidence["numbers"]["zero_steps"] == 14 and streak.evidence["numbers"]["first_zero_step"] == 5


def test_zero_reward_streak_alone() -> None:
    diag = diagnose([LOGS / "scenarios" / "zero_reward_only.log"], confinement=ANYWHERE)
    root = diag.root_finding
    assert root is not None and root.id == "zero-reward-streak" and root.card == "zero-reward-circuit-breaker"


def test_nine_zero_steps_are_not_a_streak() -> None:
    rows = "".join(f"rollout {i}: {{'rollout/raw_reward': {0.0 if i > 2 else 0.5}}}\n" for i in range(12))
    assert not any(f.id == "zero-reward-streak" for f in diagnose_text(rows).findings)
    rows = "".join(f"rollout {i}: {{'rollout/raw_reward': {0.0 if i > 1 else 0.5}}}\n" for i in range(12))
    assert any(f.id == "zero-reward-streak" for f in diagnose_text(rows).findings)


def test_grad_norm_nan_slime() -> None:
    diag = diagnose([LOGS / "scenarios" / "grad_nan_slime.log"], confinement=ANYWHERE)
    root = diag.root_finding
    assert root is not None and root.id == "nonfinite-grad-norm" and root.card == "grad-nan-inf"
    assert root.evidence["numbers"]["step"] == 5


def test_grad_norm_spike_is_a_warning() -> None:
    diag = diagnose([LOGS / "scenarios" / "grad_spike_slime.log"], confinement=ANYWHERE)
    spike = next(f for f in diag.findings if f.id == "grad-norm-spike")
    assert spike.severity == "warning" and spike.evidence["numbers"]["step"] == 9 and spike.card == "high-gradient-norm"


def test_reward_collapse() -> None:
    diag = diagnose([LOGS / "scenarios" / "reward_collapse_slime.log"], confinement=ANYWHERE)
    root = diag.root_finding
    assert root is not None and root.id == "reward-collapse" and root.category == "reward_collapse"


def test_generation_never_stops() -> None:
    diag = diagnose([LOGS / "scenarios" / "no_eos_areal.log"], confinement=ANYWHERE)
    f = next(f for f in diag.findings if f.id == "generation-never-stops")
    assert f.card == "generation-never-stops" and f.evidence["numbers"]["step"] == 3


def test_non_utf8_input() -> None:
    diag = diagnose([LOGS / "scenarios" / "latin1_oom.log"], confinement=ANYWHERE)
    assert diag.root_finding is not None and diag.root_finding.id == "cuda-oom"
    json.dumps(diag.to_dict())  # serialisable despite replacement characters


def test_binary_only_input_is_a_user_error() -> None:
    with pytest.raises(UserError, match="binary"):
        diagnose([LOGS / "scenarios" / "binary.log"], confinement=ANYWHERE)


def test_ray_repeated_lines_are_counted() -> None:
    line = "(TrainWorker pid=9) [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran for 600000 milliseconds before timing out. [repeated 7x across cluster]\n"
    f = diagnose_text(line).root_finding
    assert f is not None and f.evidence["count"] == 8


def test_a_short_text_without_a_final_newline_keeps_its_first_character() -> None:
    """A text shorter than the scanner's after-context reserve was scanned as its first byte, then the rest:
    a pasted one-line error lost its first character in the evidence ("CCL watchdog ...")."""
    line = "NCCL watchdog timeout after the weight update"
    for text in (line, line + "\n", "step 1 done\n" + line):
        f = diagnose_text(text).root_finding
        assert f is not None and f.evidence["line_text"] == line, text


def test_repeated_counts_hold_past_the_detailed_hits() -> None:
    """Hits past a group's detailed ones are only counted; Ray's "[repeated Nx]" still multiplies them."""
    line = ("(TrainWorker pid=9) [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={n}) ran for "
            "600000 milliseconds before timing out.{tail}\n")
    text = "".join(line.format(n=n, tail=" [repeated 2x across cluster]" if n % 2 else "") for n in range(60))
    f = diagnose_text(text).root_finding
    assert f is not None and f.evidence["count"] == 30 * 1 + 30 * 3


def test_metric_formats() -> None:
    verl = "".join(f"step:{i} - actor/pg_loss:0.1 - actor/grad_norm:{'nan' if i == 3 else 0.2} - critic/rewards/mean:0.5\n" for i in range(5))
    f = diagnose_text(verl).root_finding
    assert f is not None and f.id == "nonfinite-grad-norm" and f.evidence["numbers"]["step"] == 3


def test_to_dict_contract() -> None:
    data = diagnose([LOGS / "multirank"], confinement=ANYWHERE).to_dict()
    assert set(data) == {"findings", "root", "stats"}
    for f in data["findings"]:
        assert {"id", "category", "severity", "file", "line", "evidence", "summary", "fixes", "citations"} <= set(f)
        assert all(isinstance(x, str) for x in f["fixes"])
        assert [d["action"] for d in f["fix_details"]] == f["fixes"]
        for c in f["citations"]:
            assert {"kind", "ref", "section", "lines", "url", "text"} <= set(c) and c["kind"] in ("card", "doc", "log")
            assert c["text"] == str(Citation(**{k: v for k, v in c.items() if k != "text"}))
        assert any(c["kind"] == "log" and c["ref"] == f["file"] and c["lines"] == [f["line"], f["line"]]
                   and c["text"] == f"{f['file']}:{f['line']}" for c in f["citations"])
        assert f["severity"] in ("critical", "error", "warning", "info")
    json.dumps(data)


def test_engines_agree() -> None:
    """The pure-Python prefilter and the default engine (Hyperscan when installed) agree."""
    results = []
    for engine in ("python", "auto"):
        diag = diagnose([LOGS / "multirank"], engine=engine, confinement=ANYWHERE)
        results.append([(f.id, f.file, f.line, f.evidence["count"]) for f in diag.findings])
    assert results[0] == results[1]


def test_small_chunks_give_the_same_answer(tmp_path: Path) -> None:
    from rlmedic.tools.logs import scan as logscan
    from rlmedic.tools.logs.diagnose import _Builder
    from rlmedic.tools.logs.metrics import MetricCollector
    from rlmedic.tools.logs.signatures import builtin_catalog

    noise = "".join(
        f"[2025-11-22 10:00:{i % 60:02d} TP0] Decode batch. #running-req: {i % 97}, #token: {i * 7}, token usage: 0.5\n"
        for i in range(9000)
    )
    path = tmp_path / "long.log"
    path.write_text(noise + (LOGS / "scenarios" / "zero_reward_sglang_down.log").read_text() + noise)
    assert path.stat().st_size > 4 * 2 * (logscan.KEEP_BEFORE + logscan.AFTER_RESERVE)
    catalog = builtin_catalog()
    answers = []
    for chunk in (logscan.CHUNK, 1):  # 1 -> the minimum: many chunk boundaries
        metrics = MetricCollector(catalog.metrics)
        scanner = logscan.Scanner(catalog, on_metric=metrics.feed, chunk=chunk)
        conf = Confinement.for_paths([path])
        result = scanner.scan(logscan.expand_paths([path], conf)[0], conf)
        diag = _Builder(catalog, result, metrics).build()
        answers.append([(f.id, f.line, f.evidence["count"], f.evidence["excerpt"]) for f in diag.findings])
    assert answers[0] == answers[1]
    assert answers[0][0][:2] == ("rollout-connection-error", 9061)


def test_confinement_refuses_escapes(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    secret = tmp_path / "secret.log"
    secret.write_text("torch.OutOfMemoryError: CUDA out of memory\n")
    (allowed / "link.log").symlink_to(secret)
    (allowed / "ok.log").write_text("ValueError: fine\n")
    conf = Confinement(roots=[allowed.resolve()])
    with pytest.raises(AccessDenied):
        diagnose([allowed / ".." / "secret.log"], confinement=conf)
    with pytest.raises(AccessDenied):
        diagnose([str(secret.resolve())], confinement=conf)
    with pytest.raises(AccessDenied):
        diagnose([allowed / "link.log"], confinement=conf)
    diag = diagnose([allowed], confinement=conf)  # the directory walk skips the escaping link
    assert diag.stats["files"] == 1
    assert any("outside" in s["reason"] for s in diag.stats["skipped"])


def test_missing_path_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        diagnose([tmp_path / "nope.log"], confinement=ANYWHERE)
    with pytest.raises(UserError):
        diagnose([], confinement=ANYWHERE)


@pytest.mark.parametrize("chunk", [1, None])
def test_line_longer_than_the_buffer_does_not_stop_the_scan(tmp_path: Path, chunk: int | None) -> None:
    """A single line bigger than the before-context window (a dumped sample, a JSON blob) used to
    fill the buffer for good: the scan stopped there, claimed the byte cap, and missed the error."""
    from rlmedic.tools.logs import scan as logscan
    from rlmedic.tools.logs.diagnose import _Builder
    from rlmedic.tools.logs.metrics import MetricCollector
    from rlmedic.tools.logs.signatures import builtin_catalog

    catalog = builtin_catalog()
    metrics = MetricCollector(catalog.metrics)
    scanner = logscan.Scanner(catalog, on_metric=metrics.feed, chunk=chunk or logscan.CHUNK)
    size = scanner.chunk + 3 * logscan.KEEP_BEFORE  # longer than the whole read buffer
    path = tmp_path / "long_line.log"
    path.write_text(
        "step 1 done\n" + "sample: " + "x" * size + "\n" + "step 2 done\n"
        + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    conf = Confinement.for_paths([path])
    result = scanner.scan(logscan.expand_paths([path], conf)[0], conf)
    assert not result.truncated
    assert result.bytes_read == path.stat().st_size
    assert result.files[0].lines == 4
    diag = _Builder(catalog, result, metrics).build()
    assert diag.root_finding is not None
    assert (diag.root_finding.id, diag.root_finding.line) == ("cuda-oom", 4)


@pytest.mark.parametrize(
    ("body", "phase"),
    [
        # a weight update runs inside the trainer actor: the prefix on every line must not outvote the traceback
        (["[AReaL] 20251201-09:01:41.000 [FSDPEngine Rank 0] INFO: Begin update weights (type=xccl)",
          "Traceback (most recent call last):",
          '  File "/AReaL/areal/engine/fsdp_engine.py", line 700, in upload_weights',
          "    self._update_weights_from_distributed(meta)",
          '  File "/AReaL/areal/engine/fsdp_engine.py", line 750, in _update_weights_from_distributed',
          "    tensor = param.full_tensor()"], "weight_update"),
        (["Traceback (most recent call last):",
          '  File "/AReaL/areal/engine/fsdp_engine.py", line 512, in train_batch',
          "    loss.backward()"], "training"),
        # with nothing but the actor's name, the name still decides
        (["step 3 done"], "training"),
    ],
)
def test_oom_phase_inside_a_ray_actor(body: list[str], phase: str) -> None:
    lines = [f"(TrainWorker pid=3101, ip=10.0.0.2) {b}" for b in body]
    lines.append("(TrainWorker pid=3101, ip=10.0.0.2) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    oom = diagnose_text("\n".join(lines) + "\n").root_finding
    assert oom is not None and oom.id == "cuda-oom"
    assert oom.evidence["phase"] == phase


def test_watchdog_timeout_is_the_root_not_the_abort_banner_after_it() -> None:
    """`terminate called after throwing ... DistBackendError` follows every NCCL failure; on its own it
    used to outrank the timeout it reports and send the user to NCCL_SOCKET_IFNAME."""
    log = (
        "[rank1]:[E1201 10:30:00.123456789 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=5521, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
        "milliseconds before timing out.\n"
        "[rank1]:[E1201 10:30:00.223456789 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 1] failure "
        "detected by watchdog at work sequence id: 5521\n"
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
    )
    diag = diagnose_text(log)
    assert diag.root_finding is not None
    assert (diag.root_finding.id, diag.root_finding.line) == ("nccl-watchdog-timeout", 1)
    assert "nccl-error" not in [f.id for f in diag.findings]
    # a real NCCL error still is one
    err = diagnose_text("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
                        "system error\nterminate called after throwing an instance of 'c10::DistBackendError'\n")
    assert err.root_finding is not None and (err.root_finding.id, err.root_finding.line) == ("nccl-error", 1)


def test_symlink_loops_are_user_errors_or_skipped(tmp_path: Path) -> None:
    """A symlink loop used to raise RuntimeError('Symlink loop') out of Path.resolve(): a traceback."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").symlink_to(logs / "b.log")
    (logs / "b.log").symlink_to(logs / "a.log")
    (logs / "rank0.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    with pytest.raises(UserError, match="cannot resolve"):
        diagnose([logs / "a.log"], confinement=ANYWHERE)
    diag = diagnose([logs], confinement=ANYWHERE)
    assert diag.root_finding is not None and diag.root_finding.id == "cuda-oom"
    assert {s["file"].split("/")[-1] for s in diag.stats["skipped"]} == {"a.log", "b.log"}


def test_one_unreadable_rank_log_does_not_hide_the_others(tmp_path: Path) -> None:
    """A log the user cannot read (another user's rank log) used to abort the whole diagnosis."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    (logs / "rank1.log").write_text("secret\n")

    class Refusing(Confinement):
        def open_binary(self, path):  # noqa: ANN001, ANN202 - what a permission error looks like
            if Path(path).name == "rank1.log":
                raise UserError(f"{path}: cannot read (Permission denied)")
            return super().open_binary(path)

    conf = Refusing(roots=[logs.resolve()])
    diag = diagnose([logs], confinement=conf)
    assert diag.root_finding is not None and diag.root_finding.file.endswith("rank0.log")
    assert {"file": str(logs / "rank1.log"), "reason": "cannot read (Permission denied)"} in diag.stats["skipped"]
    with pytest.raises(UserError, match="Permission denied"):
        diagnose([logs / "rank1.log"], confinement=conf)  # nothing else to read: still one clear error


@pytest.mark.parametrize(
    ("head", "prefix", "wrong"),
    [
        ("[2025-11-22 10:00:00] train.py:31 - Starting slime training: actor 8 GPUs, rollout 8 GPUs",
         "(SGLangEngine pid=4001)", ("rollout.", "sglang.mem_fraction_static", "gconfig.")),
        ("[AReaL] 20251201-09:00:00.001 LocalLauncher INFO: Launching experiment gsm8k-grpo",
         "(RolloutWorker pid=2101)", ("--sglang-", "--rollout-")),
    ],
)
def test_fixes_are_for_the_framework_that_wrote_the_log(head: str, prefix: str, wrong: tuple[str, ...]) -> None:
    """A slime generation OOM used to lead with four AReaL keys (the only ones shown by default)."""
    log = "\n".join([
        head,
        f"{prefix} [2025-11-22 10:02:21 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        f'{prefix}   File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1090, in forward_extend',
        f"{prefix} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB.",
    ]) + "\n"
    root = diagnose_text(log).root_finding
    assert root is not None and root.card == "oom-sglang-generation" and root.fixes
    keys = [f.key for f in root.fixes if f.key]
    assert keys and not [k for k in keys if k.startswith(wrong)], keys


def test_gzip_cut_short_is_scanned_up_to_the_cut(tmp_path: Path) -> None:
    """A log gzipped by a run that was killed has no gzip end: it used to be dropped whole as 'unreadable'."""
    head = "".join(f"(TrainWorker pid=1) [AReaL] 20251201-09:{i:02d}:40.500 StatsLogger INFO: Epoch 1/5 Step {i}/233 "
                   f"Train step {i}/1165 done.\n" for i in range(1, 40))
    oom = "(TrainWorker pid=1) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    data = gzip.compress((head + oom + "filler line\n" * 20000).encode())
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log.gz").write_bytes(data[: len(data) * 2 // 3])
    (logs / "rank1.log").write_text("ValueError: unrelated on rank 1\n")
    diag = diagnose([logs], confinement=ANYWHERE)
    assert diag.root_finding is not None
    assert (diag.root_finding.id, diag.root_finding.file, diag.root_finding.line) == ("cuda-oom", str(logs / "rank0.log.gz"), 40)
    assert [p["file"] for p in diag.stats["partial"]] == [str(logs / "rank0.log.gz")]
    assert "ends early" in diag.stats["partial"][0]["reason"]
    assert not diag.stats["skipped"]
    # two gzip members (a rotated log appended to) read as one file; a non-gzip body after the magic is skipped
    two = tmp_path / "two.log.gz"
    two.write_bytes(gzip.compress(head.encode()) + gzip.compress(oom.encode()))
    both = diagnose([two], confinement=ANYWHERE)
    assert (both.root_finding.id, both.root_finding.line) == ("cuda-oom", 40) and not both.stats["partial"]
    bad = tmp_path / "bad.log.gz"
    bad.write_bytes(b"\x1f\x8b" + b"garbage" * 50)
    with pytest.raises(UserError, match="unreadable"):
        diagnose([bad], confinement=ANYWHERE)


def test_a_file_named_twice_is_read_once(tmp_path: Path) -> None:
    """`diagnose logs/ logs/rank0.log` (or a symlink to a rank log) used to count every error twice."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "rank0.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    (logs / "latest.log").symlink_to(log)
    diag = diagnose([logs, log, tmp_path / "logs" / ".." / "logs" / "rank0.log"], confinement=ANYWHERE)
    assert diag.stats["files"] == 1
    assert diag.root_finding is not None and diag.root_finding.evidence["count"] == 1


def test_an_error_the_run_got_past_is_not_the_root(tmp_path: Path) -> None:
    """A log appended to by a restarted run: the old OOM at step 50 used to be 'the' root cause of a
    run that went on to step 120 and then stopped without an error."""
    rows = ["[AReaL] 20251201-09:00:00.001 LocalLauncher INFO: Launching experiment gsm8k trial t1"]
    rows += [f"(TrainWorker pid=3101) [AReaL] 20251201-09:{i:02d}:40.500 StatsLogger INFO: Epoch 1/5 Step {i}/233 "
             f"Train step {i}/1165 done." for i in range(1, 51)]
    rows.append("(TrainWorker pid=3101) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.")
    oom_line = len(rows)
    rows.append("[AReaL] 20251201-11:00:00.001 LocalLauncher INFO: Launching experiment gsm8k trial t1")
    rows += [f"(TrainWorker pid=4101) [AReaL] 20251201-{11 + (i - 51) // 60}:{(i - 51) % 60:02d}:40.500 StatsLogger INFO: "
             f"Epoch 1/5 Step {i}/233 Train step {i}/1165 done." for i in range(51, 121)]
    log = _old_copy_text(tmp_path, "resumed.log", "\n".join(rows) + "\n")
    diag = diagnose([log], confinement=ANYWHERE)
    assert diag.root_finding is not None and diag.root_finding.id == "probable-interruption"
    oom = next(f for f in diag.findings if f.id == "cuda-oom")
    assert (oom.severity, oom.line, oom.root) == ("warning", oom_line, None)
    assert "not what stopped the run" in oom.summary and "to step 120" in oom.summary
    # the same OOM as the last thing in the log is still the root
    cut = _old_copy_text(tmp_path, "died.log", "\n".join(rows[: oom_line + 2]) + "\n")
    died = diagnose([cut], confinement=ANYWHERE).root_finding
    assert died is not None and (died.id, died.severity, died.line) == ("cuda-oom", "critical", oom_line)


def _old_copy_text(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path
