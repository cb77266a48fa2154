"""Issue 14, unit by unit: bounded parsing, the regular-file check, outputs that would replace an input,
whole-line signature matching, the scan cap, and the fast paths for huge scripts.

The same defects are exercised end to end through the CLI in ``test_hostile_cli.py``; these
tests pin each mechanism where it lives.
"""

from __future__ import annotations

import difflib
import json
import os
import threading
from pathlib import Path

import pytest
from conftest import ANYWHERE

from rlmedic.bounded import MAX_DEPTH, MAX_YAML_ALIASES, MAX_YAML_NODES, check_yaml, json_depth, load_json
from rlmedic.confine import Confinement, write_new_text
from rlmedic.errors import UserError

HOSTILE = Path(__file__).resolve().parent / "fixtures" / "hostile"


def _returns_within(fn, seconds: float = 10.0):
    """Run ``fn`` in a daemon thread: (finished, result or exception). A hang leaves finished False."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["value"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), box.get("value")


# --------------------------------------------------------------------------- bounded JSON


def test_json_depth_counts_brackets_outside_strings() -> None:
    assert json_depth('{"a": [1, {"b": "[[[[["}]}') == 3
    assert json_depth("[" * 500) > MAX_DEPTH


def test_load_json_refuses_deep_nesting_and_long_numbers() -> None:
    with pytest.raises(UserError, match="deeper than"):
        load_json("[" * 100_000 + "]" * 100_000, "deep.json")
    with pytest.raises(UserError, match="longer than"):
        load_json('{"n": ' + "9" * 5000 + "}", "n.json")
    with pytest.raises(UserError, match="longer than"):
        load_json('{"n": 1.' + "5" * 500 + "}", "n.json")
    assert load_json('{"n": 12345678901234567890, "x": [[1]]}', "ok.json") == {"n": 12345678901234567890, "x": [[1]]}


# --------------------------------------------------------------------------- bounded YAML


def test_yaml_bombs_are_refused_before_expanding() -> None:
    for name in ("billion_laughs.yaml", "merge_bomb.yaml"):
        with pytest.raises(UserError, match=f"more than {MAX_YAML_NODES} nodes"):
            check_yaml((HOSTILE / name).read_text(), name)


def test_yaml_alias_count_and_depth_limits() -> None:
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_YAML_ALIASES + 1)) + "]\n"
    with pytest.raises(UserError, match="aliases"):
        check_yaml(many, "many.yaml")
    with pytest.raises(UserError, match="deeper than"):
        check_yaml((HOSTILE / "deep_block.yaml").read_text(), "deep.yaml")
    check_yaml("a: &a {x: 1}\nb: *a\nc: {<<: *a, y: 2}\n", "fine.yaml")  # ordinary anchors pass


def test_areal_loader_turns_bad_tags_and_long_ints_into_user_errors() -> None:
    from rlmedic.tools.config.areal import parse_areal_config

    for text in ("actor:\n  lr: !!float x\n", "a: !!bool maybe\n", "a: !!timestamp 2020-99-99\n",
                 (HOSTILE / "long_int.yaml").read_text()):
        with pytest.raises(UserError):
            parse_areal_config(text, "bad.yaml")


def test_walkers_visit_an_aliased_node_once() -> None:
    from rlmedic.tools.config.areal import _plain, check_schema, parse_areal_config

    text = "shared: &s {lr: 1, bogus_key: 2}\nactor: {optimizer: *s}\ncritic: {optimizer: *s}\nref: {optimizer: *s}\n"
    config = parse_areal_config(text, "alias.yaml")
    keys = list(config.dotted_keys())
    assert keys.count("shared.bogus_key") == 1 and "actor.optimizer.bogus_key" not in keys  # not walked again
    problems = [p for p in check_schema(config) if "bogus_key" in p.key]
    assert len(problems) == 1  # the shared mapping is checked once, not once per alias
    plain = _plain(config.data)
    assert plain["actor"]["optimizer"] is plain["critic"]["optimizer"]  # converted once, shared


def test_a_key_with_a_dot_is_an_edit_by_hand_not_a_keyerror() -> None:
    from rlmedic.tools.config.fix import lint_config
    from rlmedic.tools.config.areal import parse_areal_config

    config = parse_areal_config("\"actor.lr\": 1\n", "dot.yaml")
    with pytest.raises(UserError, match="by hand"):
        config.rename("actor.lr", "x")
    result = lint_config(HOSTILE / "dotted_key.yaml", confinement=ANYWHERE)
    assert result.problems  # the dotted keys are reported, not crashed on


# --------------------------------------------------------------------------- regular files only


def test_confinement_refuses_fifos_and_devices_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    conf = Confinement.for_paths([tmp_path, "/dev/zero", "/dev/null"])
    for path, what in ((fifo, "FIFO"), (Path("/dev/zero"), "character device"), (Path("/dev/null"), "character device")):
        for read in (conf.read_bytes, conf.open_binary, conf.regular_file):
            finished, value = _returns_within(lambda read=read, path=path: read(path))
            assert finished, f"{read.__name__}({path}) blocked"
            assert isinstance(value, UserError) and what in str(value), value


def test_read_whole_refuses_a_file_larger_than_the_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("a: 1\n" * 100)
    conf = Confinement.for_paths([big])
    assert len(conf.read_bytes(big, 10)) == 10  # a capped read still returns the head
    with pytest.raises(UserError, match="larger than 10 bytes"):
        conf.read_bytes(big, 10, whole=True)


# --------------------------------------------------------------------------- outputs never replace an input


def test_write_new_text_refuses_every_file_read_through_the_confinement(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("the log\n")
    link = tmp_path / "hard.log"
    os.link(log, link)
    conf = Confinement.for_paths([tmp_path])
    conf.read_bytes(log)
    for target in (log, link, tmp_path / "sub" / ".." / "train.log"):
        with pytest.raises(UserError, match="never overwrites"):
            write_new_text(target, "new", force=True, inputs=conf)
    assert log.read_text() == "the log\n"
    write_new_text(tmp_path / "fresh.txt", "ok", inputs=conf)
    assert (tmp_path / "fresh.txt").read_text() == "ok"


def test_write_new_text_refuses_a_fifo_target_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    finished, value = _returns_within(lambda: write_new_text(fifo, "x", force=True))
    assert finished and isinstance(value, UserError) and "FIFO" in str(value)


def test_fix_config_output_refuses_the_log_and_snapshot_it_read(tmp_path: Path) -> None:
    from rlmedic.ui.cli import app
    from typer.testing import CliRunner

    config = tmp_path / "c.yaml"
    config.write_text((Path(__file__).parent / "fixtures" / "configs" / "areal" / "base.yaml").read_text())
    log = tmp_path / "train.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    snap = tmp_path / "s.json"
    snap.write_text((Path(__file__).parent / "fixtures" / "gpu" / "a40_idle.json").read_text())
    before = {p: p.read_bytes() for p in (config, log, snap)}
    runner = CliRunner()
    for extra, out in ((["--log", str(log)], log), (["--snapshot", str(snap)], snap)):
        result = runner.invoke(app, ["fix-config", str(config), *extra, "-o", str(out), "--force"])
        assert result.exit_code == 2 and "never overwrites" in result.stderr, result.output
    assert {p: p.read_bytes() for p in before} == before


# --------------------------------------------------------------------------- the log scan


def test_signature_after_column_2000_is_found_and_shown() -> None:
    from rlmedic.tools.logs.diagnose import diagnose_text

    line = "x" * 5000 + " torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. " + "y" * 5000
    diagnosis = diagnose_text("step 1\n" + line + "\n")
    root = diagnosis.root_finding
    assert root is not None and "memory" in root.summary.lower()
    shown = json.dumps(diagnosis.to_dict())
    assert "line cut" in shown and "CUDA out of memory" in shown  # the excerpt is cut around the match


@pytest.mark.parametrize("value", ["lots", "0", "-5", "1.5G", ""])
def test_scan_cap_values(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from rlmedic.tools.logs.scan import DEFAULT_MAX_SCAN_BYTES, max_scan_bytes

    monkeypatch.setenv("RLMEDIC_MAX_SCAN_BYTES", value)
    if value == "":
        assert max_scan_bytes() == DEFAULT_MAX_SCAN_BYTES
    else:
        with pytest.raises(UserError, match="RLMEDIC_MAX_SCAN_BYTES"):
            max_scan_bytes()


def test_scan_cap_with_suffix_and_truncation_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rlmedic.tools.logs.diagnose import diagnose
    from rlmedic.tools.logs.excerpt import build_excerpt
    from rlmedic.tools.logs.scan import max_scan_bytes

    monkeypatch.setenv("RLMEDIC_MAX_SCAN_BYTES", "2K")
    assert max_scan_bytes() == 2048
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 0.5\n" * 1000)
    assert diagnose([log], confinement=ANYWHERE).to_dict()["stats"]["truncated"] is True
    assert "byte cap" in build_excerpt([log], confinement=ANYWHERE)
    monkeypatch.setenv("RLMEDIC_MAX_SCAN_BYTES", str(log.stat().st_size))  # exactly the file: nothing was cut
    assert not diagnose([log], confinement=ANYWHERE).to_dict()["stats"]["truncated"]


# --------------------------------------------------------------------------- knowledge index inputs


def test_a_fifo_inside_a_log_folder_is_named_as_skipped(tmp_path: Path) -> None:
    from rlmedic.tools.logs.diagnose import diagnose

    (tmp_path / "rank0.log").write_text("step 1 loss 0.5\n")
    os.mkfifo(tmp_path / "rank1.log")
    finished, value = _returns_within(lambda: diagnose([tmp_path], confinement=ANYWHERE).to_dict())
    assert finished and isinstance(value, dict), value
    assert {"file": str(tmp_path / "rank1.log"), "reason": "not a regular file"} in value["stats"]["skipped"]


def test_index_refuses_non_regular_and_empty_inputs(tmp_path: Path) -> None:
    from rlmedic.knowledge.ingest import index_paths
    from rlmedic.knowledge.store import Store

    store = Store(tmp_path / "index")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    empty = tmp_path / "empty"
    empty.mkdir()
    for path, match in ((fifo, "FIFO"), (Path("/dev/zero"), "character device"), (empty, "nothing to index"),
                        (tmp_path / ("n" * 300), "too long")):
        finished, value = _returns_within(lambda path=path: index_paths([path], store))
        assert finished and isinstance(value, UserError) and match in str(value), value


def test_index_dir_must_be_a_directory(tmp_path: Path) -> None:
    from rlmedic.knowledge.store import Store

    plain = tmp_path / "file"
    plain.write_text("x")
    for where in (plain, plain / "index", Path("/dev/null/index")):
        with pytest.raises(UserError, match="not a directory"):
            Store(where)


def test_empty_path_argument_is_refused() -> None:
    from rlmedic.ui.params import path

    with pytest.raises(UserError, match="empty path"):
        path("")
    assert path("a/b") == Path("a/b")


# --------------------------------------------------------------------------- GPU snapshot numbers


@pytest.mark.parametrize("name,match", [("huge_int_snapshot.json", "finite number"), ("huge_time_snapshot.json", "Unix time"),
                                        ("digits_snapshot.json", "longer than"), ("deep_snapshot.json", "deeper than")])
def test_snapshot_numbers_and_depth_are_bounded(name: str, match: str) -> None:
    from rlmedic.tools.gpu.snapshot import load_snapshot

    with pytest.raises(UserError, match=match):
        load_snapshot(HOSTILE / name, confinement=ANYWHERE)


def test_checkpoint_metadata_too_deep_is_a_reported_issue(tmp_path: Path) -> None:
    from rlmedic.tools.checkpoints.listing import list_checkpoints

    ckpt = tmp_path / "checkpoints" / "u" / "e" / "t" / "default" / "epoch0epochstep9globalstep9"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"x" * 16)
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors.index.json").write_text("[" * 50_000 + "]" * 50_000)
    report = list_checkpoints(tmp_path, confinement=ANYWHERE)
    issues = [i for c in report.checkpoints for i in c.issues]
    assert any("deeper than" in i for i in issues), issues


# --------------------------------------------------------------------------- huge scripts


def test_unified_diff_matches_difflib_and_shifts_hunks() -> None:
    from rlmedic.tools.config.editable import unified_diff

    old = "".join(f"line {i}\n" for i in range(200))
    new = old.replace("line 120\n", "line 120 changed\n").replace("line 5\n", "")
    expected = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), "a", "b"))
    assert unified_diff(old, new, "a", "b") == expected
    assert unified_diff(old, old, "a", "b") == ""


def test_slime_tokenizer_fast_paths_keep_positions() -> None:
    from rlmedic.tools.config.slime import tokenize

    text = "python3 train.py \\\n   --tp   2 \\\n\\\n  --name 'a b'\n"
    [stmt] = tokenize(text)
    assert [(t.value, t.line, t.col) for t in stmt] == [
        ("python3", 0, 0), ("train.py", 0, 8), ("--tp", 1, 3), ("2", 1, 10), ("--name", 3, 2), ("a b", 3, 9)]


def test_a_million_line_continuations_parse_in_linear_time() -> None:
    import time

    from rlmedic.tools.config.slime import parse_slime_launch

    def cost(lines: int) -> float:
        text = "python3 train.py \\\n  --lr 1e-6 " + "\\\n" * lines + " --tp 2\n"
        started = time.process_time()
        launch = parse_slime_launch(text, "run.sh")
        assert launch.get("--tp") == "2" and launch.get("--lr") == "1e-6"
        return time.process_time() - started

    small, large = cost(50_000), cost(1_000_000)
    assert large < 40 * max(small, 0.01)  # 20x the input: linear, with room for noise; quadratic would be ~400x
