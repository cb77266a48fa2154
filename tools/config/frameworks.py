"""Which RL framework a text is about: AReaL, slime or verl, from the names only one of them uses.

Fixes, cards and known issues are framework-specific (an AReaL key is no use on a verl run), so
the answer needs the framework in play, and users rarely write it: they paste
``(WorkerDict pid=...)``, ``use_remove_padding=True``, ``--rollout-batch-size`` or a traceback
through ``areal/engine/...``. Each of those names belongs to one framework, and that is a fact in
its source, so the vocabulary is generated, not hand-picked:

- the framework's own name, and its package in a traceback path (``verl/workers/...py``);
- class names only its package defines (``framework_vocab.json``, built by
  ``build_framework_vocab.py`` from the three repositories);
- names that are not class definitions or keys (classes built at run time, scripts, folder names,
  value syntax), listed by hand with where each comes from (``framework_markers.yaml``);
- config settings only it has: AReaL's config reference (``areal_schema.json``), slime's own
  flags (``slime_schema.json``; Megatron's and SGLang's flags, which every framework passes on,
  are left out), verl's trainer keys (``framework_vocab.json``). Only settings that read as
  identifiers count (two underscores, or twelve characters or more): ``seed`` proves nothing.

:func:`detect` weighs them and names a framework only when one clearly leads.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from rlmedic.errors import UserError

RL_FRAMEWORKS = ("areal", "slime", "verl")
HERE = Path(__file__).parent

#: weights: a name or a package path says it outright; a class is strong; one setting is a hint
NAMED, PATH, CLASS, SETTING = 3, 3, 2, 1
#: at most this much from classes or settings each, so a long pasted config cannot outvote a name
CAP = 6

_NAMES = {"areal": re.compile(r"\b(?:areal|realhf)\b", re.I), "slime": re.compile(r"(?<![\w-])slime(?![\w-])", re.I),
          "verl": re.compile(r"(?<![\w-])verl(?![\w-])", re.I)}
_PATH = re.compile(r"(?<![\w.-])(verl|slime|slime_plugins|areal|realhf)/[\w./-]*\.py\b")
_TOKEN = re.compile(r"--?[A-Za-z][\w-]*|[A-Za-z_][A-Za-z0-9_]*")
#: verl's Hydra config roots: a dotted key under one of them is verl's (AReaL's ``actor.`` matches inside it)
_VERL_KEY = re.compile(
    r"\b(?:actor_rollout_ref|critic|trainer|reward_model|custom_reward_function|algorithm)(?:\.[a-z_][a-z0-9_]*)+"
    r"|\bdata\.(?:train_batch_size|max_prompt_length|max_response_length|train_files|val_files"
    r"|filter_overlong_prompts|truncation|reward_fn_key|prompt_key)\b"
    r"|\bverl\.trainer\.main_ppo\b")
_AREAL_KEY = re.compile(r"\b(?:actor|rollout|gconfig|saver|recover|cluster|sglang|train_dataset)\.[a-z_]+")


def _identifier(name: str) -> bool:
    return name.count("_") >= 2 or (len(name) >= 12 and "_" in name)


@lru_cache(maxsize=1)
def vocabulary() -> tuple[dict[str, str], dict[str, str]]:
    """({class name: framework}, {setting name: framework}); settings normalised to ``snake_case``."""
    vocab = json.loads((HERE / "framework_vocab.json").read_text(encoding="utf-8"))["frameworks"]
    classes = {c: fw for fw, v in vocab.items() for c in v.get("classes", ())}
    areal = json.loads((HERE / "areal_schema.json").read_text(encoding="utf-8"))["sections"]
    flags = json.loads((HERE / "slime_schema.json").read_text(encoding="utf-8"))["flags"]
    settings: dict[str, set[str]] = {
        "areal": {f for s in areal.values() for f in s["fields"]},
        "slime": {e["dest"] for e in flags.values() if "slime" in e["source"]},
        "verl": {k.rsplit(".", 1)[-1] for k in vocab["verl"].get("keys", ())},
    }
    # Megatron's, SGLang's and the router's flags reach every framework's logs: nobody's marker
    passed_on = set()
    for e in flags.values():
        if "slime" not in e["source"]:
            dest = e["dest"]
            passed_on |= {dest, dest.removeprefix("sglang_"), dest.removeprefix("router_")}
    owner: dict[str, str] = {}
    for fw, names in settings.items():
        others = set().union(*(n for f, n in settings.items() if f != fw)) | passed_on
        owner.update({n: fw for n in names if _identifier(n) and n not in others})
    return classes, owner


@lru_cache(maxsize=1)
def markers(path: Path | None = None) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """(framework, pattern) of ``framework_markers.yaml``, validated: a known framework, a pattern that
    compiles and matches no empty text, a ``why``."""
    import yaml

    path = path or HERE / "framework_markers.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise UserError(f"{path.name}: expected a mapping of framework -> markers")
    out = []
    for fw, items in data.items():
        if fw not in RL_FRAMEWORKS:
            raise UserError(f"{path.name}: unknown framework {fw!r} (one of {', '.join(RL_FRAMEWORKS)})")
        for n, item in enumerate(items or [], 1):
            where = f"{path.name}: {fw} marker {n}"
            if not isinstance(item, dict) or not str(item.get("why") or "").strip():
                raise UserError(f"{where}: needs a pattern and a why")
            try:
                pattern = re.compile(str(item.get("pattern") or ""))
            except re.error as exc:
                raise UserError(f"{where}: bad pattern: {exc}") from None
            if not pattern.pattern or pattern.search(""):
                raise UserError(f"{where}: the pattern matches an empty text")
            out.append((fw, pattern))
    return tuple(out)


def scores(text: str) -> dict[str, int]:
    """Each framework's weight of evidence in ``text``."""
    classes, settings = vocabulary()
    out = {fw: 0 for fw in RL_FRAMEWORKS}
    for fw, pattern in _NAMES.items():
        out[fw] += NAMED if pattern.search(text) else 0
    for fw in {m.group(1) for m in _PATH.finditer(text)}:
        out[{"realhf": "areal", "slime_plugins": "slime"}.get(fw, fw)] += PATH
    tokens = {t.lstrip("-").replace("-", "_") if t.startswith("-") else t for t in _TOKEN.findall(text)}
    by_class = {fw: 0 for fw in RL_FRAMEWORKS}
    by_setting = {fw: 0 for fw in RL_FRAMEWORKS}
    for t in tokens:
        if t in classes:
            by_class[classes[t]] += CLASS
        elif t in settings:
            by_setting[settings[t]] += SETTING
    for fw, pattern in markers():
        by_class[fw] += CLASS if pattern.search(text) else 0
    low = text.lower()
    verl_keys = set(_VERL_KEY.findall(low))
    areal_keys = set(_AREAL_KEY.findall(_VERL_KEY.sub(" ", low)))
    by_setting["verl"] += len(verl_keys)
    by_setting["areal"] += len(areal_keys)
    for fw in RL_FRAMEWORKS:
        out[fw] += min(CAP, by_class[fw]) + min(CAP, by_setting[fw])
    if "megatron" in low and not any(out.values()):
        out["slime"] += 2  # a Megatron run that names nothing else: slime is the Megatron-first one
    return out


def detect(text: str) -> str:
    """``areal``, ``slime`` or ``verl`` when one framework's evidence clearly leads, else ``""``."""
    if not text:
        return ""
    s = scores(text[-400_000:])
    best = max(s, key=s.__getitem__)
    if not s[best] or sum(v == s[best] for v in s.values()) > 1:
        return ""
    return best
