"""Stats-table cells are read by splitting on the bar, not by the regex that defines them: the two must agree
on any text, tables broken in every way included."""

from __future__ import annotations

import random

from rlmedic.tools.logs.metrics import _GRID_PAIR, grid_pairs

TABLE = (
    "(TrainWorker pid=3101, ip=10.0.0.5) ╒══════════╤═════════╤══════════╤═════════╕\n"
    "(TrainWorker pid=3101, ip=10.0.0.5) │ grpo_actor/task_reward/avg │  1.1766e-01 │ timeperf/train_step │  6.2e+01 │\n"
    "(TrainWorker pid=3101, ip=10.0.0.5) │ grpo_actor/seq_len/avg     │  nan        │ empty               │          │\n"
    "(TrainWorker pid=3101, ip=10.0.0.5) ╘══════════╧═════════╧══════════╧═════════╛"
)


def test_a_table_gives_its_cells_in_order() -> None:
    assert grid_pairs(TABLE) == [("grpo_actor/task_reward/avg", "1.1766e-01"), ("timeperf/train_step", "6.2e+01"),
                                 ("grpo_actor/seq_len/avg", "nan")]
    assert grid_pairs(TABLE) == _GRID_PAIR.findall(TABLE)


def test_the_split_agrees_with_the_regex_on_random_text() -> None:
    alphabet = ["│", " ", " ", " ", "a", "b", "1", ".", "\t", "\n", "-", "e", "\u2003", "\xa0", "x ", "\r", "\x1c"]
    rng = random.Random(7)
    for _ in range(40_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert grid_pairs(text) == _GRID_PAIR.findall(text), repr(text)
