"""Matching known issues: exact strings, regexes, exception types, similar words; versions decide the advice."""

from __future__ import annotations

import pytest
from conftest import FIXTURES
from rlmedic.knowledge.known import known_lines, load, match, vote_category
from rlmedic.knowledge.known.load import Pack

PACK_DIR = FIXTURES / "known" / "pack"


@pytest.fixture(scope="module")
def pack() -> Pack:
    loaded = load([(PACK_DIR, "builtin")])
    assert not loaded.problems
    return loaded


FLUSH_LOG = """\
[2025-05-02 11:02:03] INFO server_args: sglang==0.4.6 tp_size=2
[2025-05-02 11:09:10 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1721, in flush_cache_wrapped
    success = self.flush_cache()
AssertionError: flush_cache failed: there are still running requests (17 running)
"""


def test_an_exact_error_line_in_a_log_leads_with_version_advice(pack: Pack) -> None:
    top = match([FLUSH_LOG], pack=pack)[0]
    assert (top.record.id, top.how, top.version_status, top.yours) == ("fx-engine-flush-cache-busy", "exact", "affected", "0.4.6")
    assert top.matched.startswith("AssertionError: flush_cache failed")  # the user's own line, numbers and all
    assert top.advice.startswith("Known issue fixture-org/sglang#1990, fixed in sglang 0.4.6.post1 (PR fixture-org/sglang#2001): "
                                 "upgrade (you run sglang 0.4.6), or work around it: pause generation")
    assert top.citation.kind == "issue" and top.citation.ref == "fixture-org/sglang#1990"
    assert top.citation.url == "https://github.com/fixture-org/sglang/issues/1990"
    assert [(f.key, f.new) for f in top.fixes if f.key] == [("rollout.pause_before_update", True)]
    assert "run: pip install 'sglang>=0.4.6.post1'" in [str(f) for f in top.fixes]


def test_numbers_case_and_spacing_do_not_hide_an_exact_match(pack: Pack) -> None:
    line = "(EngineCore pid=88)   assertionerror:  FLUSH_CACHE failed:   there are still running requests"
    assert match([line], pack=pack)[0].how == "exact"


def test_an_error_string_matches_whole_words_only(pack: Pack) -> None:
    longer = "AssertionError: flush_cache failed: there are still running requests_pending_v2"
    assert all(m.how != "exact" for m in match([longer], pack=pack))


def test_a_record_fixed_in_the_users_version_is_demoted_and_says_so(pack: Pack) -> None:
    affected = match([FLUSH_LOG], pack=pack)[0]
    fixed = match([FLUSH_LOG.replace("sglang==0.4.6 ", "sglang==0.4.7 ")], pack=pack)[0]
    assert fixed.record.id == affected.record.id and fixed.version_status == "fixed_in_yours"
    assert fixed.score < affected.score / 1.5
    assert "your sglang 0.4.7 already has that fix" in fixed.advice
    # versions given explicitly (rlmedic env --json, pip list) win over the log
    assert match([FLUSH_LOG], pack=pack, versions={"sglang": "0.4.6.post1"})[0].version_status == "fixed_in_yours"
    assert match([FLUSH_LOG], pack=pack, versions={"sglang": "main"})[0].version_status == "unknown"
    lines = known_lines(match([FLUSH_LOG.replace("sglang==0.4.6 ", "sglang==0.4.7 ")], pack=pack), lambda c: 1)
    assert lines[0].startswith("Known issue fixture-org/sglang#1990 matches your error, but your sglang 0.4.7 already has")


def test_a_regex_matches_a_line_whose_names_vary(pack: Pack) -> None:
    log = "2025-06-01T10:00:00Z WARN router: Worker http://10.1.2.3:30001 is unhealthy after 5 consecutive failed health checks"
    top = match([log], pack=pack)[0]
    assert (top.record.id, top.how) == ("fx-router-worker-unhealthy", "regex")
    assert "10.1.2.3" in top.matched


def test_an_exception_type_with_shared_words(pack: Pack) -> None:
    log = ("Traceback (most recent call last):\n  File \"update.py\", line 9, in sync\n"
           "torch.distributed.DistBackendError: broadcast of the new weights to the rollout engines never completed")
    top = match([log], pack=pack)[0]
    assert (top.record.id, top.how) == ("fx-nccl-broadcast-watchdog", "exception")
    assert match(["ValueError: broadcast of the new weights to the engines never completed"], pack=pack)[0].how == "similar"


