"""Known-issue records: every shipped record validates, bad ones are refused in one line, folders compose."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, REPO
from rlmedic.knowledge.known import load
from rlmedic.knowledge.known.check import check, sample_line
from rlmedic.knowledge.known.load import BUILTIN_DIR, record_files

PACK = FIXTURES / "known" / "pack"
TEAM = FIXTURES / "known" / "team"
SHIPPED = record_files(BUILTIN_DIR)
GOOD = yaml.safe_load((PACK / "sglang" / "fx-engine-flush-cache-busy.yaml").read_text())


@pytest.fixture
def only_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES_BUILTIN", "0")
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES", str(PACK))


@pytest.mark.parametrize("path", SHIPPED or [None], ids=[p.stem for p in SHIPPED] or ["no-shipped-records-yet"])
def test_every_shipped_record_validates(path: Path | None) -> None:
    pack = load([(BUILTIN_DIR, "builtin")], strict=True)
    if path is None:  # the pack is being written: the loader still reads the folder cleanly
        assert pack.records == () and pack.problems == []
        return
    assert [p for p in pack.problems if p.startswith(f"{path}:")] == []
    assert path.stem in pack.by_id()


def test_the_shipped_pack_has_no_problems_and_retrieves_itself() -> None:
    report = check([BUILTIN_DIR])
    assert report.pack.problems == []
    if report.pack.records:
        # error strings several records share ("CUDA out of memory") cannot pick one record: they are the misses
        assert report.share_distinct >= 0.95, report.lines()


def test_the_fixture_pack_validates_and_retrieves_itself() -> None:
    report = check([PACK, TEAM])
    assert report.pack.problems == []
    assert len(report.pack.records) == 7
    assert report.pack.counts("category")["weight_sync"] == 1
    assert report.pack.counts("frameworks")["sglang"] == 3
    assert report.probes == 8 and report.share >= 0.95  # 5 error strings + a sample line for each of 3 regexes
    assert not report.unprobed


def _write(folder: Path, record: dict, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name or record.get('id', 'x')}.yaml"
    path.write_text(yaml.safe_dump(record, sort_keys=False))
    return path


def _mutate(path: tuple[str, ...], value: object) -> dict:
    data = copy.deepcopy(GOOD)
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()
BAD = [
    (("colour",), "red", "colour: unknown field"),
    (("url",), "https://example.org", "url: unknown field (set by the loader"),
    (("fix", "steps"), ["x"], "fix.steps: unknown field"),
    (("category",), "oom", "unknown category 'oom'"),
    (("frameworks",), ["deepspeed-chat"], "unknown framework(s) deepspeed-chat"),
    (("symptoms", "regexes"), ["flush_cache failed: ("], "does not compile"),
    (("sources",), ["sglang#1990"], "not owner/repo#N"),
    (("fixed_in", "version"), "soon", "not a release number"),
    (("fixed_in", "version"), 0.10, "must be quoted"),
    (("fixed_in", "pr"), "#2001", "fixed_in.pr '#2001' is not owner/repo#N"),
    (("affected", "versions"), "before 0.5", "not a PEP 440 specifier"),
    (("symptoms", "errors"), [], "symptoms need errors or regexes"),
    (("symptoms", "errors"), ["ZeroDivisionError"], "is only an exception type"),
    (("cause",), _DELETE, "cause: Field required"),
    (("established_by",), "rumour", "established_by"),
    (("id",), "Engine_Flush", "must be a slug"),
]


@pytest.mark.parametrize(("where", "value", "message"), BAD, ids=[m for *_, m in BAD])
def test_a_bad_record_is_one_clear_line(tmp_path: Path, where: tuple[str, ...], value: object, message: str) -> None:
    record = _mutate(where, value)
    path = _write(tmp_path / "team", record, name=GOOD["id"])
    _write(tmp_path / "team", {**GOOD, "id": "fx-good-neighbour"})
    pack = load([(tmp_path / "team", "team")])
    assert len(pack.problems) == 1, pack.problems
    line = pack.problems[0]
    assert "\n" not in line and line.startswith(str(path)) and message in line, line
    assert [r.id for r in pack.records] == ["fx-good-neighbour"]  # the rest still loads


def test_id_must_be_the_file_name_and_unique(tmp_path: Path) -> None:
    _write(tmp_path / "a", GOOD, name="another-name")
    _write(tmp_path / "b", GOOD)
    _write(tmp_path / "c", GOOD)
    (tmp_path / "c" / "broken.yaml").write_text("id: [unclosed\n")
    pack = load([(tmp_path / "a", "team"), (tmp_path / "b", "team"), (tmp_path / "c", "team")])
    assert any("differs from the file name" in p for p in pack.problems)
    assert any("duplicate id 'fx-engine-flush-cache-busy'" in p for p in pack.problems)
    assert any(p.startswith(str(tmp_path / "c" / "broken.yaml")) and "not valid YAML (line 2)" in p for p in pack.problems)
    assert [r.id for r in pack.records] == [GOOD["id"]]


def test_team_folders_add_records_and_the_builtin_switch_removes_the_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES", os.pathsep.join([str(PACK), str(TEAM)]))
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES_BUILTIN", "1")
    with_builtin = load()
    ids = with_builtin.by_id()
    assert "fx-team-reward-server-timeout" in ids and ids["fx-team-reward-server-timeout"].origin == "team"
    assert len(with_builtin.records) == 7 + len(SHIPPED)
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES_BUILTIN", "0")
    without = load()
    assert len(without.records) == 7 and all(r.origin == "team" for r in without.records)
    monkeypatch.setenv("RLMEDIC_KNOWN_ISSUES", str(PACK) + os.pathsep + "/nonexistent/known")
    missing = load()
    assert missing.problems == ["/nonexistent/known: known-issues folder not found (from RLMEDIC_KNOWN_ISSUES or --known-issues)"]
    assert len(missing.records) == 6


def test_loading_is_cached_in_process_and_on_disk(tmp_path: Path) -> None:
    folder = tmp_path / "team"
    for i in range(30):
        _write(folder, {**GOOD, "id": f"fx-copy-{i}"})
    first = load([(folder, "team")])
    assert load([(folder, "team")]) is first  # nothing changed: the same pack
    cache = Path(os.environ["RLMEDIC_HOME"]) / "cache" / "known-records.json"
    assert cache.is_file() and "fx-copy-29" in cache.read_text()
    changed = _write(folder, {**GOOD, "id": "fx-copy-3", "title": "A new title for the third copy"})
    os.utime(changed, ns=(changed.stat().st_atime_ns, changed.stat().st_mtime_ns + 10_000_000))
    again = load([(folder, "team")])
    assert again is not first and again.by_id()["fx-copy-3"].title == "A new title for the third copy"


def test_sample_lines_match_their_regexes() -> None:
    for pattern in [r"Worker http://[\w.:-]+ is unhealthy after \d+ consecutive", r"Missing key\(s\) in state_dict: .*_extra_state",
                    r"(?:CUDA|HIP) error: (?:an illegal|invalid) memory access", r"rank \d{1,3} (?:timed out|hung)"]:
        line = sample_line(pattern)
        assert line is not None and __import__("re").search(pattern, line), (pattern, line)


def test_check_command_exit_codes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": ""}
    ok = subprocess.run([sys.executable, "-m", "rlmedic.knowledge.known", "--check", str(PACK), str(TEAM)],
                        capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "7 records from 2 folder(s)" in ok.stdout and "self-retrieval: 100.0% (8/8" in ok.stdout
    assert "per project: areal 1," in ok.stdout and "per category: checkpoint_recovery 1," in ok.stdout
    _write(tmp_path / "bad", _mutate(("category",), "oom"), name=GOOD["id"])
    bad = subprocess.run([sys.executable, "-m", "rlmedic.knowledge.known", "--check", str(tmp_path / "bad")],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[0].startswith(str(tmp_path / "bad" / f"{GOOD['id']}.yaml") + ": category: unknown category")


def test_a_yaml_bomb_in_a_team_folder_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "team"
    folder.mkdir()
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8))
    (folder / "bomb.yaml").write_text(bomb)
    _write(folder, GOOD)
    pack = load([(folder, "team")])
    assert len(pack.problems) == 1 and pack.problems[0].startswith(str(folder / "bomb.yaml"))
    assert "\n" not in pack.problems[0]
    assert [r.id for r in pack.records] == [GOOD["id"]]


def test_every_shipped_regex_prefilter_is_sound() -> None:
    """A regex is skipped when its required text is absent: that text must be in every line it matches
    (checked on the line made for each regex)."""
    import re

    from rlmedic.knowledge.known.match import required_literal

    checked = 0
    for record in load([(BUILTIN_DIR, "builtin")]).records:
        for pattern in record.symptoms.regexes:
            line = sample_line(pattern)
            if line is None or not re.search(pattern, line):
                continue
            literal, ignore = required_literal(pattern)
            assert literal in (line.lower() if ignore else line), (record.id, pattern, literal, line)
            checked += 1
    assert checked or not SHIPPED


def test_regexes_are_compiled_by_the_check_and_for_team_records_not_on_every_cold_start(tmp_path: Path) -> None:
    bad = dict(GOOD, id="bad-regex", symptoms={**GOOD["symptoms"], "regexes": ["(unclosed"]})
    folder = tmp_path / "pack"
    folder.mkdir()
    (folder / "bad-regex.yaml").write_text(yaml.safe_dump(bad))
    strict = load([(folder, "builtin")], strict=True)
    assert strict.records == () and "does not compile" in strict.problems[0]
    assert [r.id for r in load([(folder, "builtin")]).records] == ["bad-regex"]  # the shipped pack: the check's job
    team = load([(folder, "team")])
    assert team.records == () and "does not compile" in team.problems[0]
