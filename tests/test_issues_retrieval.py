"""Issue threads as evidence: a log whose error line matches a thread's finds and cites that thread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlmedic.agent.offline import answer_offline
from rlmedic.knowledge.index import KnowledgeBase
from rlmedic.knowledge.retrieve import SearchResult
from rlmedic.knowledge.sync import read_export
from rlmedic.knowledge.threads import FORMAT, error_keys, keys_match

LOG = Path(__file__).parent / "fixtures" / "logs" / "signatures" / "cuda-graph-capture-failed.log"
# the log's error line, with other numbers: a thread reported on another GPU
THREAD_ERROR = (
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.50 GiB. "
    "GPU 0 has a total capacity of 79.15 GiB of which 512.00 MiB is free."
)


def record(repo: str, number: int, title: str, problem: str, errors: list[str], **extra) -> dict:
    base = {
        "format": FORMAT,
        "repo": repo,
        "number": number,
        "url": f"https://github.com/{repo}/issues/{number}",
        "title": title,
        "state_reason": "completed",
        "labels": [],
        "created_at": "2025-02-20T00:00:00Z",
        "updated_at": "2025-03-05T00:00:00Z",
        "closed_at": "2025-03-05T00:00:00Z",
        "problem": problem,
        "error_lines": errors,
        "resolution": [],
        "workaround": "",
        "fix_prs": [],
        "fix_commit": "",
        "fixed_in": "",
        "fixed_in_basis": "",
    }
    return base | extra


THREADS = [
    record(
        "sgl-project/sglang",
        4321,
        "Server dies while capturing CUDA graphs on startup",
        "The scheduler crashes right after loading weights when cuda graphs are captured.",
        [THREAD_ERROR],
        resolution=[{"association": "MEMBER", "created_at": "2025-03-03T00:00:00Z", "body": "Graph capture now reserves its pool before the KV cache; lower --mem-fraction-static on older versions."}],
        fix_prs=[{"repo": "sgl-project/sglang", "number": 4400, "url": "https://github.com/sgl-project/sglang/pull/4400", "title": "Reserve cuda graph pool first", "merged_at": "2025-03-03T00:00:00Z"}],
        fixed_in="v0.4.4",
        fixed_in_basis="release notes",
    ),
    record(
        "volcengine/verl",
        900,
        "Actor OOM during backward with long responses",
        "Training OOMs in the actor update when responses are long.",
        ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 3 has a total capacity of 79.15 GiB"],
        resolution=[{"association": "COLLABORATOR", "created_at": "2025-01-03T00:00:00Z", "body": "Enable gradient checkpointing and lower ppo_micro_batch_size_per_gpu."}],
    ),
    record("inclusionAI/AReaL", 77, "NCCL timeout in weight update", "Weight update hangs then times out.", ["torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0 after timeout"]),
    record("THUDM/slime", 120, "Reward is always zero with custom reward function", "All rewards are 0 after switching the reward model.", []),
    record("THUDM/slime", 121, "Checkpoint load fails: missing keys", "Loading the torch_dist checkpoint fails.", ["RuntimeError: Error(s) in loading state_dict: Missing key(s) in state_dict"]),
    record("sgl-project/sglang", 5000, "Illegal memory access with FlashInfer backend", "Crash during decode.", ["RuntimeError: CUDA error: an illegal memory access was encountered"]),
    record("inclusionAI/AReaL", 80, "How to resume from a recover checkpoint", "Where does recover save?", []),
    record("volcengine/verl", 950, "vLLM rollout hangs at startup", "Ray actors wait forever.", ["TimeoutError: Timed out waiting for the rollout workers"]),
]


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    tmp = tmp_path_factory.mktemp("issues-kb")
    export = tmp / "threads.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in THREADS))
    kb = KnowledgeBase(tmp / "index")
    report = kb.index_threads(read_export(export))
    assert len(report.added) == len(THREADS)
    return kb


@pytest.fixture(autouse=True)
def _threads_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped known-issue records may hold the same error line: these tests are about threads."""
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES_BUILTIN", "0")


def test_error_lines_match_across_numbers_and_log_prefixes() -> None:
    log_keys = error_keys(LOG.read_text())
    assert any(keys_match(q, k) for q in log_keys for k in error_keys([THREAD_ERROR]))
    assert not keys_match("error: #", "error: # failed")  # too short to mean anything


def test_the_thread_with_the_same_error_line_ranks_first(kb: KnowledgeBase) -> None:
    hits = kb.search(LOG.read_text(), 3, kind="issue")
    assert hits[0].source == "sgl-project/sglang#4321"
    assert hits[0].matched_error and "capture cuda graph failed" in hits[0].matched_error
    assert not any(h.matched_error for h in hits[1:])  # the training OOM thread is a different error line


def test_offline_answer_cites_the_thread_with_its_fix_and_release(kb: KnowledgeBase) -> None:
    answer = answer_offline(LOG.read_text(), kb)
    text = answer.answer
    # the thread whose error line is in the log leads the answer, as a known issue with its fix and release
    assert text.startswith("Known issue: Server dies while capturing CUDA graphs on startup (sgl-project/sglang#4321)")
    assert "Your log: (RolloutWorker pid=2101) Exception: Capture cuda graph failed" in text  # the user's own line
    assert "Fixed by sgl-project/sglang#4400 (merged 2025-03-03) in v0.4.4" in text
    assert "fixed in sglang 0.4.4: upgrade" in text
    assert "The thread was closed in 2025-03, over a year ago: the code may have changed since." in text
    cited = [c for c in answer.citations if c.ref == "sgl-project/sglang#4321"]
    assert len(cited) == 1 and cited[0].kind == "issue"
    assert cited[0].url == "https://github.com/sgl-project/sglang/issues/4321"
    n = answer.citations.index(cited[0]) + 1
    assert f"[{n}]" in text.split("Sources:")[0]
    assert f"[{n}] sgl-project/sglang#4321 § Server dies while capturing CUDA graphs on startup <https://github.com/sgl-project/sglang/issues/4321>" in text
    assert text.index("Known issue") < text.index("From the log") < text.index("Sources:")
    assert "sgl-project/sglang#4321" in json.dumps(answer.to_dict())


def test_the_users_version_decides_upgrade_or_look_elsewhere(kb: KnowledgeBase) -> None:
    old = answer_offline(LOG.read_text() + "\nsglang==0.4.3.post2\n", kb).answer
    assert "Known issue sgl-project/sglang#4321, fixed in sglang 0.4.4: upgrade (you run sglang 0.4.3.post2)." in old
    new = answer_offline(LOG.read_text() + "\nsglang==0.4.10\n", kb).answer
    assert "your sglang 0.4.10 already has that fix" in new
    assert not new.startswith("Known issue")  # demoted: the log's own evidence leads


@pytest.mark.slow
def test_issue_threads_do_not_change_card_or_doc_rankings(tmp_path: Path) -> None:
    kb = KnowledgeBase(tmp_path / "index")
    query = "sglang server runs out of memory while capturing cuda graphs"
    before = [(r.id, round(r.score, 9)) for r in kb.search(query, 5, kind="card")]
    kb.index_threads(THREADS)
    after = [(r.id, round(r.score, 9)) for r in kb.search(query, 5, kind="card")]
    assert before == after
    # a search over every kind now includes the thread beside cards
    mixed = kb.search(LOG.read_text(), 5)
    assert {r.kind for r in mixed} >= {"issue", "card"}
    assert mixed[0].source == "sgl-project/sglang#4321"