@pytest.mark.parametrize(
    ("question", "want"),
    [
        ("the trainer tells the engine to drop its prefix cache between steps and the scheduler asserts because "
         "generations are still in flight", "fx-engine-flush-cache-busy"),
        ("with verl and vllm colocated, turning on free_cache_engine makes the engine refuse to start, something "
         "about the allocator", "fx-vllm-sleep-cumem"),
        ("resuming my megatron torch_dist checkpoint after upgrading transformer engine complains about _extra_state",
         "fx-mcore-extra-state-missing"),
        ("the router says every worker is unhealthy whenever prompts are long", "fx-router-worker-unhealthy"),
        ("on two nodes the first weight broadcast from the trainer to the engines hangs until the watchdog fires",
         "fx-nccl-broadcast-watchdog"),
        ("flashinfer cannot compile its kernels inside my slim container image, there is no nvcc",
         "fx-flashinfer-nvcc-missing"),
    ],
)
def test_paraphrased_questions_find_the_record(pack: Pack, question: str, want: str) -> None:
    found = match(question=question, pack=pack)
    assert found and found[0].record.id == want and found[0].how == "similar"


def test_unrelated_text_matches_nothing(pack: Pack) -> None:
    assert match(["loss 0.31 reward 0.55 step 120"], question="how do I plot my reward curve?", pack=pack) == []


def test_the_framework_named_breaks_a_tie(pack: Pack) -> None:
    question = "engine fails at start"
    plain = {m.record.id: m.score for m in match(question=question, pack=pack, k=10, min_score=0)}
    boosted = {m.record.id: m.score for m in match(question=question, pack=pack, k=10, frameworks=["vllm"], min_score=0)}
    assert boosted["fx-vllm-sleep-cumem"] > plain.get("fx-vllm-sleep-cumem", 0)
    assert all(boosted[i] == plain[i] for i in plain if i != "fx-vllm-sleep-cumem" and i in boosted
               and "vllm" not in pack.by_id()[i].frameworks)


def test_vote_category(pack: Pack) -> None:
    category, share, matches = vote_category("RuntimeError: Missing key(s) in state_dict: decoder.layers.0.mlp._extra_state",
                                             pack=pack)
    assert category == "checkpoint_recovery" and share > 0.5 and matches[0].record.id == "fx-mcore-extra-state-missing"
    assert vote_category("all good, training finished", pack=pack) == ("other", 0.0, [])


