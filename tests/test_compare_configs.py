"""``compare_configs``, the tool added as one file (tools/toolset/compare.py), and every front door showing it.

The tool: the settings in effect that differ between two configs (defaults applied). The
front doors, none of which names the tool anywhere in its code: the CLI (``rlmedic tools``),
the agent (the tool list a model server receives, and the offline plan on attached files),
MCP (``list_tools`` and ``call_tool`` over stdio), the web app and Slack (the step line).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO
from typer.testing import CliRunner

from rlmedic.tools.registry import REGISTRY, ToolContext
from rlmedic.ui.cli import app

AREAL = FIXTURES / "configs" / "areal"
SLIME = FIXTURES / "configs" / "slime"
GOOD, BAD = AREAL / "base.yaml", AREAL / "colocated_a40.yaml"


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """The run that worked and the one that failed, as a user would name them."""
    shutil.copy(GOOD, tmp_path / "worked.yaml")
    shutil.copy(BAD, tmp_path / "failed.yaml")
    return tmp_path / "worked.yaml", tmp_path / "failed.yaml"


def compare(a: Path, b: Path) -> object:
    return REGISTRY.call("compare_configs", {"configs": [str(a), str(b)]}, ToolContext.for_roots([a, b]))


# ---------------------------------------------------------------------- the tool


def test_it_lists_the_settings_that_differ_in_effect_with_their_lines(pair: tuple[Path, Path]) -> None:
    result = compare(*pair)
    assert result.ok, result.error
    changes = {c["key"]: c for c in result.data["changes"]}
    assert changes["cluster.n_gpus_per_node"] == {"key": "cluster.n_gpus_per_node", "before": 8, "after": 1,
                                                  "before_line": 12, "after_line": 12}
    assert changes["actor.gradient_checkpointing"]["before"] is True and changes["actor.gradient_checkpointing"]["after"] is False
    # written only in the failed run: the worked run's value in effect is AReaL's default
    assert changes["rollout.scheduling_strategy.type"]["before"] == "separation"
    assert changes["rollout.scheduling_strategy.type"]["before_line"] is None
    assert "experiment_name" not in changes and len(changes) == 11  # equal settings are not listed
    assert "- cluster.n_gpus_per_node: 8 -> 1 (worked.yaml:12; failed.yaml:12)" in result.text
    assert "worked.yaml: default" in result.text
    assert result.evidence.subject == "config" and "failed.yaml changes cluster.n_gpus_per_node: 8 -> 1" in result.evidence.facts


def test_a_default_written_out_is_no_change_and_a_dropped_key_shows_the_default(tmp_path: Path) -> None:
    base = GOOD.read_text()
    assert "scheduling_strategy" not in base and "\nrollout:\n" in base  # left to AReaL's default (separation)
    (tmp_path / "a.yaml").write_text(base)
    (tmp_path / "b.yaml").write_text(base.replace("\nrollout:\n", "\nrollout:\n  scheduling_strategy:\n    type: separation\n", 1))
    same = compare(tmp_path / "a.yaml", tmp_path / "b.yaml")
    assert same.ok and same.data["changes"] == [] and same.data["compared"] > 50
    dropped = tmp_path / "c.yaml"
    dropped.write_text(base.replace("  gradient_checkpointing: true\n", "", 1))
    result = compare(tmp_path / "a.yaml", dropped)
    [change] = result.data["changes"]
    assert change["key"] == "actor.gradient_checkpointing" and change["after_line"] is None
    assert change["before"] is True and change["after"] is False  # AReaL's own default


def test_slime_scripts_compare_flags_and_the_entry_point() -> None:
    result = compare(SLIME / "base.sh", SLIME / "async_colocate.sh")
    assert result.ok, result.error
    assert result.data["framework"] == "slime"
    assert [(c["key"], c["before"], c["after"]) for c in result.data["changes"]] == [
        ("entry point", "train.py", "train_async.py")]
    assert result.data["changes"][0]["after_line"] == 57  # the command's line, not the comment naming it


def test_two_frameworks_a_missing_file_and_a_file_outside_the_roots_are_one_line(tmp_path: Path, pair) -> None:
    mixed = compare(GOOD, SLIME / "base.sh")
    assert not mixed.ok and "same framework" in mixed.error
    one = REGISTRY.call("compare_configs", {"configs": [str(GOOD)]}, ToolContext.for_roots([GOOD]))
    assert not one.ok and "at least 2" in one.error
    outside = REGISTRY.call("compare_configs", {"configs": [str(pair[0]), str(GOOD)]},
                            ToolContext.for_roots([pair[0]], env_roots=False))
    assert not outside.ok and "outside the allowed roots" in outside.error


def test_a_secret_in_a_config_never_leaves_the_tool(tmp_path: Path) -> None:
    key = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / "a.yaml").write_text(GOOD.read_text())
    (tmp_path / "b.yaml").write_text(GOOD.read_text().replace("experiment_name:", f"wandb_api_key: {key}\nexperiment_name:", 1))
    result = compare(tmp_path / "a.yaml", tmp_path / "b.yaml")
    assert result.ok and result.data["changes"], result.error
    assert key not in result.text and key not in json.dumps(result.data) and key not in str(result.evidence)


# ---------------------------------------------------------------------- every front door


def test_the_cli_lists_it_and_runs_it(pair: tuple[Path, Path]) -> None:
    runner = CliRunner()
    listing = runner.invoke(app, ["tools"])
    assert listing.exit_code == 0, listing.output
    line = next(line for line in listing.stdout.splitlines() if line.startswith("compare_configs "))
    assert "What differs in effect between two training configs" in line and "config, script" in line
    worked, failed = pair
    ran = runner.invoke(app, ["tools", "compare_configs", f"configs={worked}", f"configs={failed}"])
    assert ran.exit_code == 0, ran.output
    assert "11 of" in ran.stdout and "- actor.gradient_checkpointing: true -> false" in ran.stdout
    as_json = runner.invoke(app, ["tools", "compare_configs", f"configs={worked}", f"configs={failed}", "--json"])
    assert len(json.loads(as_json.stdout)["changes"]) == 11
    refused = runner.invoke(app, ["tools", "compare_configs", f"configs={worked}", "configs=/etc/hostname"])
    assert refused.exit_code == 2 and "error:" in refused.stderr


def test_the_agent_offers_it_to_the_model_and_runs_it_on_two_attached_configs(pair: tuple[Path, Path]) -> None:
    from fake_openai import FakeOpenAI, Reply, tool

    from rlmedic.agent.engine import answer_events
    from rlmedic.agent.events import Final, ToolFinished
    from rlmedic.agent.investigate import plan_calls
    from rlmedic.agent.llm import LLMConfig

    worked, failed = pair
    calls = plan_calls([worked, failed], lambda p: p.read_bytes()[:4096])
    assert ("compare_configs", {"configs": [str(worked), str(failed)]}) in calls  # rlmedic runs it by itself too
    replies = [Reply(calls=[tool("compare_configs", configs=[str(worked), str(failed)])]),
               Reply(content="The failed run turned gradient checkpointing off [failed.yaml].")]
    with FakeOpenAI(replies) as server:
        ctx = ToolContext.for_roots([worked, failed])
        events = list(answer_events("what changed between these runs?", attachments=[worked, failed], ctx=ctx,
                                    config=LLMConfig.resolve(base_url=server.base_url)))
        offered = {t["function"]["name"] for t in server.requests[0]["tools"]}
        system = next(m["content"] for m in server.requests[0]["messages"] if m["role"] == "system")
        sent_back = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert "compare_configs" in offered
    assert "`compare_configs` for two configs, one that worked and one that failed" in system  # its own words
    assert any("setting(s) differ in effect" in m and "gradient_checkpointing" in m for m in sent_back)
    done = [e for e in events if isinstance(e, ToolFinished) and e.name == "compare_configs"]
    assert done and done[0].ok and isinstance(events[-1], Final)


def test_mcp_lists_and_calls_it(pair: tuple[Path, Path]) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    worked, failed = pair

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-m", "rlmedic", "mcp", "--allow", str(worked.parent)],
                                       env={**os.environ})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            assert "`compare_configs` for two configs" in (init.instructions or "")
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert "compare_configs" in listed and listed["compare_configs"].annotations.read_only_hint is True
            assert listed["compare_configs"].input_schema["properties"]["configs"]["minItems"] == 2
            result = await session.call_tool("compare_configs", {"configs": [str(worked), str(failed)]})
            assert not result.is_error and "cluster.n_gpus_per_node: 8 -> 1" in result.content[0].text

    asyncio.run(asyncio.wait_for(main(), timeout=120))


def test_slack_shows_its_step_line(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_slack import FakeSlack
    from test_slack import blocks_text, dispatch, final_updates, make_app

    import rlmedic.ui.slack_app as slack_app

    monkeypatch.setattr(slack_app, "UPDATE_EVERY_S", 0.0)  # every step's line is posted, none skipped by the throttle
    fake = FakeSlack().start()
    try:
        slack_app_, _bot = make_app(fake)
        files = [fake.serve_file("worked.yaml", pair[0].read_bytes()), fake.serve_file("failed.yaml", pair[1].read_bytes())]
        dm = {"type": "message", "user": "U0002", "text": "what changed?", "channel": "D0001",
              "ts": "1700000009.000100", "channel_type": "im", "files": files}
        assert dispatch(slack_app_, dm) == 200
        fake.wait_for(lambda f: final_updates(f))
        progress = "\n".join(c.args["text"] for c in fake.of("chat.update") if "Looking into it" in c.args["text"])
        assert ":white_check_mark: `compare_configs`: 11 setting(s) differ" in progress
        assert blocks_text(final_updates(fake)[-1])
    finally:
        fake.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_web_app_shows_its_step(pair: tuple[Path, Path], tmp_path: Path) -> None:
    from gradio_client import Client, handle_file

    from rlmedic.ui.web import WebSettings, launch

    port = _free_port()
    demo, sessions = launch(WebSettings(offline=True, max_upload_mb=1, uploads_root=tmp_path / "uploads"), port=port,
                            block=False)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        _box, history, *_ = client.predict({"text": "what changed?", "files": [handle_file(str(p)) for p in pair]}, [],
                                           api_name="/chat")
    finally:
        demo.close()
        sessions.close_all()
    steps = [m for m in history if (m.get("metadata") or {}).get("title", "").endswith("compare_configs")]
    assert steps and steps[0]["metadata"]["status"] == "done"
    assert "11 setting(s) differ" in json.dumps(steps[0]["content"])


def test_adding_it_touched_one_file_besides_its_test() -> None:
    """The tool's whole home: no front door, plan or renderer names it."""
    named = [p.relative_to(REPO).as_posix() for folder in ("core", "knowledge", "tools", "agent", "ui")
             for p in (REPO / folder).rglob("*.py") if "compare_configs" in p.read_text(encoding="utf-8")]
    assert named == ["tools/toolset/compare.py"]
