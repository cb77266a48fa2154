"""Every faster path gives the same diagnosis as the plain one, on every log fixture.

The fast paths: the signature catalog and the Hyperscan database loaded from the disk
cache (instead of parsed and compiled), and the scan engines. A fixture's diagnosis is
compared whole (findings, root, metrics), less the timing figures.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest

from conftest import ANYWHERE, FIXTURES
from rlmedic.errors import UserError
from rlmedic.tools.logs import signatures
from rlmedic.tools.logs.diagnose import _diagnose_sources, diagnose
from rlmedic.tools.logs.scan import expand_paths

LOGS = FIXTURES / "logs"
#: each log file alone, and each folder of rank logs as one run
CASES = sorted(
    [p for p in LOGS.rglob("*") if p.is_file() and p.suffix != ".yaml"]
    + [p for p in LOGS.rglob("*") if p.is_dir() and any(c.is_file() for c in p.iterdir())]
)


#: "the file was written 97 s ago" counts the seconds since the file's mtime: a fixture cloned moments
#: before the suite reads 97 in one run and 98 in the next
_AGE = re.compile(r"written \d+ s ago")


def _comparable(diag) -> dict:
    data = diag.to_dict()
    for key in ("seconds", "mb_per_s", "engine"):
        data["stats"].pop(key, None)
    return json.loads(_AGE.sub("written N s ago", json.dumps(data, default=str)))


def _run(path: Path, catalog=None, engine: str | None = None) -> dict:
    sources, skipped = expand_paths([path], ANYWHERE)
    try:
        return _comparable(_diagnose_sources(sources, ANYWHERE, skipped, engine, catalog))
    except UserError as exc:  # a binary or empty fixture: the same refusal on every path
        return {"error": str(exc)}


def test_there_are_fixtures_to_compare() -> None:
    assert len(CASES) > 50


def test_the_disk_cached_catalog_equals_a_fresh_parse(tmp_path: Path) -> None:
    signatures.builtin_catalog.cache_clear()
    first = signatures.builtin_catalog()  # builds and writes the cache entry (RLMEDIC_HOME is a temp dir)
    signatures.builtin_catalog.cache_clear()
    cached = signatures.builtin_catalog()  # read back from the entry
    fresh = signatures.load_catalog()
    assert cached is not first
    assert cached == fresh  # dataclass equality: every field, patterns by source
    assert [s.id for s in cached.signatures] == [s.id for s in fresh.signatures]
    for a, b in zip(cached.signatures, fresh.signatures):
        assert [p.pattern for p in a.patterns] == [p.pattern for p in b.patterns]
        assert a.literals == b.literals and a.fixes == b.fixes and a.extract == b.extract
    for path in CASES:
        assert _run(path, cached) == _run(path, fresh), path


def test_the_disk_cached_cards_equal_a_fresh_parse(tmp_path: Path) -> None:
    """Cold commands read the parsed cards from the disk cache: the same cards, field by field."""
    from rlmedic import diskcache
    from rlmedic.knowledge import cards

    cards.builtin_cards.cache_clear()
    first = cards.builtin_cards()  # builds and writes the entry (RLMEDIC_HOME is a temp dir)
    assert len(list(diskcache.cache_dir().glob("cards-*.bin"))) == 1
    cards.builtin_cards.cache_clear()
    cached = cards.builtin_cards()
    fresh = tuple(cards.load_cards())
    assert cached is not first and cached == fresh
    assert [c.id for c in cached] == [c.id for c in fresh] and len(cached) > 50
    cards.builtin_cards.cache_clear()


def test_a_damaged_cache_entry_is_rebuilt(tmp_path: Path) -> None:
    from rlmedic import diskcache

    signatures.builtin_catalog.cache_clear()
    signatures.builtin_catalog()
    entries = list(diskcache.cache_dir().glob("catalog-*.bin"))
    assert len(entries) == 1
    entries[0].write_bytes(b"garbage")
    signatures.builtin_catalog.cache_clear()
    catalog = signatures.builtin_catalog()
    assert [s.id for s in catalog.signatures] == [s.id for s in signatures.load_catalog().signatures]
    assert entries[0].read_bytes() != b"garbage"  # rewritten


def test_lazy_patterns_behave_as_compiled_ones() -> None:
    import re

    lazy = signatures._compile("t", r"(?P<gib>\d+\.\d+) GiB")
    plain = re.compile(r"(?P<gib>\d+\.\d+) GiB")
    line = "Tried to allocate 2.50 GiB (GPU 0; 79.1 GiB total)"
    assert lazy.search(line).group("gib") == plain.search(line).group("gib")
    assert lazy.findall(line) == plain.findall(line) and lazy.groupindex == plain.groupindex
    restored = pickle.loads(pickle.dumps(lazy))
    assert restored == lazy and restored._compiled is None  # compiles on first use, not on load
    assert restored.sub("X", line) == plain.sub("X", line)


@pytest.mark.parametrize("engine", ["python"])
def test_scan_engines_agree_with_hyperscan(engine: str) -> None:
    pytest.importorskip("hyperscan")
    for path in CASES:
        assert _run(path, engine=engine) == _run(path, engine="hyperscan"), path


def test_the_cached_hyperscan_database_finds_what_a_fresh_one_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hyperscan")
    from rlmedic import diskcache

    built: list[str] = []
    real = diskcache.cached

    def spy(kind, key, build, dump, load):
        return real(kind, key, lambda: built.append(kind) or build(), dump, load)

    monkeypatch.setattr(diskcache, "cached", spy)
    with_cache = [_run(p, engine="hyperscan") for p in CASES]  # the first run writes the entry, later ones load it
    assert built.count("hyperscan") <= 1, built  # loaded from the disk after the first (every load once failed)
    monkeypatch.setenv("RLMEDIC_DISK_CACHE", "0")
    fresh = [_run(p, engine="hyperscan") for p in CASES]
    assert with_cache == fresh


def test_public_entry_point_matches() -> None:
    path = LOGS / "multirank"
    assert _comparable(diagnose([path], confinement=ANYWHERE)) == _run(path)


def _bomb(path: Path, total_mb: int) -> Path:
    """A multi-member gzip that expands to ``total_mb`` MB of one repeated log line, about 1000:1."""
    import gzip

    member = gzip.compress(b"[2025-11-22 10:00:00] INFO step ok, loss 0.5\n" * ((8 << 20) // 45), 9)
    with open(path, "wb") as fh:
        for _ in range(total_mb // 8):
            fh.write(member)
    return path


def test_a_gzip_bomb_stops_early_with_a_note(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "train.log.gz", 1024)
    assert bomb.stat().st_size < 4 << 20  # a few MB on disk, 1 GiB inside
    diag = diagnose([bomb], confinement=ANYWHERE)
    stats = diag.to_dict()["stats"]
    assert stats["bytes"] < 200 << 20  # stopped long before the end
    assert any("decompression bomb" in p["reason"] for p in stats["partial"])


def test_an_ordinary_gzip_log_reads_whole_and_equals_the_plain_one(tmp_path: Path) -> None:
    import gzip

    plain = LOGS / "multirank" / "rank2.log"
    packed = tmp_path / "rank2.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = _run(plain), _run(packed)
    assert a["root"] == b["root"] and a["stats"]["bytes"] == b["stats"]["bytes"] and not b["stats"]["partial"]
    for fa, fb in zip(a["findings"], b["findings"]):
        assert {k: v for k, v in fa.items() if k not in ("file", "where", "evidence", "citations")} == {
            k: v for k, v in fb.items() if k not in ("file", "where", "evidence", "citations")}


def test_the_gzip_ratio_cap_is_configurable_and_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rlmedic.tools.logs import scan

    monkeypatch.setenv("RLMEDIC_MAX_GZIP_RATIO", "nonsense")
    with pytest.raises(UserError, match="RLMEDIC_MAX_GZIP_RATIO"):
        scan.max_gzip_ratio()
    monkeypatch.setenv("RLMEDIC_MAX_GZIP_RATIO", "5000")
    monkeypatch.setattr(scan, "GZIP_RATIO_GRACE", 1 << 20)
    stats = diagnose([_bomb(tmp_path / "b.log.gz", 64)], confinement=ANYWHERE).to_dict()["stats"]
    assert stats["bytes"] > 60 << 20 and not stats["partial"]  # under a 5000:1 cap the whole thing is read


def test_counting_repeated_hits_without_building_them_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    """A warning on every tenth line: beyond the detailed hits only the count and the last one are kept."""
    from rlmedic.tools.logs.scan import Scanner

    lines = []
    for i in range(3000):
        if i % 10 == 3:
            lines.append(f"[2025-11-22 10:{i // 60 % 60:02d}:{i % 60:02d} TP{i % 4}] KV cache pool is full. Retract requests. "
                         f"#retracted_reqs: {i % 7}, #new_token_ratio: 0.{i % 9} -> 1.0000")
        elif i % 10 == 6:
            lines.append(f"(raylet) [2025-11-22 10:00:{i % 60:02d}] Warning: CUDA out of memory. Tried to allocate 2.00 GiB "
                         f"[repeated {i % 5}x across cluster]")
        else:
            lines.append(f"[2025-11-22 10:00:00] Decode batch. #running-req: {i % 256}, #token: {i * 7}, gen throughput 812.3")
    lines.append("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 3 has a total capacity of 79 GiB")
    log = tmp_path / "warnings.log"
    log.write_text("\n".join(lines) + "\n")
    fast = _run(log)
    monkeypatch.setattr(Scanner, "_count_only", lambda self, *a: False)
    assert _run(log) == fast
    summaries = " ".join(f["summary"] for f in fast["findings"])
    assert "(x300)" in summaries, summaries  # every retraction counted, though only 20 were built


def _rank_folders() -> list[Path]:
    return [p for p in CASES if p.is_dir()]


def test_rank_folders_scanned_on_several_processes_equal_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlmedic.tools.logs import scan

    folders = _rank_folders()
    assert folders
    monkeypatch.setenv("RLMEDIC_SCAN_PROCESSES", "1")
    one = [_run(p) for p in folders]
    monkeypatch.setenv("RLMEDIC_SCAN_PROCESSES", "2")
    monkeypatch.setattr(scan, "PARALLEL_MIN_BYTES", 0)
    used = []
    real = scan.Scanner._scan_parallel

    def spy(self, *args):
        result = real(self, *args)
        used.append(result is not None)
        return result

    monkeypatch.setattr(scan.Scanner, "_scan_parallel", spy)
    many = [_run(p) for p in folders]
    assert used == [True] * len(folders)  # merged from the workers every time, no fallback
    assert many == one


def test_every_rank_of_a_wide_folder_keeps_its_metric_series(tmp_path: Path) -> None:
    """20 rank logs of five series each: 100 series, more than one file may hold. Every rank keeps
    its own (a 64-series cap for all files left the last ranks without any, a NaN there unseen)."""
    from rlmedic.tools.logs.metrics import MAX_SERIES_PER_FILE

    keys = ["grpo_actor/task_reward/avg", "grpo_actor/update/actor_loss/avg", "grpo_actor/update/grad_norm",
            "grpo_actor/update/entropy/avg", "grpo_actor/no_eos_ratios/avg"]
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in range(20):
        rows = []
        for step in range(1, 7):
            values = dict.fromkeys(keys, 0.1 * step)
            if rank == 19 and step == 6:
                values["grpo_actor/update/actor_loss/avg"] = float("nan")
            rows += [f"Epoch 1/1 Step {step}/6 Train step {step}/6 done.", "Stats (1/1):", "╒" + "═" * 40 + "╕"]
            rows += [f"│ {k:<38} │ {v:11.4e} │" for k, v in values.items()]
            rows.append("╘" + "═" * 40 + "╛")
        (folder / f"rank{rank:02d}.log").write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert 20 * len(keys) > MAX_SERIES_PER_FILE
    found = _run(folder)
    nan = [f for f in found["findings"] if "rank19.log" in json.dumps(f) and "nan" in json.dumps(f).lower()]
    assert nan, [f["summary"] for f in found["findings"]]