def test_a_huge_log_is_matched_quickly(pack: Pack) -> None:
    import time

    noise = "".join(f"[2025-05-02 11:{i // 60 % 60:02d}:{i % 60:02d}] INFO step {i} loss 0.{i % 97} reward 0.5\n"
                    for i in range(60_000))
    flush = FLUSH_LOG.replace("sglang==0.4.6 ", "")
    start = time.perf_counter()
    top = match(["launching: sglang==0.4.6\n" + noise + flush], pack=pack)[0]
    assert top.record.id == "fx-engine-flush-cache-busy" and time.perf_counter() - start < 5.0
    assert top.version_status == "affected" and top.yours == "0.4.6"  # the banner at the head of the log still counts
    # a regex whose line sits in the middle of the noise is still found (hinted lines are kept with context)
    middle = noise[: len(noise) // 2] + "WARN Worker http://10.0.0.9:30000 is unhealthy after 3 consecutive failed health checks\n"
    assert match([middle + noise[len(noise) // 2:]], pack=pack)[0].how == "regex"


# Paraphrases written for shipped records (present when this was written): a user's own words, no error string.
SHIPPED_PARAPHRASES = [
    ("with pipeline parallel on, my slime run freezes until NCCL times out, but only when I normalize the advantages",
     "slime-pp-advantage-whiten-allreduce-deadlock"),
    ("deleting old checkpoints on our NFS share makes the verl megatron save crash with a missing file, "
     "several ranks seem to race", "verl-megatron-ckpt-retention-rmtree-race-shared-fs"),
    ("I set rollout max_model_len myself but verl ignores it and takes the value from the HF config",
     "verl-rollout-max-model-len-overwritten"),
    ("the rollout importance sampling metrics crash because torch quantile says the tensor is too big with 32k responses",
     "verl-rollout-is-quantile-input-too-large"),
    ("workers complain that a dict has no attribute seed because my config dataclass is defined in the launch script",
     "areal-rpc-config-dataclass-in-main-becomes-dict"),
]


@pytest.mark.parametrize(("question", "want"), SHIPPED_PARAPHRASES, ids=[w for _, w in SHIPPED_PARAPHRASES])
def test_paraphrases_find_shipped_records(question: str, want: str) -> None:
    from rlmedic.knowledge.known.load import BUILTIN_DIR

    shipped = load([(BUILTIN_DIR, "builtin")])
    if want not in shipped.by_id():
        pytest.fail(f"{want} left the shipped pack: pick another record for this paraphrase")
    found = match(question=question, pack=shipped, k=3)
    assert [m.record.id for m in found][:1] == [want], [(m.record.id, round(m.score, 3)) for m in found]


def test_a_synced_thread_becomes_a_record_with_a_category(pack: Pack, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlmedic.knowledge.known.match import record_from_thread
    from rlmedic.knowledge.retrieve import SearchResult

    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES_BUILTIN", "0")
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES", str(PACK_DIR))

    def hit(title: str, error: str, info: dict) -> SearchResult:
        return SearchResult(id="issue-x", source="sgl-project/sglang#77", section=title, score=1.0, text="", kind="issue",
                            path="", line_start=0, line_end=0, url="", matched_error=error, info=info)

    known = record_from_thread(hit("Scheduler asserts on flush", "assertionerror: flush_cache failed: there are still "
                                   "running requests", {"fixed_in": "v0.4.7", "closed_at": "2025-01-02T00:00:00Z",
                                                        "fix": "fixed by sgl-project/sglang#80 in v0.4.7"}))
    assert known is not None and known.origin == "thread" and known.category == "weight_sync"  # the record's
    assert (known.fixed_in.package, known.fixed_in.version) == ("sglang", "0.4.7")
    assert known.source_url == "https://github.com/sgl-project/sglang/issues/77" and known.closed_at.startswith("2025")
    assert known.fix.summary == "Fixed by sgl-project/sglang#80 in v0.4.7."
    odd = record_from_thread(hit("A frobnicator broke", "frobnicator exploded with code #", {}))
    assert odd is not None and odd.category == "other" and odd.fixed_in is None


def test_a_line_many_records_claim_leads_with_none_of_them() -> None:
    from rlmedic.knowledge.known.schema import Record

    def record(rid: str, error: str) -> Record:
        return Record.model_validate({
            "id": rid, "title": f"title {rid}", "frameworks": ["generic"], "category": "other",
            "symptoms": {"errors": [error], "situation": "any"}, "cause": "c", "fix": {"summary": "f"},
            "sources": ["fixture-org/x#1"], "established_by": "reporter"})

    line = "RuntimeError: worker pool exhausted while reserving the shared staging buffer"
    three = Pack((record("a", "worker pool exhausted"), record("b", "reserving the shared staging buffer"),
                  record("c", "exhausted while reserving the shared")), [], ())
    found = match([line], pack=three, k=3)
    assert {m.how for m in found} == {"exact"} and not any(m.certain for m in found)
    one = Pack(three.records[:1], [], ())
    assert match([line], pack=one)[0].certain


def test_the_matched_line_is_redacted(pack: Pack) -> None:
    line = ("AssertionError: flush_cache failed: there are still running requests "
            "(server http://admin:hunter2secret@10.0.0.1:30000 token=hf_abcdefghijklmnopqrstuvwxyz123456)")
    top = match([line], pack=pack)[0]
    assert top.how == "exact" and "hunter2secret" not in top.matched and "hf_abcdefghij" not in top.matched


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"Worker http://[\w.:-]+ is unhealthy after \d+ consecutive", (" is unhealthy after ", False)),
        (r"(?i)CUDA error: an illegal memory", ("cuda error: an illegal memory", True)),
        (r"(?i)(hang|stuck).*(rollout|first step)", ("", True)),  # only groups: nothing required
        (r"OutOfMemory|Killed", ("", False)),  # a top-level alternation
        (r"Missing key\(s\) in state_dict: .*_extra_state", ("Missing key(s) in state_dict: ", False)),
        (r"colou?r mismatch", ("r mismatch", False)),  # "u" may be absent, so "colo" and "r mismatch" are the runs
        (r"fp8[\s\S]{0,300}(k3_kl|mismatch)", ("fp8", False)),  # counts are not text
        (r"(?x) spaced  out", ("", False)),
    ],
)
def test_the_text_a_regex_requires(pattern: str, literal: tuple[str, bool]) -> None:
    from rlmedic.knowledge.known.match import required_literal

    assert required_literal(pattern) == literal


@pytest.mark.parametrize(
    ("key", "generic"),
    [
        ("valueerror: not enough values to unpack (expected #, got #)", True),
        ("torch.outofmemoryerror: cuda out of memory. tried to allocate # gib", True),
        ("runtimeerror: cuda error: an illegal memory access was encountered", True),
        ("no module named 'amp_c'", False),  # the module names the bug
        ("assertionerror: flush_cache failed: there are still running requests", False),
        ("update_weights_from_tensor: cuda out of memory", False),
    ],
)
def test_generic_messages_are_told_apart(key: str, generic: bool) -> None:
    from rlmedic.knowledge.known.match import generic_phrases, is_generic

    assert len(generic_phrases()) >= 10
    assert is_generic(key) is generic


def test_a_record_matched_only_by_a_generic_message_does_not_lead() -> None:
    from rlmedic.knowledge.known.schema import Record

    rec = Record.model_validate({
        "id": "g", "title": "t", "frameworks": ["generic"], "category": "other",
        "symptoms": {"errors": ["ValueError: not enough values to unpack (expected 2, got 0)"], "situation": "any"},
        "cause": "c", "fix": {"summary": "f"}, "sources": ["fixture-org/x#1"], "established_by": "reporter"})
    [m] = match(["ValueError: not enough values to unpack (expected 3, got 1)"], pack=Pack((rec,), [], ()))
    assert m.how == "exact" and not m.certain


def test_a_follow_up_on_the_same_log_reuses_the_logs_half_and_answers_the_same(monkeypatch) -> None:
    """The logs' half of the matcher is kept by content: the same text again is not rescanned, a changed
    text is, and the question's own lines still count (a regex or error string only the question has)."""
    import importlib

    m = importlib.import_module("rlmedic.knowledge.known.match")  # the module (the package exports the function)

    log = "\n".join(f"[step {i}] loss 0.{i}" for i in range(3000)) + (
        "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    calls = []
    real = m._see
    monkeypatch.setattr(m, "_see", lambda idx, texts: calls.append(len(texts)) or real(idx, texts))
    m._SEEN.clear()
    first = m.match([log], question="why did my run die?")
    again = m.match([log], question="why did my run die?")
    assert len(calls) == 1
    assert [(x.record.id, x.score, x.how, x.matched) for x in first] == [(x.record.id, x.score, x.how, x.matched)
                                                                         for x in again]
    m.match([log + "\nmore"], question="why did my run die?")
    assert len(calls) == 2
    # an error only the question carries is found with the cached logs' half
    question = "ValueError: too many values to unpack (expected 2)"
    with_q = m.match([log], question=question, k=10)
    m._SEEN.clear()
    fresh = m.match([log], question=question, k=10)
    assert [(x.record.id, x.how) for x in with_q] == [(x.record.id, x.how) for x in fresh]


def test_a_big_log_matched_in_a_worker_process_gives_the_same_matches() -> None:
    """The web server sends a new big log's regexes to a worker process (its event loop keeps the GIL):
    the matches must be the ones the caller's own thread finds."""
    import importlib

    m = importlib.import_module("rlmedic.knowledge.known.match")
    log = "\n".join(f"[step {i}] loss 0.{i} version {i}" for i in range(12000)) + (
        "\nRuntimeError: NCCL error in: ProcessGroupNCCL.cpp, unhandled system error\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert len(log) >= m.POOL_MIN_CHARS
    m._SEEN.clear()
    here = m.match([log], question="why did my run die?", k=10)
    m._SEEN.clear()
    m.use_processes(1)
    try:
        there = m.match([log], question="why did my run die?", k=10)
        assert m._POOL is not None and m._SEEN  # it ran (and is kept) through the pool
    finally:
        m.use_processes(0)
    assert here and [(x.record.id, x.score, x.how, x.matched) for x in here] == [
        (x.record.id, x.score, x.how, x.matched) for x in there]
