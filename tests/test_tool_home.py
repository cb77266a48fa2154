"""One home per tool: what a tool declares at registration is what every front door uses.

``reads`` (the attachment kinds it takes) decides the calls the agent makes of attached
files; ``step`` is the one line web, Slack and chat show; ``evidence`` is its result in the
shared vocabulary. These tests hold the registry to those rules with tools of their own,
and the built-in tools to the calls and lines they had before the rules moved into them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import pytest
from conftest import FIXTURES
from pydantic import Field

from rlmedic.agent.investigate import classify, plan_calls
from rlmedic.tools.registry import ATTACHMENT_KINDS, REGISTRY, Registry, ToolContext
from rlmedic.ui.render import step_result


def _toy_registry() -> Registry:
    """Tools of this test: one list tool, one per-file tool with context, one that needs two files."""
    reg = Registry()

    def scan(ctx, paths: list[str]) -> int:  # noqa: ANN001
        """Scan every log at once."""
        return len(paths)

    def check(ctx, config: str, logs: list[str] = [], snapshot: str | None = None) -> str:  # noqa: ANN001, B006
        """Check one config, with the logs and the one GPU snapshot as context."""
        return config

    def pair(ctx, configs: Annotated[list[str], Field(min_length=2, max_length=2)]) -> int:  # noqa: ANN001
        """Compare exactly two configs."""
        return 2

    def env(ctx, path: str) -> str:  # noqa: ANN001
        """Read one environment listing."""
        return path

    def unrelated(ctx, query: str) -> str:  # noqa: ANN001
        """Reads no attachment."""
        return query

    reg.register(unrelated)
    reg.register(check, reads={"config": ("config", "script"), "logs": "log", "snapshot": "snapshot"},
                 step=lambda data: f"checked {data}")
    reg.register(scan, reads={"paths": "log"})
    reg.register(pair, reads={"configs": ("config", "script")})
    reg.register(env, reads={"path": "env"})
    return reg


def test_a_list_parameter_takes_every_file_in_one_call_a_single_one_makes_a_call_per_file() -> None:
    reg = _toy_registry()
    calls = reg.plan([("log", "a.log"), ("config", "x.yaml"), ("log", "b.log"), ("script", "run.sh")])
    assert calls == [
        ("scan", {"paths": ["a.log", "b.log"]}),
        ("check", {"config": "x.yaml", "logs": ["a.log", "b.log"]}),
        ("check", {"config": "run.sh", "logs": ["a.log", "b.log"]}),
    ]  # pair needs two files of one kind: a YAML and a script are not paired, one alone would be refused
    assert ("pair", {"configs": ["a.sh", "b.sh"]}) in reg.plan([("script", "a.sh"), ("config", "x.yaml"), ("script", "b.sh")])


def test_context_a_list_gets_all_even_none_a_single_value_only_when_there_is_exactly_one() -> None:
    reg = _toy_registry()
    assert reg.plan([("config", "x.yaml"), ("snapshot", "g.json")]) == [
        ("check", {"config": "x.yaml", "logs": [], "snapshot": "g.json"})]
    two_snapshots = reg.plan([("config", "x.yaml"), ("snapshot", "g1.json"), ("snapshot", "g2.json")])
    assert two_snapshots == [("check", {"config": "x.yaml", "logs": []})]  # which GPU? a guess: none


def test_calls_run_in_the_order_of_the_kinds_then_of_registration_and_validate() -> None:
    reg = _toy_registry()
    calls = reg.plan([("config", "b.yaml"), ("config", "a.yaml"), ("log", "t.log"), ("env", "freeze.txt"),
                      ("checkpoints", "ckpt/")])
    assert [name for name, _ in calls] == ["env", "scan", "check", "check", "pair"]
    assert calls[-1] == ("pair", {"configs": ["b.yaml", "a.yaml"]})  # in the order attached
    assert reg.plan([("config", c) for c in ("1.yaml", "2.yaml", "3.yaml")])[-3:] == [
        ("check", {"config": "1.yaml", "logs": []}), ("check", {"config": "2.yaml", "logs": []}),
        ("check", {"config": "3.yaml", "logs": []})]  # three configs: pair (two at most) is not planned
    assert [t.name for t in reg.tools()] == ["env", "scan", "check", "pair", "unrelated"]


def test_registration_refuses_an_unknown_kind_or_parameter_and_the_step_line_defaults_to_done() -> None:
    reg = Registry()

    def one(ctx, path: str) -> str:  # noqa: ANN001
        """Doc."""
        return path

    with pytest.raises(ValueError, match="unknown attachment kinds.*'yaml'"):
        reg.register(one, reads={"path": "yaml"})
    with pytest.raises(ValueError, match="reads names no parameter 'paths'"):
        reg.register(one, name="two", reads={"paths": "log"})
    entry = reg.register(one, name="three")
    assert entry.step_line({"x": 1}) == "done" and entry.reads == {}
    toy = _toy_registry().get("check")
    assert toy is not None and toy.step_line("c.yaml") == "checked c.yaml" and toy.step_line(None) == "done"


def test_every_kind_classify_returns_is_one_the_tools_can_read(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("2024-01-01 12:00:00 INFO step 1 loss=0.52\n")
    (tmp_path / "c.yaml").write_text("a: 1\n")
    (tmp_path / "run.sh").write_text("python train.py --lr 1\n")
    (tmp_path / "gpus.json").write_text('{"gpus": []}')
    (tmp_path / "freeze.txt").write_text("torch==2.4.0\nsglang==0.4.6\ntransformers==4.51.0\n")
    (tmp_path / "ckpt" / "global_step_10").mkdir(parents=True)
    kinds = {p.name: classify(p, b"" if p.is_dir() else p.read_bytes()) for p in tmp_path.iterdir()}
    assert kinds == {"train.log": "log", "c.yaml": "config", "run.sh": "script", "gpus.json": "snapshot",
                     "freeze.txt": "env", "ckpt": "checkpoints"}
    assert set(kinds.values()) == set(ATTACHMENT_KINDS)
    read = {k for t in REGISTRY.tools() for kinds_ in t.reads.values() for k in kinds_}
    assert read == set(ATTACHMENT_KINDS)  # each kind has a tool that reads it


def test_the_built_in_plan_is_the_one_plan_calls_wrote_by_hand(tmp_path: Path) -> None:
    """The choices plan_calls made before the tools declared them: read_env per listing, diagnose on
    all logs, gpu_status per snapshot, fix_config per config or script with the logs and the snapshot,
    list_checkpoints per folder with the one YAML config (never a launch script)."""
    shutil.copy(FIXTURES / "logs" / "signatures" / "cuda-oom.log", tmp_path / "train.log")
    shutil.copy(FIXTURES / "configs" / "areal" / "base.yaml", tmp_path / "config.yaml")
    shutil.copy(FIXTURES / "configs" / "slime" / "base.sh", tmp_path / "run.sh")
    shutil.copy(FIXTURES / "gpu" / "h100x8_running.json", tmp_path / "gpus.json")
    (tmp_path / "freeze.txt").write_text("torch==2.4.0\nsglang==0.4.6\ntransformers==4.51.0\n")
    (tmp_path / "ckpts" / "global_step_10").mkdir(parents=True)
    names = ("ckpts", "run.sh", "train.log", "config.yaml", "freeze.txt", "gpus.json")
    s = {n: str(tmp_path / n) for n in names}
    calls = plan_calls([tmp_path / n for n in names], lambda p: p.read_bytes()[:4096])
    assert calls == [  # a script and a YAML config are not compared (compare_configs takes two of one kind)
        ("read_env", {"path": s["freeze.txt"]}),
        ("diagnose", {"paths": [s["train.log"]]}),
        ("gpu_status", {"snapshot": s["gpus.json"]}),
        ("fix_config", {"config": s["run.sh"], "logs": [s["train.log"]], "snapshot": s["gpus.json"]}),
        ("fix_config", {"config": s["config.yaml"], "logs": [s["train.log"]], "snapshot": s["gpus.json"]}),
        ("list_checkpoints", {"root": s["ckpts"], "config": s["config.yaml"]}),
    ]


def _run(name: str, **args: object) -> object:
    paths = [v for v in args.values() for v in (v if isinstance(v, list) else [v]) if isinstance(v, str)]
    result = REGISTRY.call(name, dict(args), ToolContext.for_roots(paths))
    assert result.ok, result.error
    return result


def test_each_built_in_tool_gives_its_own_step_line(tmp_path: Path) -> None:
    log = str(FIXTURES / "logs" / "signatures" / "cuda-oom.log")
    config = str(FIXTURES / "configs" / "areal" / "base.yaml")
    diagnosis = _run("diagnose", paths=[log])
    root = diagnosis.data["findings"][diagnosis.data["root"]]
    assert step_result("diagnose", True, diagnosis.data, "") == (
        f"root cause {root['id']} ({root['category']}) cuda-oom.log:{root['line']}")
    fixed = _run("fix_config", config=config, logs=[log])
    assert step_result("fix_config", True, fixed.data, "") == (
        f"{len(fixed.data['changes'])} change(s), {len(fixed.data['problems'])} problem(s)")
    assert fixed.data["changes"]
    linted = _run("lint_config", config=config)
    assert step_result("lint_config", True, linted.data, "") == f"{len(linted.data['problems'])} problem(s)"
    gpus = _run("gpu_status", snapshot=str(FIXTURES / "gpu" / "h100x8_running.json"))
    assert step_result("gpu_status", True, gpus.data, "") == f"8 GPU(s), {len(gpus.data['advice'])} advice"
    (tmp_path / "global_step_10").mkdir()
    ckpts = _run("list_checkpoints", root=str(tmp_path))
    assert step_result("list_checkpoints", True, ckpts.data, "") == (
        f"{len(ckpts.data['checkpoints'])} checkpoint(s), layout {ckpts.data['layout']}")
    (tmp_path / "freeze.txt").write_text("torch==2.4.0\nsglang==0.4.6\n")
    env = _run("read_env", path=str(tmp_path / "freeze.txt"))
    assert step_result("read_env", True, env.data, "") == f"2 package version(s) ({env.data['kind']})"
    assert step_result("search_docs", True, [{"text": "a"}, {"text": "b"}], "") == "2 result(s)"
    assert step_result("excerpt", True, "some lines", "") == "done"
    assert step_result("no_such_tool", True, {"x": 1}, "") == "done"
    assert step_result("diagnose", False, None, "no such file") == "error: no such file"


def test_every_built_in_tool_that_reads_attachments_has_evidence_and_a_step() -> None:
    for t in REGISTRY.tools():
        if t.reads:
            assert t.evidence is not None and t.step is not None, t.name
