"""Which settings a framework's config has, and the values a parsed config puts in effect.

Answers use this to keep only fixes that can apply: a proposal naming a key that AReaL's config
reference does not know (``actor.sglang.mem_fraction_static``: the real key is
``sglang.mem_fraction_static``), or a flag slime's ``train.py`` does not accept, cannot be the
user's edit. :func:`settings_in_effect` lists what the user's own config sets, plus the value in
effect (documented defaults included) of every key the playbook's fixes name, so a fix whose value
is already in effect, or already past it, is dropped instead of repeated.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

#: Settings kept from one config (scalars only); a config is rarely over a few hundred.
MAX_SETTINGS = 600


@lru_cache(maxsize=2048)
def known_key(framework: str, key: str) -> bool | None:
    """Whether ``key`` is a setting of ``framework``'s config: an AReaL dotted key in its config
    reference, a flag slime's ``train.py`` accepts. ``None`` when it cannot tell (another framework,
    a list index in the key, an empty key)."""
    key = key.strip()
    if not key or re.fullmatch(r"[A-Z][A-Z0-9_]*(?:=.*)?", key):
        return None  # nothing, or an environment variable (NCCL_NVLS_ENABLE): not the config's to judge
    if framework == "slime":
        if not key.startswith("--"):
            return None if "." not in key else False
        from rlmedic.tools.config.slime_flags import spec

        return spec(key) is not None
    if framework == "areal":
        if key.startswith("-") or " " in key:
            return False
        parts = key.split(".")
        if any(p.isdigit() or not p for p in parts):
            return None
        from rlmedic.tools.config.areal import check_schema, parse_areal_config

        text = "".join("  " * i + p + ":\n" for i, p in enumerate(parts[:-1])) + "  " * (len(parts) - 1) + parts[-1] + ": null\n"
        try:
            problems = check_schema(parse_areal_config(text))
        except Exception:  # noqa: BLE001 - a key that does not even parse is no key of the config
            return False
        return not any(p.rule in ("schema-unknown", "schema-removed", "schema-typo") for p in problems)
    return None


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def named_keys(framework: str) -> list[str]:
    """Every key or flag the playbook cards' fixes name for ``framework`` (or for any framework)."""
    from rlmedic.knowledge.cards import load_cards

    out: list[str] = []
    for card in load_cards():
        for fix in card.fixes:
            if fix.key and (not fix.framework or fix.framework in (framework, "generic")):
                out.append(fix.key)
    return list(dict.fromkeys(out))


def settings_in_effect(framework: str, config: Any) -> dict[str, Any]:
    """What ``config`` sets (its own scalar values), then the value in effect of every key the cards'
    fixes name (defaults included), at most :data:`MAX_SETTINGS` entries."""
    out: dict[str, Any] = {}
    if framework == "areal":
        for key in config.dotted_keys():
            if len(out) >= MAX_SETTINGS:
                break
            value = config.get(key)
            if _scalar(value):
                out[key] = value
    elif framework == "slime":
        for occ in config.flags:
            if len(out) >= MAX_SETTINGS:
                break
            out[occ.flag] = config.value(occ.flag)
    else:
        return out
    for key in named_keys(framework):
        if key in out or len(out) >= MAX_SETTINGS or known_key(framework, key) is not True:
            continue
        try:
            value = config.value(key)
        except Exception:  # noqa: BLE001 - a key the config cannot resolve has no value in effect
            continue
        if _scalar(value) and value is not None:
            out[key] = value
    return out
