"""Redaction: every secret kind's examples, redact-before-cut, redact-before-store, and every printed output.

The examples live in the table (rlmedic.redact.KINDS); these tests hold each kind to them
and then plant each kind in the inputs of the commands that print or store text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import rlmedic.confine
import rlmedic.redact
from conftest import FIXTURES
from rlmedic.redact import KINDS, REDACTED, names_secret, redact, redact_value, secret_kinds, strip_ansi
from rlmedic.ui.cli import app

runner = CliRunner()
KIND = {k.name: k for k in KINDS}
POSITIVES = [(k.name, i) for k in KINDS for i in range(len(k.positives))]
NEGATIVES = [(k.name, i) for k in KINDS for i in range(len(k.negatives))]


def secret_of(kind: str, text: str) -> str:
    """The part of a positive example that must not survive (its pattern's ``secret`` group)."""
    m = KIND[kind].search(text)
    assert m, f"{kind}: positive example does not match its own pattern: {text!r}"
    return m.group("secret")


def pieces(secret: str) -> list[str]:
    """Runs of secret characters long enough to be recognisable in any output (JSON escaping included)."""
    runs = re.findall(r"[A-Za-z0-9+/=_.-]{6,}", secret)
    return [p for p in runs if len(p) >= 12 or re.search(r"\d", p)]  # not words of a log prefix ("Worker")


def leaked(secrets: list[str], output: str) -> list[str]:
    return [p for s in secrets for p in pieces(s) if p in output]


def plants(kind: str) -> tuple[list[str], list[str]]:
    """The positive examples of a kind and the secret pieces that must not appear."""
    texts = list(KIND[kind].positives)
    return texts, [secret_of(kind, t) for t in texts]


# ------------------------------------------------------------------ the table -------


def test_every_kind_has_examples_and_a_hint() -> None:
    assert len({k.name for k in KINDS}) == len(KINDS)
    for k in KINDS:
        assert k.positives and k.negatives, k.name
        assert all(h == h.lower() for h in k.hints), k.name
        assert "secret" in k.pattern.groupindex, k.name


@pytest.mark.parametrize(("kind", "i"), POSITIVES, ids=[f"{k}-{i}" for k, i in POSITIVES])
def test_positive_examples_lose_their_secret(kind: str, i: int) -> None:
    text = KIND[kind].positives[i]
    secret = secret_of(kind, text)
    out = redact(text)
    assert REDACTED in out and secret not in out, out
    assert kind in secret_kinds(text)
    assert redact(out) == out  # idempotent: a redacted text is left alone


@pytest.mark.parametrize(("kind", "i"), NEGATIVES, ids=[f"{k}-{i}" for k, i in NEGATIVES])
def test_negative_examples_are_unchanged(kind: str, i: int) -> None:
    text = KIND[kind].negatives[i]
    assert redact(text) == text
    assert secret_kinds(text) == []


def test_config_values_are_never_redacted() -> None:
    """A whole AReaL-style config with settings named like secrets' neighbours stays byte-identical."""
    text = (FIXTURES / "configs" / "areal" / "base.yaml").read_text() + (
        "gconfig:\n  max_new_tokens: 1024\n  token_budget: 4096\n  stop_token_ids: [151643]\n"
        "tokenizer_path: ${actor.path}\nchat_template: '<|im_start|>{role}<|im_end|>'\n"
        "checksum: sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "  global_step 1200 | max_tokens_per_mb 20480 | tokens/s 3400.5 | #token: 88120\n"
        "commit 3f2c9d0a1b4e5f60718293a4b5c6d7e8f9012345\n"
    )
    assert redact(text) == text


def test_confine_reexports_the_one_implementation() -> None:
    for name in ("redact", "redact_value", "secret_kinds", "REDACTED"):
        assert getattr(rlmedic.confine, name) is getattr(rlmedic.redact, name)


def test_redact_value_walks_structures_and_hides_values_under_secret_keys() -> None:
    value = {
        "wandb_key": "abc",  # too short and plain to be recognised as text: the key says it is a secret
        "args": ("ok", {"HF_TOKEN": "x1"}, ["Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345"]),
        "password": "pw",
        "max_new_tokens": 1024,
        "tokenizer_path": "/models/qwen",
        "token_budget": 4096,
        "pad_token": "<|endoftext|>",
        "api_key": "${oc.env:OPENAI_API_KEY}",
        "hf_token": None,
        "input_key": "prompt",
    }
    out = redact_value(value)
    assert out["wandb_key"] == REDACTED and out["password"] == REDACTED and out["args"][1]["HF_TOKEN"] == REDACTED
    assert out["args"][0] == "ok" and isinstance(out["args"], tuple)
    assert out["args"][2] == ["Authorization: Bearer [REDACTED]"]
    for key in ("max_new_tokens", "tokenizer_path", "token_budget", "pad_token", "api_key", "hf_token", "input_key"):
        assert out[key] == value[key], key
    assert value["wandb_key"] == "abc"  # the input is not modified


def test_redact_value_walks_dataclasses_and_pydantic_models() -> None:
    from dataclasses import dataclass

    from pydantic import BaseModel

    @dataclass
    class Args:
        wandb_key: str
        note: str
        steps: int

    class Result(BaseModel):
        text: str
        args: dict

    args = Args("abc123", f"token={'q' * 20}", 10)
    red = redact_value(args)
    assert red.wandb_key == REDACTED and red.note == "token=[REDACTED]" and red.steps == 10
    assert args.wandb_key == "abc123"
    model = redact_value(Result(text="hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", args={"secret": "s"}))
    assert model.text == REDACTED and model.args == {"secret": REDACTED}


def test_redact_value_keeps_named_tuples_and_stops_at_depth() -> None:
    from typing import NamedTuple

    class Row(NamedTuple):
        name: str
        hf_token: str

    row = redact_value(Row("a", "q" * 12))
    assert isinstance(row, Row) and row == Row("a", REDACTED)
    cycle: list = []
    cycle.append(cycle)
    assert redact_value(cycle)  # a cycle ends at the depth limit instead of recursing forever


@pytest.mark.parametrize("key", ["wandb_key", "WANDB_API_KEY", "hf_token", "db_password", "client_secret", "X-Api-Key"])
def test_names_secret(key: str) -> None:
    assert names_secret(key)


@pytest.mark.parametrize("key", ["max_new_tokens", "tokenizer_path", "token_budget", "pad_token", "input_key", "secret_name",
                                 "eos_token", "num_tokens", "password_file"])
def test_names_that_are_settings(key: str) -> None:
    assert not names_secret(key)


def test_ordinary_text_skips_the_table() -> None:
    """The pre-check: text without any hint is returned as is, without running a regex."""
    line = "[TP3] Decode batch. #running-req: 12, gen throughput (tok/s): 880.2, cuda graph: True"
    assert redact(line) is line


# ------------------------------------------------------------------ redact, then cut -------


@pytest.mark.parametrize("offset", [-30, -12, -3, 0])
def test_long_log_lines_are_redacted_before_they_are_cut(offset: int) -> None:
    from rlmedic.tools.logs.scan import MAX_LINE_CHARS, clean_line

    key = "0123456789abcdef0123456789abcdef01234567"
    head = "x" * (MAX_LINE_CHARS + offset - len("WANDB_API_KEY=")) + " "
    line = head + f"WANDB_API_KEY={key} " + "y" * 5000
    out = clean_line(line.encode())
    assert out.endswith("…[line truncated]")
    assert key[:6] not in out  # not even the start of the key survives the cut
    huge = ("z " * 400_000) + "end"  # a megabyte line is still cut quickly and correctly
    assert len(clean_line(huge.encode())) < MAX_LINE_CHARS + 40


def test_tracker_message_is_redacted_before_it_is_cut(tmp_path: Path) -> None:
    from rlmedic.confine import Confinement
    from rlmedic.tools.checkpoints.listing import list_checkpoints

    save = tmp_path / "save"
    (save / "iter_0000100").mkdir(parents=True)
    key = "0123456789abcdef0123456789abcdef01234567"
    (save / "latest_checkpointed_iteration.txt").write_text(f"export WANDB_API_KEY={key}\n")
    report = list_checkpoints(save, confinement=Confinement(roots=[tmp_path]))
    messages = [i.message for i in report.issues if i.id == "tracker-invalid"]
    assert messages and "[REDACTED]" in messages[0]
    assert key[:6] not in json.dumps(report.to_dict())


# ------------------------------------------------------------------ every output -------

KIND_NAMES = [k.name for k in KINDS]


def _log_with(texts: list[str]) -> str:
    """A log whose root error line and the lines around it carry the planted secrets."""
    return "\n".join([
        "(TrainWorker pid=1) step 1 loss 0.51",
        *texts,
        "(TrainWorker pid=1) Traceback (most recent call last):",
        '(TrainWorker pid=1)   File "train.py", line 3, in <module>',
        *(f"(TrainWorker pid=1) KeyError: 'prompt' while reading row with {t}" for t in texts),
    ]) + "\n"


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_diagnose_json_and_excerpt_never_show_a_secret(kind: str, tmp_path: Path) -> None:
    texts, secrets = plants(kind)
    log = tmp_path / "train.log"
    log.write_text(_log_with(texts))
    diag = runner.invoke(app, ["diagnose", str(log), "--json"])
    assert diag.exit_code == 0, diag.output
    data = json.loads(diag.stdout)
    assert data["findings"][data["root"]]["id"] == "data-key-error"
    excerpt = runner.invoke(app, ["excerpt", str(log), "--max-lines", "200"])
    assert excerpt.exit_code == 0, excerpt.output
    for out in (diag.stdout, excerpt.stdout):
        assert REDACTED in out
        assert not leaked(secrets, out), out


def _config_with(texts: list[str]) -> str:
    """An AReaL config that needs a fix, with the planted secrets in comments and in a value."""
    base = (FIXTURES / "configs" / "areal" / "mb_tokens.yaml").read_text()
    comments = "".join(f"# {line}\n" for t in texts for line in t.splitlines())
    return comments + base + f"wandb:\n  notes: {json.dumps(texts[0])}\n"


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_lint_and_fix_config_never_print_a_secret(kind: str, tmp_path: Path) -> None:
    texts, secrets = plants(kind)
    src = tmp_path / "c.yaml"
    src.write_text(_config_with(texts))
    lint = runner.invoke(app, ["lint-config", str(src), "--json"])
    assert lint.exit_code in (0, 1), lint.output
    fix = runner.invoke(app, ["fix-config", str(src)])
    assert fix.exit_code == 0, fix.output
    assert "max_tokens_per_mb" in fix.stdout and REDACTED in fix.stdout  # the corrected config is printed, redacted
    fix_json = runner.invoke(app, ["fix-config", str(src), "--json"])
    for out in (lint.stdout, fix.stdout, fix.stderr, fix_json.stdout):
        assert not leaked(secrets, out), out


def test_fix_config_output_file_keeps_the_secrets(tmp_path: Path) -> None:
    """Only the -o file keeps the user's secrets (the corrected config has to run)."""
    texts = [t for kind in KIND_NAMES for t in KIND[kind].positives[:1]]
    src = tmp_path / "c.yaml"
    src.write_text(_config_with(texts))
    out = tmp_path / "fixed.yaml"
    result = runner.invoke(app, ["fix-config", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    written = out.read_text()
    assert "# " + texts[0].splitlines()[0] in written and json.dumps(texts[0]) in written
    secrets = [secret_of(kind, KIND[kind].positives[0]) for kind in KIND_NAMES]
    assert not leaked(secrets, result.stdout + result.stderr)
    assert all(p in written for s in secrets for p in pieces(s))


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_checkpoints_never_show_a_secret_from_a_tracker_file(kind: str, tmp_path: Path) -> None:
    texts, secrets = plants(kind)
    save = tmp_path / "save"
    (save / "iter_0000100").mkdir(parents=True)
    (save / "latest_checkpointed_iteration.txt").write_text(texts[0] + "\n")
    as_json = runner.invoke(app, ["checkpoints", str(save), "--json"])
    human = runner.invoke(app, ["checkpoints", str(save)])
    assert "tracker-invalid" in as_json.stdout
    for out in (as_json.stdout, human.stdout):
        assert not leaked(secrets[:1], out), out


def test_the_index_on_disk_never_holds_a_secret(tmp_path: Path) -> None:
    """Documents, metadata and the BM25 side: grep every file the store wrote."""
    from rlmedic.knowledge.index import KnowledgeBase

    texts = [t for k in KINDS for t in k.positives]
    secrets = [secret_of(k.name, t) for k in KINDS for t in k.positives]
    folder = tmp_path / "docs"
    folder.mkdir()
    body = "\n\n".join(f"## Setup step {i}\n\nBefore launching the GRPO job:\n\n{t}\n" for i, t in enumerate(texts))
    (folder / "setup.md").write_text("# Setup\n\n" + body)
    kb = KnowledgeBase(tmp_path / "idx", with_cards=False)
    report = kb.index([folder])
    assert report.chunks_embedded > 1
    files = [p for p in (tmp_path / "idx").rglob("*") if p.is_file()]
    assert any(p.suffix == ".sqlite3" for p in files) and any("bm25" in p.parts for p in files)
    blob = b"".join(p.read_bytes() for p in files)
    found = [p for s in secrets for p in pieces(s) if p.encode() in blob or p.lower().encode() in blob]
    assert not found
    assert REDACTED.encode() in blob
    hits = kb.search("Before launching the GRPO job", k=3)
    assert hits and all(not leaked(secrets, h.text) for h in hits)


# ------------------------------------------------------------------ escapes and quoting -------

#: A W&B-shaped key planted in the examples below.
_KEY = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("text", [
    f"\x1b[33mWANDB_API_KEY\x1b[0m={_KEY}",
    f"\x1b[1;31mwandb_api_key\x1b[0m: \x1b[32m{_KEY}\x1b[0m",
    f"export \x1b[33mHF_TOKEN\x1b[39m=\x1b[2m{_KEY}",
    f"\x1b]0;title\x07--wandb-key \x1b[4m{_KEY}",
])
def test_colour_codes_around_a_name_do_not_hide_its_value(text: str) -> None:
    out = redact(text)
    assert _KEY not in out and REDACTED in out and "\x1b" not in out, repr(out)
    assert strip_ansi("\x1b[31mred\x1b[0m plain \x1b") == "red plain "


def test_a_dict_repr_inside_a_yaml_single_quoted_string_is_redacted() -> None:
    text = f"env_vars: '{{''WANDB_API_KEY'': ''{_KEY}'', ''seed'': 1}}'"
    assert redact(text) == "env_vars: '{''WANDB_API_KEY'': ''[REDACTED]'', ''seed'': 1}'"
    assert redact("password: ''") == "password: ''"  # an empty string stays


@pytest.mark.parametrize(("name", "planted"), [
    ("ansi.sh", f"# \x1b[33mWANDB_API_KEY\x1b[0m={_KEY}\n"),
    ("quoted.yaml", f"# a note\nenv_vars: '{{''WANDB_API_KEY'': ''{_KEY}''}}'\n"),
])
def test_fix_config_and_its_mcp_diff_never_show_a_coloured_or_quoted_secret(name: str, planted: str, tmp_path: Path) -> None:
    from rlmedic.tools.registry import REGISTRY, ToolContext

    base = FIXTURES / "configs" / ("slime/batch_arithmetic.sh" if name.endswith(".sh") else "areal/mb_tokens.yaml")
    src = tmp_path / name
    src.write_text(planted + base.read_text() if name.endswith(".yaml") else base.read_text() + planted)
    for args in (["fix-config", str(src)], ["fix-config", str(src), "--json"], ["lint-config", str(src), "--json"]):
        result = runner.invoke(app, args)
        assert result.exit_code in (0, 1), result.output
        assert _KEY not in result.stdout + result.stderr, args
    fixed = runner.invoke(app, ["fix-config", str(src)])
    assert REDACTED in fixed.stdout
    # the MCP front door calls the registry: the diff it returns is redacted too
    out = REGISTRY.call("fix_config", {"config": str(src)}, ToolContext.for_roots([str(tmp_path)], env_roots=False))
    assert out.ok and out.data["diff"] and _KEY not in json.dumps(out.data) + out.text


def test_the_index_never_holds_a_coloured_secret(tmp_path: Path) -> None:
    from rlmedic.knowledge.index import KnowledgeBase

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "setup.md").write_text(f"# Setup\n\nBefore the run:\n\n    \x1b[33mWANDB_API_KEY\x1b[0m={_KEY}\n")
    kb = KnowledgeBase(tmp_path / "idx", with_cards=False)
    assert kb.index([docs]).chunks_embedded >= 1
    blob = b"".join(p.read_bytes() for p in (tmp_path / "idx").rglob("*") if p.is_file())
    assert _KEY.encode() not in blob and REDACTED.encode() in blob


# ------------------------------------------------------------------ linear time (issue 31) -------

#: Crafted inputs that were quadratic: a wandb.login( never closed (30 lines of 100 KB: 102 s in diagnose),
#: a long word before :// (40,000 letters: 20 s), a dash run before a flag word, encoded-URL runs.
CRAFTED = {
    "wandb.login( unclosed": lambda n: ("wandb.login(" * (n // 12 + 1))[:n],
    "letters before ://": lambda n: "a" * n + "://",
    "dashes before a flag word": lambda n: "-" * n + "token",
    "encoded URL runs": lambda n: "%3A%2F%2F" * (n // 9) + "token",
    "--key flags": lambda n: "--key" * (n // 5),
    "names without values": lambda n: "api_key" * (n // 7),
    "block scalar indicators": lambda n: "hf_token: >-\n" * (n // 13),
}


def _best_of(text: str, runs: int = 3) -> float:
    import time

    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        redact(text)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("name", list(CRAFTED))
def test_redaction_grows_linearly_on_crafted_inputs(name: str) -> None:
    """4x the text costs about 4x the time (quadratic was 16x): compared at two sizes, not against a clock."""
    make = CRAFTED[name]
    small, big = _best_of(make(40_000)), _best_of(make(160_000))
    assert big < 8 * small + 0.05, f"{name}: 40 KB {small:.3f} s, 160 KB {big:.3f} s"


_FRAGMENTS = sorted({h for k in KINDS for h in k.hints}) + [
    "wandb.login(", "Bearer ", "Authorization: ", "-----BEGIN PRIVATE KEY-----", "machine a login b password ",
    "--token ", " ... ", "api_key=", "hf_token: >-\n", "=\\\n", "X-Amz-Signature=", "Cookie: ", "AccountKey=",
    "a", "-", " ", "=", ":", "://", "(", "'", '"', "\\", "\n", "%3A", "%2F", "%40", "@", "/", "$", "|", "0123456789",
]


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=6))
def test_fuzz_redaction_of_random_repeated_fragments_is_linear(unit: list[str]) -> None:
    piece = "".join(unit)
    small = _best_of(piece * (8_000 // len(piece) + 1), 2)
    big = _best_of(piece * (32_000 // len(piece) + 1), 2)
    assert big < 8 * small + 0.02, f"{piece!r}: 8 KB {small:.3f} s, 32 KB {big:.3f} s"


# ------------------------------------------------------------------ issue 31's gaps, one by one -------

W31 = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("text, secret", [
    (f"hf_token: >-\n  {W31}\n", W31),  # a YAML block scalar: the value on the next line
    (f"wandb:\n  api_key: |\n    {W31}\n", W31),
    ("db_password: $ecr3t!Pass", "$ecr3t!Pass"),  # a value starting with $ (not a ${VAR} reference)
    ("REDIS_PASSWORD=73915286", "73915286"),  # all digits
    (f"export WANDB_API_KEY=\\\n    {W31}", W31),  # a line continuation
    ("https://trainer:p%40ss%3Aw0rd@registry.example.com/v2", "p%40ss%3Aw0rd"),  # URL-encoded password
    ("next=https%3A%2F%2Ftrainer%3As3cr3tPassw0rd%40registry", "s3cr3tPassw0rd"),  # an encoded URL
    ("SLACK_WEBHOOK=https://hooks.slack.com/services/T0123ABCD/B0456EFGH/abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwx"),
    ("AccountName=runs;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq==;", "Eby8vdM02xNOcqFlq"),
    ("Cookie: sessionid=8f3a9c2e7b1d4f6a; csrftoken=x", "8f3a9c2e7b1d4f6a"),
    ("remote: glpat-AbCdEfGhIjKlMnOpQrSt", "glpat-AbCdEfGhIjKlMnOpQrSt"),
    ("NGC nvapi-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "nvapi-AbCdEfGhIjKlMnOp"),
    ("s3 ...?X-Amz-Signature=4f2c8a1b9d7e6f5a4b3c2d1e0f9a8b7c&X-Amz-Date=x", "4f2c8a1b9d7e6f5a"),
])
def test_issue_31_gaps_are_redacted_as_text_and_under_json_and_dict_values(text: str, secret: str) -> None:
    assert secret not in redact(text)
    assert secret not in redact(json.dumps({"log": text}))  # the same text inside JSON (escaped newlines)
    assert secret not in json.dumps(redact_value({"notes": text, "nested": [text]}))


def test_variable_references_and_settings_stay() -> None:
    for text in ("api_key: $OPENAI_API_KEY", "token: ${HF_TOKEN}", "password: $(cat /run/secrets/pw)",
                 "description: >-\n  a long text", "max_new_tokens=\\\n  1024", "eval token: 12"):
        assert redact(text) == text


def test_a_private_key_cut_by_an_excerpt_window_is_redacted_to_its_last_line() -> None:
    from rlmedic.redact import PEM_BODY

    block = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\nDXO8bJ6ZGQ==\n-----END PRIVATE KEY-----"
    window = "\n".join(block.splitlines()[1:])  # starts inside the block: no BEGIN line
    shown = redact(window)
    for line in block.splitlines()[1:-1]:
        assert line not in shown
