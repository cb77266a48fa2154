"""Every config key and flag the knowledge proposes is one the framework's config really has.

A fix naming a key AReaL's config reference does not know (``actor.sglang.mem_fraction_static``,
where the key is ``sglang.mem_fraction_static``) or a flag slime's ``train.py`` does not accept can
never be the user's edit: answers drop such fixes (rlmedic.agent.fit), so the playbook cards, the
log signatures must not ship them. A fix that says it is for a legacy or older release ("In legacy
AReaL configs ...") may keep the old name: it applies when the user's config has that key. Known-issue
records are left out: their changes are the keys of the release they are about (newer or older than the
pinned schemas), and answers do not judge them against the schema.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rlmedic.agent.fit import key_framework
from rlmedic.tools.config.keys import known_key

ROOT = Path(__file__).resolve().parents[1]
LEGACY = re.compile(r"(?i)\blegacy\b|\bolder\b")


def _framework(tag: str, key: str) -> str:
    return tag if tag and tag != "generic" else key_framework(key)


def _invalid(where: str, tag: str, key: str, text: str) -> list[str]:
    fw = _framework(tag, key)
    if key and fw in ("areal", "slime") and known_key(fw, key) is False and not LEGACY.search(text):
        return [f"{where}: {key} is not a setting of {fw}'s config"]
    return []


def test_card_fixes_name_real_keys() -> None:
    from rlmedic.knowledge.cards import load_cards

    bad = [b for c in load_cards() for f in c.fixes for b in _invalid(f"card {c.id}", f.framework, f.key, str(f))]
    assert bad == []


def test_signature_fixes_name_real_keys() -> None:
    data = yaml.safe_load((ROOT / "tools" / "logs" / "signatures.yaml").read_text())
    bad = []
    for sig in data["signatures"]:
        for fix in sig.get("fixes") or []:
            if isinstance(fix, dict):
                key = str(fix.get("key") or fix.get("flag") or "")
                bad += _invalid(f"signature {sig['id']}", str(fix.get("framework") or ""), key, str(fix.get("action")))
    assert bad == []


@pytest.mark.parametrize("framework,key,ok", [
    ("areal", "sglang.mem_fraction_static", True), ("areal", "actor.sglang.mem_fraction_static", False),
    ("areal", "actor.mb_spec.max_tokens_per_mb", True), ("slime", "--sglang-mem-fraction-static", True),
    ("slime", "--no-such-flag", False), ("slime", "actor.mb_spec", False), ("verl", "trainer.nnodes", None),
    ("slime", "NCCL_NVLS_ENABLE", None), ("areal", "PYTORCH_CUDA_ALLOC_CONF", None),
])
def test_known_key_tells_real_keys_from_invented_ones(framework: str, key: str, ok: bool | None) -> None:
    assert known_key(framework, key) is ok
