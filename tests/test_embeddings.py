"""Our embedding pipeline reproduces sentence-transformers' output for the shipped model."""

from __future__ import annotations

import math

import pytest

from rlmedic.knowledge.embeddings import MAX_SEQ_LENGTH, default_embedder, model_path


@pytest.mark.slow
def test_vectors_match_sentence_transformers() -> None:
    from sentence_transformers import SentenceTransformer

    texts = [
        "CUDA out of memory while SGLang generates rollouts",
        "Set actor.mb_spec.max_tokens_per_mb to bound the tokens in one micro-batch. " * 20,  # truncated
        "NCCL watchdog timeout",
    ]
    reference = SentenceTransformer(model_path(), device="cpu")
    reference.max_seq_length = MAX_SEQ_LENGTH
    expected = reference.encode(texts, normalize_embeddings=True).tolist()
    got = default_embedder().embed(texts)
    for a, b in zip(got, expected):
        assert len(a) == 384
        assert abs(math.sqrt(sum(x * x for x in a)) - 1.0) < 1e-5
        assert sum(x * y for x, y in zip(a, b)) > 0.9999


def test_similar_meanings_are_closer_than_unrelated_ones() -> None:
    e = default_embedder()
    oom, oom2, ckpt = e.embed(["GPU ran out of memory", "CUDA OOM error on the device", "where is my checkpoint saved"])
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
    assert dot(oom, oom2) > dot(oom, ckpt)


def test_numpy_and_torch_forwards_agree() -> None:
    """The query path (numpy) and the indexing path (torch) give the same vectors to 1e-4 cosine."""
    texts = [
        "CUDA out of memory while SGLang generates rollouts",
        "Set actor.mb_spec.max_tokens_per_mb to bound the tokens in one micro-batch. " * 20,  # truncated
        "NCCL watchdog timeout",
        "x",
    ]
    e = default_embedder()
    by_numpy = e.embed(texts, engine="numpy")
    by_torch = e.embed(texts, engine="torch")
    for a, b in zip(by_numpy, by_torch):
        assert abs(math.sqrt(sum(x * x for x in a)) - 1.0) < 1e-5
        assert sum(x * y for x, y in zip(a, b)) > 1 - 1e-4
    # padding in a mixed-length batch does not leak into the shorter texts
    alone = e.embed([texts[2]], engine="numpy")[0]
    assert sum(x * y for x, y in zip(alone, by_numpy[2])) > 1 - 1e-5


def test_bf16_bulk_vectors_stay_within_1e_3_cosine_of_fp32() -> None:
    """Bulk indexing may run in bf16 (``RLMEDIC_EMBED_PRECISION``); queries stay fp32, so the two must agree.

    torch computes bf16 on any CPU (emulated where it is not native), so this runs everywhere.
    """
    texts = [f"{w} while the rollout worker waits on SGLang step {i}" for i, w in
             enumerate(["CUDA out of memory", "NCCL watchdog timeout", "reward stuck at zero", "checkpoint missing"] * 3)]
    e = default_embedder()
    fp32 = e.embed(texts, engine="torch")
    bf16 = e.embed(texts, engine="torch-bf16")
    for a, b in zip(fp32, bf16):
        assert abs(math.sqrt(sum(x * x for x in b)) - 1.0) < 1e-5
        assert sum(x * y for x, y in zip(a, b)) > 1 - 1e-3
    # the nearest neighbour of each text is the same under both precisions
    def nearest(vectors: list[list[float]], i: int) -> int:
        return max((j for j in range(len(vectors)) if j != i), key=lambda j: sum(x * y for x, y in zip(vectors[i], vectors[j])))
    assert [nearest(fp32, i) for i in range(len(texts))] == [nearest(bf16, i) for i in range(len(texts))]


def test_bulk_precision_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlmedic.errors import UserError
    from rlmedic.knowledge.embeddings import bulk_precision

    monkeypatch.setenv("RLMEDIC_EMBED_PRECISION", "fp32")
    assert bulk_precision() == "fp32"
    monkeypatch.setenv("RLMEDIC_EMBED_PRECISION", "BF16")
    assert bulk_precision() == "bf16"
    monkeypatch.setenv("RLMEDIC_EMBED_PRECISION", "auto")
    assert bulk_precision() in ("fp32", "bf16")
    monkeypatch.setenv("RLMEDIC_EMBED_PRECISION", "fp8")
    with pytest.raises(UserError, match="RLMEDIC_EMBED_PRECISION"):
        bulk_precision()


def test_a_single_query_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rlmedic.knowledge.embeddings import default_embedder\n"
        "v = default_embedder().embed_query('NCCL watchdog timeout')\n"
        "print(len(v), 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["384", "False"]
