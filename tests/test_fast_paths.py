"""Every faster path gives the same diagnosis as the plain one, on every log fixture.

The fast paths: the signature catalog and the Hyperscan database loaded from the disk
cache (instead of parsed and compiled), and the scan engines. A fixture's diagnosis is
compared whole (findings, root, metrics), less the timing figures.
"""

from __future__ import annotations

import pickle
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


def _comparable(diag) -> dict:
    data = diag.to_dict()
    for key in ("seconds", "mb_per_s", "engine"):
        data["stats"].pop(key, None)
    return data


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
    assert pickle.dumps(cached) == pickle.dumps(fresh)
    assert [s.id for s in cached.signatures] == [s.id for s in fresh.signatures]
    for a, b in zip(cached.signatures, fresh.signatures):
        assert [p.pattern for p in a.patterns] == [p.pattern for p in b.patterns]
        assert a.literals == b.literals and a.fixes == b.fixes and a.extract == b.extract
    for path in CASES:
        assert _run(path, cached) == _run(path, fresh), path


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
    with_cache = [_run(p, engine="hyperscan") for p in CASES]  # the first run writes the entry, later ones load it
    monkeypatch.setenv("RLMEDIC_DISK_CACHE", "0")
    fresh = [_run(p, engine="hyperscan") for p in CASES]
    assert with_cache == fresh


def test_public_entry_point_matches() -> None:
    path = LOGS / "multirank"
    assert _comparable(diagnose([path], confinement=ANYWHERE)) == _run(path)
