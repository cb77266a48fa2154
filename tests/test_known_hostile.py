"""Issue 31: a bad team record costs one problem line, never a hang, an unbounded read or minutes of --check.

Before: a FIFO named ``x.yaml`` hung ``ask``; ``x.yaml -> /dev/zero`` was read without bound (3 GB in
4 s); a record regex with nested quantifiers hung on a 45-character line; ``--check`` on 5,000 records
ran past 5 minutes (every symptom string asked the matcher, each ask walking every record).
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES
from rlmedic.knowledge.known import load
from rlmedic.knowledge.known.check import check, sample_line
from rlmedic.knowledge.known.load import BUILTIN_DIR, MAX_RECORD_BYTES

GOOD = yaml.safe_load((FIXTURES / "known" / "pack" / "sglang" / "fx-engine-flush-cache-busy.yaml").read_text())


def _team(tmp_path: Path) -> Path:
    folder = tmp_path / "team"
    folder.mkdir(exist_ok=True)
    (folder / f"{GOOD['id']}.yaml").write_text(yaml.safe_dump(GOOD))
    return folder


def _load_within(folder: Path, seconds: float = 10.0):
    out: list = []
    thread = threading.Thread(target=lambda: out.append(load([(folder, "team")])), daemon=True)
    start = time.perf_counter()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"loading {folder} ran past {seconds} s"
    return out[0], time.perf_counter() - start


def test_a_fifo_named_like_a_record_is_one_line_not_a_hang(tmp_path: Path) -> None:
    folder = _team(tmp_path)
    os.mkfifo(folder / "x.yaml")
    pack, _ = _load_within(folder)
    assert [r.id for r in pack.records] == [GOOD["id"]]
    assert len(pack.problems) == 1 and "x.yaml" in pack.problems[0] and "FIFO" in pack.problems[0]


def test_a_symlink_to_dev_zero_is_one_line_not_an_unbounded_read(tmp_path: Path) -> None:
    folder = _team(tmp_path)
    (folder / "x.yaml").symlink_to("/dev/zero")
    pack, took = _load_within(folder)
    assert len(pack.problems) == 1 and "character device" in pack.problems[0] and took < 5


def test_a_symlink_to_a_record_elsewhere_still_loads(tmp_path: Path) -> None:
    elsewhere = tmp_path / "shared" / "fx-linked.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(yaml.safe_dump({**GOOD, "id": "fx-linked"}))
    folder = _team(tmp_path)
    (folder / "fx-linked.yaml").symlink_to(elsewhere)
    pack, _ = _load_within(folder)
    assert sorted(r.id for r in pack.records) == sorted([GOOD["id"], "fx-linked"]) and pack.problems == []


def test_an_oversized_record_is_one_line(tmp_path: Path) -> None:
    folder = _team(tmp_path)
    (folder / "big.yaml").write_text("# padding\n" * (MAX_RECORD_BYTES // 10 + 10))
    pack, _ = _load_within(folder)
    assert len(pack.problems) == 1 and "larger than a record may be" in pack.problems[0]


@pytest.mark.parametrize("regexes, says", [
    ([r"^(\w+\s?)+$"], "inside another"),
    ([r"reward.*(\n.*)*failed"], "without bound"),
    ([f"reward worker {i} failed" for i in range(21)], "at most 20"),
])
def test_a_dangerous_or_bloated_regex_list_is_one_line(tmp_path: Path, regexes: list[str], says: str) -> None:
    folder = _team(tmp_path)
    (folder / "fx-bad.yaml").write_text(yaml.safe_dump({**GOOD, "id": "fx-bad",
                                                         "symptoms": {**GOOD["symptoms"], "regexes": regexes}}))
    pack, _ = _load_within(folder)
    assert [r.id for r in pack.records] == [GOOD["id"]]
    assert len(pack.problems) == 1 and says in pack.problems[0] and "\n" not in pack.problems[0]


def test_the_anchor_words_never_hide_a_shipped_string_or_pattern() -> None:
    """The matcher searches a text only for the strings and patterns whose anchor word it has: each shipped
    error string, and each pattern's sample line, must still reach its own record."""
    from rlmedic.knowledge.known.match import _index, _LETTER_WORD, _Lines

    pack = load([(BUILTIN_DIR, "builtin")])
    idx = _index(pack)
    for key in idx.error_at:
        assert key in _Lines([key]).candidates(idx), key
    for i, record in enumerate(idx.records):
        for n, pattern in enumerate(record.symptoms.regexes):
            line = sample_line(pattern)
            if line is None or not re.search(pattern, line):
                continue
            words = set(_LETTER_WORD.findall(line.lower()))
            reachable = set(idx.patterns_always) | {x for w in words for x in idx.patterns_by_word.get(w, ())}
            assert (i, n) in reachable, (record.id, pattern, line)


def _many(folder: Path, count: int) -> None:
    folder.mkdir(parents=True)
    for i in range(count):
        rid = f"team-{i:05d}"
        record = {**GOOD, "id": rid, "title": f"reward worker {i} fails", "sources": [f"team-org/rewards#{i + 1}"],
                  "symptoms": {"errors": [f"reward worker {i} crashed with signal {i}"],
                               "regexes": [rf"worker_{i}\.py.*(?:\n.*){{0,20}}timed out after \d+ s"],
                               "situation": "the reward pool under load"}}
        (folder / f"{rid}.yaml").write_text(yaml.safe_dump(record))


def test_check_asks_a_spread_sample_when_the_pack_is_big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlmedic.knowledge.known.check as check_module

    _many(tmp_path / "team", 60)
    monkeypatch.setattr(check_module, "MAX_PROBE_WORK", 60 * 20)  # 20 of the 120 strings
    report = check([tmp_path / "team"])
    assert report.available == 120 and report.probes == 20
    assert any("a sample of 20 of the 120 strings" in line for line in report.lines())


@pytest.mark.slow
def test_check_on_5000_team_records_is_bounded(tmp_path: Path) -> None:
    _many(tmp_path / "team", 5000)
    start = time.perf_counter()
    report = check([tmp_path / "team"])
    took = time.perf_counter() - start
    assert len(report.pack.records) == 5000 and report.pack.problems == []
    assert 0 < report.probes < report.available
    # ~6 s on an idle 2-core machine (load 5 s cold, the sample 3 s); generous for a shared CI machine
    assert took < 40, f"--check of 5,000 records took {took:.0f} s"
