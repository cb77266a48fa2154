"""Environment listings read by content: pip freeze, pip list (text, JSON), conda list, rlmedic env --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlmedic.errors import UserError
from rlmedic.versions import env_kind, from_env_listing, looks_like_env

CONDA = """\
# packages in environment at /opt/conda/envs/rl:
#
# Name                    Version                   Build  Channel
pytorch                   2.6.0           py3.10_cuda12.4_cudnn9.1.0_0    pytorch
verl                      0.7.0                    pypi_0    pypi
flash_attn                2.7.4.post1              pypi_0    pypi
"""
PIP_LIST = "Package    Version\n---------- -------\ntorch      2.6.0+cu124\nverl       0.7.0\nsglang     0.4.6.post1\n"
FREEZE = "torch==2.6.0\nverl @ git+https://github.com/verl-project/verl@abc\nsglang==0.4.6.post1\nunknown-pkg==1.0\n"


@pytest.mark.parametrize(("text", "kind", "expected"), [
    (FREEZE, "pip", {"torch": "2.6.0", "verl": "source", "sglang": "0.4.6.post1", "unknown-pkg": "1.0"}),
    (PIP_LIST, "pip", {"torch": "2.6.0+cu124", "verl": "0.7.0", "sglang": "0.4.6.post1"}),
    (CONDA, "conda", {"torch": "2.6.0", "verl": "0.7.0", "flash-attn": "2.7.4.post1"}),
    (json.dumps([{"name": "verl", "version": "0.7.0"}, {"name": "flash_attn", "version": "2.7.4"}]), "pip-json",
     {"verl": "0.7.0", "flash-attn": "2.7.4"}),
    (json.dumps({"python": "3.10.12", "packages": {"verl": "0.7.0", "vllm": "not installed"}}), "rlmedic-env",
     {"verl": "0.7.0", "python": "3.10.12"}),
])
def test_listings_are_recognised_and_read(text: str, kind: str, expected: dict[str, str]) -> None:
    assert env_kind(text) == kind
    assert from_env_listing(text) == expected
    assert looks_like_env(text[:60]) or kind == "rlmedic-env"


@pytest.mark.parametrize("text", [
    "[2025-01-01 10:00:00] INFO step 1 loss 0.3\nTraceback (most recent call last):\n",
    "actor:\n  lr: 1e-6\n",
    '{"gpus": [{"index": 0}], "driver": "550.54"}',
    "",
    "step 1\n",  # a one-line log is shaped like `pip list`'s "name version"
    "step 1\nepoch 2\n",
])
def test_other_files_are_not_listings(text: str) -> None:
    assert env_kind(text) == "" and from_env_listing(text) == {} and not looks_like_env(text)


def test_versions_of_file_is_one_clear_error(tmp_path: Path) -> None:
    from rlmedic.tools.envinfo import versions_of_file

    good = tmp_path / "req.txt"
    good.write_text(FREEZE)
    assert versions_of_file(good)[1]["torch"] == "2.6.0"
    bad = tmp_path / "log.txt"
    bad.write_text("hello\n")
    with pytest.raises(UserError, match="not a pip freeze"):
        versions_of_file(bad)
    with pytest.raises(UserError, match="cannot read"):
        versions_of_file(tmp_path / "missing")
