"""``rlmedic lint-config`` / ``fix-config`` through the CLI, and the schema data file's provenance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import FIXTURES, REPO, SHARED
from rlmedic.ui.cli import app
from typer.testing import CliRunner

AREAL = FIXTURES / "configs" / "areal"
SLIME = FIXTURES / "configs" / "slime"
GPU = FIXTURES / "gpu"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_lint_config_json_shape_and_exit_code() -> None:
    result = run("lint-config", AREAL / "mb_tokens.yaml", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["valid"] is False and data["framework"] == "areal"
    problem = next(p for p in data["problems"] if p["rule"] == "areal-mb-tokens-cover-sequence")
    assert {"key", "message", "severity", "citation"} <= set(problem)
    assert problem["key"] == "actor.mb_spec.max_tokens_per_mb" and problem["severity"] == "error"
    assert problem["citation"]["text"].startswith("card:oom-actor-train")
    assert problem["citation"]["kind"] == "card" and problem["citation"]["ref"] == "oom-actor-train"
    assert problem["citations"][0] == problem["citation"]


def test_lint_config_clean_exit_zero_and_text() -> None:
    result = run("lint-config", AREAL / "base.yaml")
    assert result.exit_code == 0, result.output
    assert "no problems found" in result.stdout


def test_lint_config_with_snapshot() -> None:
    result = run("lint-config", AREAL / "attention_5090.yaml", "--snapshot", GPU / "rtx5090.json")
    assert result.exit_code == 1
    assert "flashinfer" in result.stdout and "SM120" in result.stdout


def test_fix_config_json_contract(tmp_path: Path) -> None:
    src = AREAL / "fileroot_relative.yaml"
    before = (src.read_bytes(), src.stat().st_mtime_ns)
    out = tmp_path / "fixed.yaml"
    result = run("fix-config", src, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= {"valid", "problems", "changes", "output"}
    assert data["valid"] is False and data["fixed_valid"] is True
    assert data["output"] == str(out)
    (change,) = data["changes"]
    assert {k: change[k] for k in ("key", "old", "new", "rule", "op")} == {
        "key": "cluster.fileroot",
        "old": "./outputs/grpo",
        "new": "/workspace/outputs/grpo",
        "rule": "areal-fileroot-absolute",
        "op": "set",
    }
    assert "persistent storage" in change["reason"] and change["why"] == change["reason"]
    assert change["citation"]["text"].startswith("card:checkpoints-not-on-persistent-volume")
    assert change["citation"]["kind"] == "card" and change["citation"]["ref"] == "checkpoints-not-on-persistent-volume"
    assert change["citations"][0] == change["citation"]
    assert "+  fileroot: /workspace/outputs/grpo" in data["diff"]
    assert "fileroot: /workspace/outputs/grpo" in out.read_text()
    assert (src.read_bytes(), src.stat().st_mtime_ns) == before


def test_fix_config_to_stdout_keeps_explanations_on_stderr() -> None:
    result = run("fix-config", SLIME / "async_colocate.sh")
    assert result.exit_code == 0, result.output
    assert "--colocate" not in result.stdout.split("python3 train_async.py", 1)[1]
    assert "why:" in result.stderr and "card:async-with-colocate" in result.stderr


def test_fix_config_fileroot_option(tmp_path: Path) -> None:
    result = run("fix-config", AREAL / "fileroot_relative.yaml", "--fileroot", "/mnt/volume", "--json")
    data = json.loads(result.stdout)
    assert data["changes"][0]["new"] == "/mnt/volume/outputs/grpo"
    assert data["output"] is None


def test_fix_config_refuses_to_overwrite_the_input(tmp_path: Path) -> None:
    src = tmp_path / "c.yaml"
    src.write_text((AREAL / "mb_tokens.yaml").read_text())
    result = run("fix-config", src, "-o", src)
    assert result.exit_code == 2
    assert result.stderr.startswith("rlmedic: error:") and "never overwrites" in result.stderr
    assert src.read_text() == (AREAL / "mb_tokens.yaml").read_text()


def test_a_log_given_to_lint_config_is_named_for_what_it_is(tmp_path: Path) -> None:
    """Not "invalid YAML at line 3": a training log is not a config, and diagnose reads it."""
    log = FIXTURES / "logs" / "multirank" / "rank2.log"
    for command in ("lint-config", "fix-config"):
        result = run(command, log)
        assert result.exit_code == 2, result.output
        assert "not an AReaL config" in result.stderr and "slime launch script" in result.stderr
        assert "rlmedic diagnose" in result.stderr and "invalid YAML" not in result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("actor: [1, 2\n")
    assert "invalid YAML" in run("lint-config", broken).stderr  # a .yaml file keeps the parser's line


def test_missing_config_is_one_line_exit_2(tmp_path: Path) -> None:
    result = run("lint-config", tmp_path / "nope.yaml")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "no such file" in result.stderr


def test_schema_data_file_is_what_the_build_script_produces(tmp_path: Path, shared: Path) -> None:
    reference = SHARED / "corpus" / "areal" / "en" / "cli_reference.md"
    out = tmp_path / "schema.json"
    subprocess.run([sys.executable, str(REPO / "tools" / "config" / "build_areal_schema.py"), str(reference), "-o", str(out)],
                   check=True)
    assert json.loads(out.read_text()) == json.loads((REPO / "tools" / "config" / "areal_schema.json").read_text())


def test_console_script_end_to_end(tmp_path: Path) -> None:
    """One real process: the installed entry point, no GPU, no heavy imports needed."""
    exe = Path(sys.executable).with_name("rlmedic")
    env = {**os.environ, "RLMEDIC_HOME": str(tmp_path / "home")}
    out = tmp_path / "fixed.sh"
    proc = subprocess.run([str(exe), "fix-config", str(SLIME / "batch_arithmetic.sh"), "-o", str(out), "--json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changes"][0]["new"] == 256
    assert "--global-batch-size 256" in out.read_text()
    proc = subprocess.run([str(exe), "gpu", "--snapshot", str(GPU / "no_gpu.json")], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0 and "No GPU visible" in proc.stdout
    proc = subprocess.run([str(exe), "checkpoints", str(tmp_path), "--json"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 1 and json.loads(proc.stdout)["layout"] == "empty"  # nothing to resume from


SECRETS = {
    "wandb": "0123456789abcdef0123456789abcdef01234567",
    "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "openai": "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx",
    "url_password": "s3cr3tPassw0rd",
}


def test_fix_config_diff_and_json_never_show_secrets(tmp_path: Path) -> None:
    """The diff's context lines are the user's own config: keys next to a changed line leaked into
    the terminal and the JSON. The written file keeps them (it has to run)."""
    src = tmp_path / "run.sh"
    src.write_text(
        "python3 train.py \\\n"
        f"   --wandb-key {SECRETS['wandb']} \\\n"
        "   --rollout-batch-size 32 --n-samples-per-prompt 8 --global-batch-size 255 \\\n"
        f"   --hf-token {SECRETS['hf']} \\\n"
        f"   --rollout-function-path \"http://user:{SECRETS['url_password']}@host/x\" \\\n"
        f"   --sglang-router-api-key {SECRETS['openai']} \\\n"
        "   --save /ckpt --load /ckpt --save-interval 5\n"
    )
    before = src.read_bytes()
    out = tmp_path / "fixed.sh"
    human = run("fix-config", src, "-o", out)
    assert human.exit_code == 0, human.output
    assert "--global-batch-size 256" in human.stdout and "[REDACTED]" in human.stdout
    as_json = run("fix-config", src, "--json")
    data = json.loads(as_json.stdout)
    assert data["changes"][0]["new"] == 256 and "[REDACTED]" in data["diff"]
    lint = run("lint-config", src, "--json")
    for text in (human.output, as_json.stdout, lint.stdout):
        assert not [k for k, v in SECRETS.items() if v in text], text
    assert all(v in out.read_text() for v in SECRETS.values())  # the corrected config still runs
    assert src.read_bytes() == before


def test_fix_config_yaml_diff_redacts_neighbouring_keys(tmp_path: Path) -> None:
    src = tmp_path / "c.yaml"
    src.write_text(
        "experiment_name: e\ntrial_name: t\nactor:\n  path: /models/Qwen\n  mb_spec:\n    max_tokens_per_mb: 1024\n"
        f"  wandb_api_key: {SECRETS['wandb']}\n"
        "train_dataset:\n  max_length: 4096\ngconfig:\n  max_new_tokens: 1024\n"
    )
    result = run("fix-config", src)
    assert "+    max_tokens_per_mb: 5120" in result.stderr
    assert SECRETS["wandb"] not in result.stderr and "wandb_api_key: [REDACTED]" in result.stderr
    # the printed corrected config is redacted too; only the -o file keeps the user's own values
    assert SECRETS["wandb"] not in result.stdout and "wandb_api_key: [REDACTED]" in result.stdout
    out = tmp_path / "fixed.yaml"
    written = run("fix-config", src, "-o", out)
    assert written.exit_code == 0 and SECRETS["wandb"] not in written.output
    assert f"wandb_api_key: {SECRETS['wandb']}" in out.read_text() and "max_tokens_per_mb: 5120" in out.read_text()


def test_fix_config_output_mistakes_are_one_line_exit_2(tmp_path: Path) -> None:
    """-o naming a directory (even with --force) or a file that cannot be created used to end in a traceback."""
    src = AREAL / "mb_tokens.yaml"
    unwritable = tmp_path / ("x" * 300 + ".yaml")  # ENAMETOOLONG: fails for root too
    for args, message in (
        (["-o", tmp_path, "--force"], "is a directory"),
        (["-o", tmp_path], "is a directory"),
        (["-o", unwritable], "cannot write"),
        (["-o", tmp_path / "missing" / "c.yaml"], "no such directory"),
    ):
        result = run("fix-config", src, *args)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("rlmedic: error:") and message in result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    gpu = run("gpu", "--snapshot", GPU / "a40_idle.json", "--save", unwritable)
    assert gpu.exit_code == 2 and "cannot write" in gpu.stderr and gpu.stderr.count("\n") == 1


def test_symlink_loop_or_long_name_is_one_line_exit_2(tmp_path: Path) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(tmp_path / "other.yaml")
    (tmp_path / "other.yaml").symlink_to(loop)
    long_name = tmp_path / ("x" * 300 + ".yaml")
    for args in (["lint-config", loop], ["fix-config", AREAL / "base.yaml", "--log", loop], ["checkpoints", loop],
                 ["gpu", "--snapshot", loop], ["diagnose", loop], ["lint-config", long_name], ["checkpoints", long_name]):
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("rlmedic: error:") and result.stderr.count("\n") == 1, result.output


def test_empty_areal_config_is_flagged_not_clean(tmp_path: Path) -> None:
    """An empty YAML (wrong file, truncated copy) used to lint as 'no problems found'."""
    for text in ("", "# only a comment\n"):
        cfg = tmp_path / "c.yaml"
        cfg.write_text(text)
        result = run("lint-config", cfg)
        assert result.exit_code == 0 and "no problems found" not in result.stdout
        assert "no settings found" in result.stdout
        fixed = run("fix-config", cfg)
        assert "no change needed" not in fixed.stderr and "no settings found" in fixed.stderr


def test_gpu_checkpoints_and_config_commands_import_nothing_heavy(tmp_path: Path) -> None:
    """These commands must answer fast on a login node: no torch / chromadb / embedding stack."""
    commands = [
        ["gpu", "--snapshot", str(GPU / "a40_leftovers.json"), "--json"],
        ["checkpoints", str(tmp_path), "--json"],
        ["lint-config", str(AREAL / "mb_tokens.yaml"), "--snapshot", str(GPU / "a40_idle.json")],
        ["fix-config", str(SLIME / "batch_arithmetic.sh"), "--json"],
    ]
    code = (
        "import sys\n"
        "from rlmedic.ui.cli import app\n"
        f"for args in {commands!r}:\n"
        "    try:\n"
        "        app(args)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code in (0, 1, None), (args, exc.code)\n"
        "heavy = [m for m in ('torch', 'chromadb', 'langchain', 'gradio', 'sentence_transformers', 'llama_index',\n"
        "                     'transformers', 'tokenizers') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RLMEDIC_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr, proc.stderr
