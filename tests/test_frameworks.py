"""The framework in play, from names only one RL framework uses (tools/config/frameworks.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rlmedic.errors import UserError
from rlmedic.tools.config import frameworks
from rlmedic.tools.config.build_framework_vocab import build


@pytest.mark.parametrize("text, framework", [
    # a class only one framework defines, as Ray prints it in a traceback
    ("(WorkerDict pid=60511) [torch_memory_saver.cpp] CUresult error result=2", "verl"),
    ("RemoteSGLangEngine.agenerate raised after 3 retries", "areal"),
    ("(MegatronTrainRayActor pid=7) AssertionError", "slime"),
    # a setting only one framework's config has
    ("use_remove_padding=True, log_prob_micro_batch_size_per_gpu=1", "verl"),
    ("staleness keeps rising beyond max_head_offpolicyness", "areal"),
    ("python train.py --rollout-batch-size 8 --n-samples-per-prompt 8", "slime"),
    # a traceback through the framework's package
    ('  File "areal/engine/fsdp_engine.py", line 413, in _update_weights_from_distributed', "areal"),
    ('  File "/root/slime/slime/backends/megatron_utils/actor.py", line 88, in train', "slime"),
    # run-time names and syntax (framework_markers.yaml)
    ("rollout backend sglang:d4t2, actor fsdp:d8", "areal"),
    ("resuming from checkpoints/run/global_step_200/actor", "verl"),
    ("launched with --sglang-mem-fraction-static 0.7", "slime"),
])
def test_a_name_only_one_framework_uses_names_it(text: str, framework: str) -> None:
    assert frameworks.detect(text) == framework


@pytest.mark.parametrize("text", [
    "why did my run die?",
    "seed=1 batch_size=8 lr=1e-6",  # settings every framework has prove nothing
    "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2",  # Megatron's flags: passed on by all
    "disable_cuda_graph=True chunked_prefill_size=4096",  # SGLang's server args: every framework's logs carry them
    "verl or slime: which one should I use?",  # two names, nothing else: no guess
])
def test_nothing_distinctive_names_no_framework(text: str) -> None:
    assert frameworks.detect(text) == ""


def test_a_name_outweighs_a_single_setting_of_another_framework() -> None:
    assert frameworks.detect("verl run: where is max_head_offpolicyness documented?") == "verl"
    # ...while a pasted verl traceback outweighs a passing mention of slime
    text = ("I'm on verl; slime seems faster. (WorkerDict pid=1) actor_rollout_ref.rollout.name=sglang\n"
            '  File "verl/workers/fsdp_workers.py", line 463, in generate_sequences')
    assert frameworks.detect(text) == "verl"


def test_shipped_vocabulary_has_each_framework_and_no_shared_name() -> None:
    classes, settings = frameworks.vocabulary()
    for fw in frameworks.RL_FRAMEWORKS:
        assert sum(v == fw for v in classes.values()) > 20, fw
        assert sum(v == fw for v in settings.values()) > 20, fw
    assert not set(classes) & set(settings)
    assert "seed" not in settings and "batch_size" not in settings


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _repo(root: Path, files: dict[str, str]) -> str:
    for rel, text in files.items():
        _write(root / rel, text)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(root), "PATH": "/usr/bin:/bin"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True, env=env)
    return str(root)


def test_the_builder_keeps_classes_of_one_framework_and_verl_keys(tmp_path: Path) -> None:
    """Built from three real git repositories: a class two frameworks define, a generic name and a
    short one are dropped; verl's keys come from its generated trainer config."""
    verl = _repo(tmp_path / "verl", {
        "verl/workers/a.py": "class ActorRolloutRefWorker:\n    pass\nclass SharedHelperName:\n    pass\nclass Qwen2ForCausalLM:\n    pass\n",
        "verl/trainer/config/_generated_ppo_trainer.yaml":
            "actor_rollout_ref:\n  model:\n    use_remove_padding: true\n  _target_: x\ntrainer:\n  nnodes: 1\n",
        "docs/b.py": "class NotInThePackage:\n    pass\n",
    })
    slime = _repo(tmp_path / "slime", {"slime/ray/r.py": "class RolloutManagerX:\n    pass\nclass SharedHelperName:\n    pass\n",
                                       "train_async.py": "class AsyncTrainLoop:\n    pass\n"})
    areal = _repo(tmp_path / "areal", {"areal/api/e.py": "class RemoteSGLangEngine:\n    pass\nclass Short:\n    pass\n"})
    data = build({"verl": verl, "slime": slime, "areal": areal})
    fws = data["frameworks"]
    assert fws["verl"]["classes"] == ["ActorRolloutRefWorker"]
    assert fws["slime"]["classes"] == ["AsyncTrainLoop", "RolloutManagerX"]
    assert fws["areal"]["classes"] == ["RemoteSGLangEngine"]
    assert fws["verl"]["keys"] == ["actor_rollout_ref", "actor_rollout_ref.model", "actor_rollout_ref.model.use_remove_padding",
                                   "trainer", "trainer.nnodes"]
    assert len(data["sources"]["verl"]["commit"]) == 40
    json.dumps(data)  # what the script writes


@pytest.mark.parametrize("yaml_text, message", [
    ("deepspeed:\n  - {pattern: 'x', why: y}\n", "unknown framework"),
    ("verl:\n  - {pattern: '(', why: y}\n", "bad pattern"),
    ("verl:\n  - {pattern: 'a*', why: y}\n", "empty text"),
    ("verl:\n  - {pattern: 'WorkerDict'}\n", "needs a pattern and a why"),
    ("- verl\n", "mapping"),
])
def test_a_bad_marker_file_is_one_clear_error(tmp_path: Path, yaml_text: str, message: str) -> None:
    path = tmp_path / "framework_markers.yaml"
    path.write_text(yaml_text)
    with pytest.raises(UserError, match=message):
        frameworks.markers(path)


def test_the_shipped_marker_file_is_valid() -> None:
    assert {fw for fw, _ in frameworks.markers()} == set(frameworks.RL_FRAMEWORKS)
