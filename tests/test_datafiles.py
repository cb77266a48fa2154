"""The shipped tables are read from the disk cache once validated: equal to a fresh parse, rebuilt when a
file changes, and a command that finds them all cached never imports YAML (~25 ms of a cold command)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from rlmedic import datafiles, diskcache
from rlmedic.errors import UserError
from rlmedic.lazyregex import LazyPattern, checked


def _tables() -> list[tuple[str, object, object]]:
    """(cache kind, the cached loader, a fresh parse) for every shipped table that goes through datafiles."""
    from rlmedic.knowledge import cards
    from rlmedic.tools.logs import causality, signatures, tracebacks
    from rlmedic.tools.runs import detectors, vocabulary

    return [
        ("catalog", signatures.builtin_catalog, lambda: signatures.load_catalog()),
        ("cards", cards.builtin_cards, lambda: tuple(cards.load_cards())),
        ("causality", causality.builtin_table,
         lambda: causality.parse_table(datafiles.read_yaml(causality.TABLE_PATH), str(causality.TABLE_PATH),
                                       set(signatures.load_catalog().by_id))),
        ("tracebacks", tracebacks.builtin_rules, lambda: tuple(tracebacks.parse_table(
            datafiles.read_yaml(tracebacks.TABLE_PATH), str(tracebacks.TABLE_PATH)))),
        ("detectors", detectors.builtin_rules, lambda: datafiles.read_yaml(Path(detectors.__file__).with_name("detectors.yaml"))),
        ("vocabulary", vocabulary.builtin_vocabulary, None),
    ]


def _clear(loader: object) -> None:
    for fn in (loader, getattr(loader, "__wrapped__", None)):
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()  # type: ignore[union-attr]
    from rlmedic.tools.logs import tracebacks

    tracebacks._builtin.cache_clear()


@pytest.mark.parametrize("kind", [t[0] for t in _tables()])
def test_a_cached_table_equals_a_fresh_parse(kind: str) -> None:
    _name, loader, fresh = next(t for t in _tables() if t[0] == kind)
    _clear(loader)
    first = loader()  # type: ignore[operator]
    assert len(list(diskcache.cache_dir().glob(f"{kind}-*.bin"))) == 1  # written (RLMEDIC_HOME is a temp dir)
    _clear(loader)
    cached = loader()  # type: ignore[operator]
    assert cached is not first
    if fresh is None:  # the vocabulary: compare what the readers use
        assert cached.log_series == first.log_series and cached.step_keys == first.step_keys
        assert [(k, [p.pattern for p in ps]) for k, ps in cached.log_kinds()] == \
            [(k, [p.pattern for p in ps]) for k, ps in first.log_kinds()]
        assert cached.known("actor/entropy") and not cached.known("no/such/key")
    else:
        assert cached == fresh()  # type: ignore[operator]  # dataclass equality; patterns by their source
    _clear(loader)


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    table = tmp_path / "t.yaml"
    table.write_text("a: 1\n")
    calls = []

    def build() -> object:
        calls.append(1)
        return datafiles.read_yaml(table)

    assert datafiles.builtin("t", [table], [__file__], build) == {"a": 1}
    assert datafiles.builtin("t", [table], [__file__], build) == {"a": 1} and len(calls) == 1  # from the cache
    table.write_text("a: 2\n")
    assert datafiles.builtin("t", [table], [__file__], build) == {"a": 2} and len(calls) == 2


def test_invalid_yaml_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(UserError, match=r"bad\.yaml: invalid YAML"):
        datafiles.read_yaml(bad)


def test_checked_patterns_fail_at_once_and_pickle_as_text() -> None:
    import re

    with pytest.raises(re.error):
        checked("(unclosed")
    rx = checked(r"(?P<n>\d+) GiB")
    restored = pickle.loads(pickle.dumps(rx))
    assert isinstance(restored, LazyPattern) and restored._compiled is None
    assert restored.search("2 GiB").group("n") == "2" and restored.search("2 MiB") is None


def test_a_warm_diagnose_imports_neither_yaml_nor_pydantic(tmp_path: Path) -> None:
    """Each costs a cold command start-up time: PyYAML ~25 ms (its resolver's regexes), pydantic
    ~0.15-0.25 s (its import and model building). The tables come from the cache; the shared types
    are dataclasses and a command's own tool call skips pydantic (:meth:`Tool.bind`)."""
    log = tmp_path / "train.log"
    log.write_text("step 1 loss=0.5\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['rlmedic', 'diagnose', {str(log)!r}]\n"
        "try:\n    runpy.run_module('rlmedic', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('PYDANTIC' if 'pydantic' in sys.modules else 'NO-PYDANTIC')\n"
        "print('YAML' if 'yaml' in sys.modules else 'NO-YAML')\n"
    )
    env = dict(os.environ)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
            for _ in range(2)]
    assert "out of memory" in runs[1].stdout.lower(), runs[1].stdout + runs[1].stderr
    assert runs[0].stdout.strip().endswith("YAML")  # the first one parsed and cached the tables
    assert runs[1].stdout.strip().endswith("NO-YAML"), runs[1].stdout[-500:]
    assert "\nNO-PYDANTIC\n" in runs[1].stdout, runs[1].stdout[-500:]
