"""Versions: PEP 440 comparison that tolerates what people run, and readers for what they paste."""

from __future__ import annotations

import json

import pytest
from rlmedic import versions as v
from rlmedic.tools.envinfo import collect


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        ("0.4.6.post1", "0.4.6", 1),  # a post release is after its release
        ("0.4.6", "0.4.6.post1", -1),
        ("v0.4.6-post1", "0.4.6.post1", 0),  # "v" and "-post" spellings
        ("2.6.0+cu124", "2.6.0", 0),  # a local build tag is not a newer release
        ("2.6.0+cu124", "2.6.1", -1),
        ("0.5.0.dev20250101", "0.5.0", -1),  # a dev build comes before its release
        ("0.5.0rc1", "0.4.9", 1),
        ("0.10.0", "0.9.2", 1),  # not string order
        ("1.2", "1.2.0", 0),
    ],
)
def test_compare(a: str, b: str, want: int) -> None:
    assert v.compare(a, b) == want


@pytest.mark.parametrize("unknown", ["main", "nightly", "latest", "abc1234", "3f9e0c1d2b7a", "", "source"])
def test_a_sha_or_a_branch_cannot_be_compared(unknown: str) -> None:
    assert v.parse(unknown) is None
    assert v.compare(unknown, "0.4.6") is None
    assert v.status(unknown, fixed_in="0.4.6") == "unknown"


def test_status_from_fixed_in_and_affected_ranges() -> None:
    assert v.status("0.4.6", fixed_in="0.4.6.post1") == "affected"
    assert v.status("0.4.6.post1", fixed_in="0.4.6.post1") == "fixed_in_yours"
    assert v.status("0.4.7+cu124", fixed_in="0.4.6.post1") == "fixed_in_yours"
    assert v.status("0.4.5", affected=">=0.4.5,<0.4.6.post1") == "affected"
    assert v.status("0.4.4", affected=">=0.4.5,<0.4.6.post1") == "fixed_in_yours"  # outside the range: not this bug
    assert v.status("0.5.0rc1", fixed_in="0.5.0") == "affected"  # a pre-release comes before the release with the fix
    assert v.status("", fixed_in="1.0") == "unknown"


def test_pip_list_and_freeze() -> None:
    listing = (
        "Package            Version\n------------------ -----------\nsglang             0.4.6.post1\n"
        "torch              2.6.0+cu124\nflash_attn         2.7.4.post1\nverl               0.3.1   /src/verl\n"
    )
    assert v.from_pip(listing) == {"sglang": "0.4.6.post1", "torch": "2.6.0+cu124", "flash-attn": "2.7.4.post1", "verl": "0.3.1"}
    freeze = "sglang==0.4.6\nvllm==0.8.5.post1\nmegatron-core==0.12.0\nareal @ git+https://github.com/x/AReaL@abc\n"
    assert v.from_pip(freeze) == {"sglang": "0.4.6", "vllm": "0.8.5.post1", "megatron-core": "0.12.0", "areal": "source"}


def test_log_banners() -> None:
    log = (
        "[2025-05-01 10:00:00] server_args: sglang==0.4.6 tp=2\n"
        "INFO 05-01 10:00:01 vLLM version 0.8.5\n"
        "torch 2.6.0+cu124 with CUDA 12.4\n"
        "AReaL v0.3.0 launching trial\n"
        "Megatron-core 0.12 initialised\n"
    )
    assert v.from_banners(log) == {"sglang": "0.4.6", "vllm": "0.8.5", "torch": "2.6.0+cu124", "areal": "0.3.0",
                                   "megatron-core": "0.12", "cuda": "12.4"}


def test_image_tags() -> None:
    text = "image: lmsysorg/sglang:v0.4.6.post1-cu124\nalso vllm/vllm-openai:v0.8.5 and verlai/verl:app-verl0.4"
    assert v.from_image_tags(text) == {"sglang": "0.4.6.post1", "vllm": "0.8.5"}


def test_free_text_does_not_invent_packages() -> None:
    # "step 5" looks like a two-column pip line; only known packages count in free text
    assert v.read_versions("step 5\nloss 0.25\nepoch 3\nsglang==0.4.6") == {"sglang": "0.4.6"}


def test_env_json_round_trip() -> None:
    data = collect()
    text = json.dumps(data)
    found = v.from_env_json(text)
    assert found["python"] == data["python"]
    installed = {k: val for k, val in data["packages"].items() if val != "not installed"}
    assert installed and all(found[v.canonical(k)] == val for k, val in installed.items())
    assert "sglang" not in found or data["packages"]["sglang"] != "not installed"
    fake = {"python": "3.11.7", "torch_cuda": "12.4", "packages": {"sglang": "0.4.6.post1", "vllm": "not installed"}}
    assert v.read_versions(json.dumps(fake)) == {"python": "3.11.7", "cuda": "12.4", "sglang": "0.4.6.post1"}
