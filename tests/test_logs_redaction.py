"""Secrets never leave the log tools: findings, excerpts and JSON are redacted."""

from __future__ import annotations

import json

import pytest

from rlmedic.confine import REDACTED, redact
from rlmedic.tools.logs.diagnose import diagnose_text
from rlmedic.tools.logs.excerpt import excerpt_text

SECRETS = {
    "wandb": "WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567",
    "wandb_login": "wandb login 0123456789abcdef0123456789abcdef01234567",
    "wandb_flag": "--wandb-key 0123456789abcdef0123456789abcdef01234567",
    "wandb_args_dump": "  wandb_key ....................................... 0123456789abcdef0123456789abcdef01234567",
    "huggingface": "token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "openai": "client key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx",
    "slack": "SLACK xoxb-1234567890-abcdefghijkl",
    "aws_access": "aws key AKIAIOSFODNN7EXAMPLE",
    "aws_secret": "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "authorization": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
    "authorization_json": '{"Authorization": "Bearer abcdefghijklmnopqrstuvwxyz012345"}',
    "url_password": "connecting to https://trainer:s3cr3tPassw0rd@registry.example.com/v2",
    "json_quoted_key": '{"wandb_api_key": "0123456789abcdef0123456789abcdef01234567"}',
    "python_environ": 'os.environ["HF_TOKEN"] = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"',
    "netrc": "machine api.wandb.ai login user password 0123456789abcdef0123456789abcdef01234567",
    "github_fine_grained": "GH github_pat_11ABCDEFG0abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV012345",
    "google": "key AIzaSyA1234567890abcdefghijklmnopqrstuv",
}
SECRET_VALUES = [
    "0123456789abcdef0123456789abcdef01234567",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx",
    "xoxb-1234567890-abcdefghijkl",
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "abcdefghijklmnopqrstuvwxyz012345",
    "s3cr3tPassw0rd",
    "github_pat_11ABCDEFG0",
    "AIzaSyA1234567890",
]


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_token_kind_is_redacted(kind: str) -> None:
    text = SECRETS[kind]
    out = redact(text)
    assert REDACTED in out
    assert not any(v in out for v in SECRET_VALUES), out


@pytest.mark.parametrize(
    "text",
    [
        "--input-key prompt --max-tokens-per-gpu 4096  max_tokens_per_gpu ...... 4096",
        # settings whose names contain "token" but are not tokens; they show up in config diffs
        "tokenizer_path: /models/Qwen2.5-7B-Instruct",
        "  max_new_tokens: ${gconfig.max_new_tokens}",
        '{"max_tokens_per_mb": 20480000, "tokenizer": "/models/qwen/tokenizer"}',
        "  pad_token: <|endoftext|>",
        "  tokenizer_path: ${tokenizer_path}",
    ],
)
def test_useful_settings_are_not_redacted(text: str) -> None:
    assert redact(text) == text


def test_diagnosis_and_excerpt_never_carry_secrets() -> None:
    log = "\n".join(
        [*(f"(TrainWorker pid=1) {line}" for line in SECRETS.values()),
         "(TrainWorker pid=1) Traceback (most recent call last):",
         "(TrainWorker pid=1) KeyError: 'prompt' while reading row with api_key=sk-proj-AbCdEfGhIjKlMnOpQrStUvWx"]
    )
    diag = diagnose_text(log)
    assert diag.root_finding is not None and diag.root_finding.id == "data-key-error"
    blob = json.dumps(diag.to_dict()) + excerpt_text(log, max_lines=50)
    assert not any(v in blob for v in SECRET_VALUES)
    assert REDACTED in blob
