"""Retrieval over the real seeds + corpus: user questions find the right section/card."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmedic.knowledge.evaluate import evaluate, first_hit_rank, load_questions
from rlmedic.knowledge.index import KnowledgeBase
from rlmedic.knowledge.words import identifiers, tokenize

QUESTIONS = Path(__file__).parent / "data" / "retrieval_questions.yaml"


@pytest.fixture(scope="session")
def kb(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> KnowledgeBase:
    kb = KnowledgeBase(tmp_path_factory.mktemp("kb") / "index")
    report = kb.index([shared / "seeds", shared / "corpus"])
    assert len(report.added) > 50 and not report.skipped
    return kb


@pytest.fixture(scope="session")
def questions():
    return load_questions(QUESTIONS)


@pytest.mark.slow
def test_every_question_finds_its_card_in_the_top_3(kb, questions) -> None:
    misses = []
    for q in questions:
        rank = first_hit_rank(kb.search(q.question, 3, kind="card"), q, cards=True)
        if rank is None:
            misses.append(q.question)
    assert not misses, misses


@pytest.mark.slow
def test_doc_sections_hybrid_beats_each_side_and_guided_beats_hybrid(kb, questions) -> None:
    bm25 = evaluate(kb, questions, mode="bm25")
    dense = evaluate(kb, questions, mode="dense")
    hybrid = evaluate(kb, questions, mode="hybrid")
    guided = evaluate(kb, questions, mode="guided")
    assert hybrid.mrr >= max(bm25.mrr, dense.mrr)
    assert hybrid.recall[3] >= max(bm25.recall[3], dense.recall[3])
    assert guided.recall[3] >= hybrid.recall[3]
    # measured 0.931 (benchmarks/retrieval.py); the floor guards against regressions
    assert guided.recall[3] >= 0.88, guided.misses


@pytest.mark.slow
@pytest.mark.parametrize(
    ("query", "expected_in_section"),
    [
        ("mem_fraction_static", "mem_fraction_static"),
        ("--max-tokens-per-gpu", "max_tokens_per_gpu"),
        ("Max retries exceeded with url: /get_model_info", "max retries exceeded"),
        ("an illegal memory access was encountered", "illegal memory access"),
    ],
)
def test_exact_identifiers_and_error_strings_find_the_section_naming_them(kb, query, expected_in_section) -> None:
    results = kb.search(query, 3, kind="doc")
    texts = [(r.section + "\n" + r.text).lower().replace("-", "_") for r in results]
    assert any(expected_in_section.replace("-", "_") in t for t in texts), [str(r.citation) for r in results]


@pytest.mark.slow
def test_results_carry_citations_with_lines(kb) -> None:
    result = kb.search("weight sync timeout after rollout", 1, kind="doc")[0]
    text = str(result.citation)
    assert result.source in text and "lines" in text
    assert result.line_start <= result.line_end


def test_tokenizer_keeps_identifiers_whole_and_normalises_flags() -> None:
    tokens = tokenize("set actor.sglang.mem_fraction_static and --max-tokens-per-gpu")
    assert "actor.sglang.mem_fraction_static" in tokens and "mem_fraction_static" in tokens
    assert "max_tokens_per_gpu" in tokens and "gpu" in tokens
    assert identifiers("'Max retries exceeded' at /get_model_info") == ["get_model_info", "max retries exceeded"]


def test_tokenizer_gives_exactly_the_tokens_in_order_with_a_warm_cache() -> None:
    """The per-word cache must not change the output: the full sequence, duplicates and order included."""
    text = "Set --max-tokens-per-gpu; the max tokens per GPU (actor.sglang.mem_fraction_static=0.8) is a max. I/O of a x2 run"
    expected = ["set", "max_tokens_per_gpu", "max", "tokens", "per", "gpu", "max", "tokens", "per", "gpu",
                "actor.sglang.mem_fraction_static", "mem_fraction_static", "actor", "sglang", "mem", "fraction", "static",
                "0", "8", "max", "2", "run"]  # "I/O", "a" and the "x" of "x2" are too short; "2" is a number
    first = tokenize(text)
    assert first == expected
    assert tokenize(text) == first == tokenize(text[:0] + text)
