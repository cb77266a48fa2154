"""Upstream fixes at the front doors: sync-code, --env, env --python, diagnose, a session's evidence, the answer lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rlmedic.ui.cli import app
from typer.testing import CliRunner

from tests.test_history import make_framework

runner = CliRunner()
LOG = """\
[2025-05-02 11:02:03] INFO trainer starting, step 0
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/verl/trainer/main.py", line 10, in fit
    actor.update_policy(batch)
  File "/opt/conda/lib/python3.10/site-packages/verl/workers/actor.py", line 12, in update_policy
    return sum(data) / n
ZeroDivisionError: division by zero
"""
FREEZE_OLD = "torch==2.6.0\nverl==0.1.0\nray==2.40.0\n"
FREEZE_NEW = "torch==2.6.0\nverl==0.2.0\nray==2.40.0\n"


@pytest.fixture()
def synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A miniature verl history synced into RLMEDIC_HOME's index with the CLI; the index folder."""
    monkeypatch.setenv("RLMEDIC_HOME", str(tmp_path / "home"))
    repo, _ = make_framework(tmp_path)
    index = tmp_path / "home" / "index"
    result = runner.invoke(app, ["sync-code", str(repo.path), "--index-dir", str(index), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["repos"][0]
    assert (report["repo"], report["new_commits"], report["tags"]) == ("example-org/verl", 4, 2)
    again = runner.invoke(app, ["sync-code", str(repo.path), "--index-dir", str(index), "--json"])
    assert json.loads(again.stdout)["repos"][0]["new_commits"] == 0
    return index


def test_sync_code_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sync-code", "not a repo!", "--index-dir", str(tmp_path)])
    assert result.exit_code == 2 and "neither a folder nor OWNER/REPO" in result.output
    (tmp_path / "plain").mkdir()
    result = runner.invoke(app, ["sync-code", str(tmp_path / "plain"), "--index-dir", str(tmp_path)])
    assert result.exit_code == 2 and "not a git clone" in result.output


def test_diagnose_names_the_fix_after_the_version_in_env(synced: Path, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(LOG)
    old = tmp_path / "freeze-old.txt"
    old.write_text(FREEZE_OLD)
    result = runner.invoke(app, ["diagnose", str(log), "--env", str(old)])
    assert result.exit_code == 0, result.output
    assert ("Fixed upstream after your verl 0.1.0: example-org/verl#12 '[actor] fix: avoid ZeroDivisionError in "
            "update_policy when the micro batch is empty (#12)'") in result.stdout
    assert "upgrade verl to 0.2.0 or later" in result.stdout
    new = tmp_path / "freeze-new.txt"
    new.write_text(FREEZE_NEW)
    data = json.loads(runner.invoke(app, ["diagnose", str(log), "--env", str(new), "--json"]).stdout)
    first = data["stats"]["upstream_fixes"][0]
    assert (first["pr"], first["status"], first["yours"]) == (12, "in_yours", "0.2.0")
    text = runner.invoke(app, ["diagnose", str(log), "--env", str(new)]).stdout
    assert "Already fixed in your verl 0.2.0" in text and "Fixed upstream after" not in text


def test_env_flag_refuses_a_file_that_is_no_listing(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(LOG)
    result = runner.invoke(app, ["diagnose", str(log), "--env", str(log)])
    assert result.exit_code == 2 and "not a pip freeze, pip list, conda list" in result.output
    result = runner.invoke(app, ["ask", "why?", "--offline", "--env", str(tmp_path / "missing.txt")])
    assert result.exit_code == 2


def test_investigating_a_log_and_an_env_attachment_judges_the_fix_by_it(synced: Path, tmp_path: Path) -> None:
    """The path every front door takes (ask, chat, web, Slack attach files; investigate picks the tools)."""
    from rlmedic.agent.events import Answer
    from rlmedic.agent.investigate import investigate
    from rlmedic.agent.upstream import apply_upstream
    from rlmedic.tools.registry import ToolContext

    log = tmp_path / "train.log"
    log.write_text(LOG)
    env = tmp_path / "env.json"  # pip list --format=json, recognised by its content
    env.write_text(json.dumps([{"name": "verl", "version": "0.1.0"}, {"name": "torch", "version": "2.6.0"}]))
    ctx = ToolContext.for_roots([log, env], env_roots=False, index_dir=synced)
    results: list = []
    list(investigate("why did training crash?", attachments=[log, env], ctx=ctx, results=results))
    assert [r.name for r in results] == ["read_env", "diagnose"] and all(r.ok for r in results)
    evidence = [r.evidence for r in results]
    answer = Answer(answer="")
    lines = apply_upstream(answer, evidence)
    assert lines[0].startswith("Fixed upstream after your verl 0.1.0: example-org/verl#12")
    assert answer.upstream_fixes[0]["pr"] == 12 and answer.citations[0].url.endswith("/pull/12")
    assert answer.to_dict()["upstream_fixes"][0]["release"] == "v0.2.0"


def test_upstream_tool_reads_a_pasted_traceback(synced: Path) -> None:
    from rlmedic.tools.registry import REGISTRY, ToolContext

    ctx = ToolContext.for_roots([], env_roots=False, index_dir=synced)
    result = REGISTRY.call("upstream_fixes", {"traceback": LOG, "versions": {"verl": "0.1.0"}}, ctx)
    assert result.ok, result.error
    assert result.evidence.upstream_fixes[0].pr == 12 and "example-org/verl#12" in result.text
    none = REGISTRY.call("upstream_fixes", {"traceback": "all good"}, ctx)
    assert none.ok and none.evidence.upstream_fixes == [] and "no traceback" in none.text


def test_env_python_reads_another_environment_without_importing_it(tmp_path: Path) -> None:
    venv = tmp_path / "train-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # the venv's own site-packages (with -S, sysconfig would name the base interpreter's: never write there)
    site = Path(subprocess.run([str(py), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    assert site.is_relative_to(venv), site
    dist = site / "verl-0.7.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.7.0\n")
    # a .pth line runs when that environment's site starts: it leaves a mark (harmless anywhere) if it ever runs
    mark = tmp_path / "pth-ran"
    (site / "mark.pth").write_text(f"import pathlib; pathlib.Path({str(mark)!r}).write_text('ran')\n")
    result = runner.invoke(app, ["env", "--python", str(py), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["packages"]["verl"] == "0.7.0" and data["packages"]["torch"] == "not installed"
    assert data["executable"] == str(py) and not mark.exists()
    missing = runner.invoke(app, ["env", "--python", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such interpreter" in missing.output


def test_search_kind_commit_on_the_cli_and_through_the_registry(synced: Path) -> None:
    """`rlmedic search --kind commit` and the search_docs tool MCP clients call."""
    from rlmedic.tools.registry import REGISTRY, ToolContext

    result = runner.invoke(app, ["search", "KeyError get_reward", "--kind", "commit", "--index-dir", str(synced), "--json"])
    assert result.exit_code == 0, result.output
    first = json.loads(result.stdout)["results"][0]
    assert first["kind"] == "commit" and first["source"] == "example-org/verl#15" and first["release"] == ""
    assert first["citation"]["url"] == "https://github.com/example-org/verl/pull/15"
    ctx = ToolContext.for_roots([], env_roots=False, index_dir=synced)
    hit = REGISTRY.call("search_docs", {"query": "ZeroDivisionError update_policy", "kind": "commit", "k": 2}, ctx)
    assert hit.ok and "example-org/verl#12" in hit.text
    empty = ToolContext.for_roots([], env_roots=False, index_dir=synced.parent / "elsewhere")
    missing = REGISTRY.call("search_docs", {"query": "x", "kind": "commit"}, empty)
    assert not missing.ok and "sync-code" in missing.error


def test_watch_alert_names_the_upstream_fix(synced: Path, tmp_path: Path) -> None:
    from rlmedic.tools.logs.watch import Watcher, WatchOptions

    log = tmp_path / "run" / "train.log"
    log.parent.mkdir()
    log.write_text("[2025-05-02 11:00:00] INFO verl==0.1.0 starting\n" + LOG)
    alerts = Watcher([str(log)], WatchOptions(stall_minutes=0)).tick()
    failure = [a for a in alerts if a.kind == "failure"]
    assert failure, [a.title for a in alerts]
    text = failure[0].text(slack=False)
    assert "Fixed upstream after your verl 0.1.0: example-org/verl#12" in text and "upgrade verl to 0.2.0" in text


def test_diagnose_source_quotes_the_failing_function(synced: Path, tmp_path: Path) -> None:
    """--source: the training environment's site-packages (here: the fixture's v0.1.0 actor.py laid out as one)."""
    from tests.test_history import ACTOR_V1

    site = tmp_path / "site-packages"
    (site / "verl" / "workers").mkdir(parents=True)
    (site / "verl" / "workers" / "actor.py").write_text(ACTOR_V1 + "\n# the end\n")
    log = tmp_path / "train.log"
    log.write_text(LOG.replace("line 12, in update_policy", "line 10, in update_policy"))
    result = runner.invoke(app, ["diagnose", str(log), "--source", str(site)])
    assert result.exit_code == 0, result.output
    assert "Code at the failure (your source):" in result.stdout
    assert "    8      def update_policy(self, data):" in result.stdout
    assert ">   10          return sum(data) / n" in result.stdout
    data = json.loads(runner.invoke(app, ["diagnose", str(log), "--source", str(site), "--json"]).stdout)
    [quote] = data["stats"]["code_context"]
    assert (quote["func"], quote["start"], quote["line"]) == ("update_policy", 8, 10)
    missing = runner.invoke(app, ["diagnose", str(log), "--source", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such folder" in missing.output


def test_quote_code_is_confined_and_bounded(tmp_path: Path) -> None:
    from rlmedic.errors import UserError
    from rlmedic.tools.registry import ToolContext
    from rlmedic.tools.code_context import MAX_LINES, quote_frames

    src = tmp_path / "clone"
    body = "def long_one(x):\n" + "".join(f"    x = x + {i}\n" for i in range(200))
    (src / "python" / "sglang" / "srt").mkdir(parents=True)
    (src / "python" / "sglang" / "srt" / "run.py").write_text(body)
    frames = [("/usr/lib/python3/dist-packages/sglang/srt/run.py", 150, "long_one")]
    ctx = ToolContext.for_roots([src], env_roots=False)
    [quote] = quote_frames(frames, src, ctx.confinement)
    assert quote.end - quote.start + 1 == MAX_LINES and quote.end == 154 and quote.file.endswith("python/sglang/srt/run.py")
    assert quote_frames([("/x/sglang/srt/run.py", 999, "long_one")], src, ctx.confinement) == []  # another version
    outside = ToolContext.for_roots([tmp_path / "elsewhere"], env_roots=False)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(UserError):
        quote_frames(frames, src, outside.confinement)


def test_eval_env_refuses_a_file_that_is_no_listing(tmp_path: Path) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text("")
    bad = tmp_path / "notes.txt"
    bad.write_text("just some notes\n")
    result = runner.invoke(app, ["eval", str(cases), "--offline", "--env", str(bad)])
    assert result.exit_code == 2 and "not a pip freeze" in result.output
