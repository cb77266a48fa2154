"""Our embedding pipeline reproduces sentence-transformers' output for the shipped model."""

from __future__ import annotations

import math

from rlmedic.knowledge.embeddings import MAX_SEQ_LENGTH, default_embedder, model_path


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
