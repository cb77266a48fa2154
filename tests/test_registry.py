"""The tool registry: every tool described and schema'd once, confined, and redacted for every consumer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from rlmedic.redact import redact_value
from rlmedic.tools.registry import REGISTRY, Registry, ToolContext, bounded
from rlmedic.ui.cli import app

LOGS = FIXTURES / "logs"
AREAL = FIXTURES / "configs" / "areal"
GPU = FIXTURES / "gpu"

#: One planted secret per kind; none may reach any consumer.
SECRETS = {
    "wandb": "0123456789abcdef0123456789abcdef01234567",
    "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "openai": "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx",
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "url_password": "s3cr3tPassw0rd",
}

FILE_TOOLS = {
    "diagnose": lambda p: {"paths": [p]},
    "excerpt": lambda p: {"paths": [p]},
    "gpu_status": lambda p: {"snapshot": p},
    "list_checkpoints": lambda p: {"root": p},
    "lint_config": lambda p: {"config": p},
    "fix_config": lambda p: {"config": p},
}


def test_every_tool_has_a_description_and_a_schema_without_the_context() -> None:
    tools = REGISTRY.tools()
    assert {t.name for t in tools} >= set(FILE_TOOLS) | {"search_docs"}
    for t in tools:
        assert len(t.summary) > 20, t.name
        schema = t.schema
        assert schema["type"] == "object" and "ctx" not in schema.get("properties", {}), t.name
        assert schema.get("additionalProperties") is False, t.name
        for name, prop in schema.get("properties", {}).items():
            assert prop.get("description"), f"{t.name}.{name} has no description"
        json.dumps(schema)


def test_every_built_in_tool_says_what_it_is_for_and_the_prompt_lists_them_all() -> None:
    """The system prompt's list of tools is the registry's: each built-in tool says what a model calls it
    for (``use``), and a tool registered without one is listed with its summary."""
    from rlmedic.agent.prompts import system_prompt

    lines = REGISTRY.guide()
    prompt = system_prompt(tuple(lines))
    for t in REGISTRY.tools():
        assert t.use and t.use[0].islower(), t.name
        assert f"  - `{t.name}` {t.use}\n" in prompt, t.name

    reg = Registry()

    def probe(ctx: ToolContext, path: str) -> str:
        """Report the probe's reading.

        More text here."""
        return path

    reg.register(probe)
    assert reg.guide() == ["`probe` (Report the probe's reading)"]


def test_registering_needs_a_context_first_a_docstring_and_types() -> None:
    reg = Registry()

    def no_ctx(path: str) -> str:
        """Doc."""
        return path

    def no_doc(ctx, path: str) -> str:  # noqa: ANN001
        return path

    def untyped(ctx, path):  # noqa: ANN001, ANN201
        """Doc."""

    for fn, message in ((no_ctx, "first parameter"), (no_doc, "docstring"), (untyped, "needs a type")):
        with pytest.raises(ValueError, match=message):
            reg.register(fn)


def test_bad_calls_come_back_as_readable_errors(tmp_path: Path) -> None:
    ctx = ToolContext.for_roots([tmp_path])
    unknown = REGISTRY.call("read_file", {"path": "/etc/passwd"}, ctx)
    assert not unknown.ok and "unknown tool 'read_file'" in unknown.error and "diagnose" in unknown.error
    wrong_type = REGISTRY.call("diagnose", {"paths": "x.log"}, ctx)
    assert not wrong_type.ok and "paths" in wrong_type.error
    extra = REGISTRY.call("diagnose", {"paths": ["x.log"], "confinement": "/"}, ctx)
    assert not extra.ok and "confinement" in extra.error
    missing = REGISTRY.call("lint_config", {}, ctx)
    assert not missing.ok and "config" in missing.error


def test_a_tool_that_raises_is_an_error_result_or_a_traceback_for_the_cli(tmp_path: Path) -> None:
    reg = Registry()

    def broken(ctx: ToolContext, n: int) -> int:
        """Always fails (a bug)."""
        raise ZeroDivisionError("boom")

    reg.register(broken)
    result = reg.call("broken", {"n": 1}, ToolContext.for_roots([tmp_path]))
    assert not result.ok and "ZeroDivisionError: boom" in result.error
    with pytest.raises(ZeroDivisionError):
        reg.call("broken", {"n": 1}, ToolContext.for_roots([tmp_path]), catch_bugs=False)


def test_the_deadline_stops_a_call(tmp_path: Path) -> None:
    ctx = ToolContext.for_roots([LOGS], deadline_s=-1)
    result = REGISTRY.call("diagnose", {"paths": [str(LOGS / "multirank")]}, ctx)
    assert not result.ok and "ran out of time" in result.error


def test_model_text_is_bounded_after_redaction() -> None:
    text = "key " + SECRETS["hf"] + " " + "x" * 100
    cut = bounded(text, 40)
    assert len(cut) <= 40 + 60 and "more characters not shown" in cut
    # redaction happens before the cut: no prefix of a key survives either
    from rlmedic.confine import redact

    assert SECRETS["hf"][:12] not in bounded(redact(text), 30)


def test_result_objects_are_redacted_through_models_and_containers() -> None:
    from rlmedic.types import Citation, Finding, Fix

    f = Finding(id="x", category="other", severity="error", summary=f"token {SECRETS['hf']}",
                evidence={"line": f"WANDB_API_KEY={SECRETS['wandb']}"},
                fixes=[Fix(action=f"export HF_TOKEN={SECRETS['hf']}")],
                citations=[Citation(kind="log", ref="a.log", lines=(1, 1))])
    clean = redact_value(f)
    dumped = json.dumps(clean.to_dict(), default=str)
    assert all(s not in dumped for s in SECRETS.values())
    assert SECRETS["hf"] in f.summary  # the original object is left alone


# ---------------------------------------------------------------------- confinement


def _escape_paths(tmp_path: Path, allowed: Path) -> dict[str, str]:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.log"
    secret.write_text("torch.OutOfMemoryError: CUDA out of memory. SECRET-OUTSIDE\n")
    link = allowed / "link.log"
    link.symlink_to(secret)
    return {
        "dotdot": str(allowed / ".." / "outside" / "secret.log"),
        "absolute": str(secret),
        "etc": "/etc/passwd",
        "symlink": str(link),
    }


@pytest.mark.parametrize("tool_name", sorted(FILE_TOOLS))
def test_no_file_tool_reads_outside_the_roots(tmp_path: Path, tool_name: str) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    ctx = ToolContext.for_roots([allowed], env_roots=False)
    for how, path in _escape_paths(tmp_path, allowed).items():
        result = REGISTRY.call(tool_name, FILE_TOOLS[tool_name](path), ctx)
        assert not result.ok, (tool_name, how)
        assert "outside the allowed roots" in result.error, (tool_name, how, result.error)
        assert "SECRET-OUTSIDE" not in result.error


def test_fix_config_logs_outside_the_roots_are_refused(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "c.yaml").write_text((AREAL / "mb_tokens.yaml").read_text())
    ctx = ToolContext.for_roots([allowed], env_roots=False)
    result = REGISTRY.call("fix_config", {"config": str(allowed / "c.yaml"), "logs": ["/etc/passwd"]}, ctx)
    assert not result.ok and "outside the allowed roots" in result.error


def test_the_env_allowlist_is_not_used_when_the_front_door_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RLMEDIC_ALLOWED_ROOTS", str(LOGS))
    ctx = ToolContext.for_roots([tmp_path], env_roots=False)
    assert not REGISTRY.call("diagnose", {"paths": [str(LOGS / "multirank")]}, ctx).ok
    assert REGISTRY.call("diagnose", {"paths": [str(LOGS / "multirank")]}, ToolContext.for_roots([tmp_path])).ok


_FIFO_SCRIPT = """
import json, sys
from rlmedic.tools.registry import REGISTRY, ToolContext
tool, args, root = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
r = REGISTRY.call(tool, args, ToolContext.for_roots([root], env_roots=False))
print(json.dumps({"ok": r.ok, "error": r.error}))
"""


@pytest.mark.parametrize("tool_name", sorted(FILE_TOOLS))
def test_a_fifo_is_refused_without_hanging(tmp_path: Path, tool_name: str) -> None:
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-c", _FIFO_SCRIPT, tool_name, json.dumps(FILE_TOOLS[tool_name](str(fifo))),
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not outcome["ok"], (tool_name, outcome)
    assert "regular file" in outcome["error"] or "pipe" in outcome["error"] or "not a log" in outcome["error"], outcome


# ---------------------------------------------------------------------- redaction for every consumer


@pytest.fixture()
def planted(tmp_path: Path) -> dict[str, Path]:
    """A log, a config, a GPU snapshot and a checkpoint folder, each holding every secret kind."""
    lines = [
        f"wandb: WANDB_API_KEY={SECRETS['wandb']}",
        f"export HF_TOKEN={SECRETS['hf']}",
        f"client = OpenAI(api_key='{SECRETS['openai']}')",
        f"git clone https://{SECRETS['github']}@github.com/org/repo",
        f"fileroot: s3://trainer:{SECRETS['url_password']}@bucket/run",
    ]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                   f"HF_TOKEN={SECRETS['hf']}\n")
    config = tmp_path / "c.yaml"
    config.write_text((AREAL / "mb_tokens.yaml").read_text() + f"\nwandb_api_key: {SECRETS['wandb']}\n"
                      f"hf_token: {SECRETS['hf']}\nopenai_api_key: {SECRETS['openai']}\n"
                      f"github_token: {SECRETS['github']}\n")
    snap = json.loads((GPU / "a40_leftovers.json").read_text())
    for gpu in snap.get("gpus", []):
        for proc in gpu.get("processes", []):
            proc["cmdline"] = (f"env WANDB_API_KEY={SECRETS['wandb']} python train.py --hf-token {SECRETS['hf']} "
                               f"--api-key {SECRETS['openai']}")
    snapshot = tmp_path / "gpu.json"
    snapshot.write_text(json.dumps(snap))
    ckpts = tmp_path / "save"
    (ckpts / "iter_0000010").mkdir(parents=True)
    (ckpts / "latest_checkpointed_iteration.txt").write_text(f"HF_TOKEN={SECRETS['hf']} {SECRETS['github']}\n")
    return {"log": log, "config": config, "snapshot": snapshot, "checkpoints": ckpts}


def _assert_clean(where: str, text: str) -> None:
    for kind, secret in SECRETS.items():
        assert secret not in text, f"{kind} secret leaked through {where}"


def test_no_secret_reaches_the_model_text_or_the_json(planted: dict[str, Path], tmp_path: Path) -> None:
    ctx = ToolContext.for_roots([tmp_path], env_roots=False)
    calls = [
        ("diagnose", {"paths": [str(planted["log"])]}),
        ("excerpt", {"paths": [str(planted["log"])]}),
        ("gpu_status", {"snapshot": str(planted["snapshot"])}),
        ("list_checkpoints", {"root": str(planted["checkpoints"])}),
        ("lint_config", {"config": str(planted["config"])}),
        ("fix_config", {"config": str(planted["config"]), "logs": [str(planted["log"])]}),
    ]
    for name, args in calls:
        result = REGISTRY.call(name, args, ctx)
        assert result.ok, (name, result.error)
        _assert_clean(f"{name} text", result.text)
        _assert_clean(f"{name} json", json.dumps(result.data, default=str))
        _assert_clean(f"{name} value", repr(result.value))


def test_no_secret_reaches_the_cli(planted: dict[str, Path]) -> None:
    runner = CliRunner()
    commands = [
        ["diagnose", planted["log"]], ["diagnose", planted["log"], "--json"], ["excerpt", planted["log"]],
        ["gpu", "--snapshot", planted["snapshot"]], ["gpu", "--snapshot", planted["snapshot"], "--json"],
        ["checkpoints", planted["checkpoints"]], ["checkpoints", planted["checkpoints"], "--json"],
        ["lint-config", planted["config"]], ["lint-config", planted["config"], "--json"],
        ["fix-config", planted["config"], "--log", planted["log"]],
        ["fix-config", planted["config"], "--log", planted["log"], "--json"],
    ]
    for args in commands:
        result = runner.invoke(app, [str(a) for a in args])
        assert result.exit_code in (0, 1), (args, result.output)
        _assert_clean(" ".join(map(str, args[:1])) + " CLI", result.output)


#: Arguments that name files or folders to read (a NUL byte in any must be bad input).
_PATH_ARGS = {"paths": lambda p: [p], "snapshot": str, "root": str, "config": str, "logs": lambda p: [p]}


def test_a_path_with_a_nul_byte_is_bad_input_for_every_tool(tmp_path: Path) -> None:
    """Not `internal error ...: ValueError` (what os.stat says about an embedded NUL)."""
    from rlmedic.tools.registry import REGISTRY, ToolContext

    ctx = ToolContext.for_roots([str(tmp_path)], env_roots=False)
    (tmp_path / "ok.yaml").write_text("actor:\n  lr: 1\n")
    checked = 0
    for tool in REGISTRY.tools():
        props = tool.schema["properties"]
        for name in [n for n in props if n in _PATH_ARGS]:
            args = {n: _PATH_ARGS[n](str(tmp_path / "ok.yaml")) for n in props if n in ("config",) and n != name}
            if "root" in props and name != "root":
                args["root"] = str(tmp_path)
            args[name] = _PATH_ARGS[name](str(tmp_path / "a\x00b.log"))
            result = REGISTRY.call(tool.name, args, ctx)
            assert not result.ok, (tool.name, name)
            assert "NUL byte" in result.error and "internal error" not in result.error, (tool.name, name, result.error)
            checked += 1
    assert checked >= 7
