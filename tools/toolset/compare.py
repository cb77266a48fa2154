"""The comparison tool: ``compare_configs`` (what differs in effect between a run that worked and one that failed).

"It ran yesterday" is the most common start of a question: the first thing to know is what
changed. A text diff of two configs shows reordered keys and comments; this compares the
values in effect, defaults applied (AReaL's documented defaults, slime's, Megatron-LM's
and SGLang's flag defaults), so a key written out with its default value is no change and
a key dropped from the file shows the default that now applies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Annotated, Any

from rlmedic.redact import REDACTED, names_secret
from rlmedic.tools.registry import Param, ToolContext, tool
from rlmedic.types import Evidence

#: Differences kept in a result (a config rewritten from scratch differs everywhere).
MAX_CHANGES = 200
#: The setting name of a slime launch's entry point (``train.py``, ``train_async.py``).
ENTRY = "entry point"


@dataclass
class SettingChange:
    """One setting whose value in effect differs: where each file writes it (``None``: not written there)."""

    key: str
    before: Any
    after: Any
    before_line: int | None = None
    after_line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "before": self.before, "after": self.after,
                "before_line": self.before_line, "after_line": self.after_line}


@dataclass
class ConfigComparison:
    before: str
    after: str
    framework: str
    changes: list[SettingChange] = field(default_factory=list)
    compared: int = 0  # settings written in either file
    more: int = 0  # differences beyond MAX_CHANGES, not listed

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "framework": self.framework, "compared": self.compared,
                "changes": [c.to_dict() for c in self.changes], "more": self.more}


def _shown(value: Any) -> str:
    if value is None:
        return "(not set)"
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _where(name: str, line: int | None) -> str:
    return f"{PurePath(name).name}:{line}" if line else f"{PurePath(name).name}: default"


def _render(result: ConfigComparison) -> str:
    head = (f"{result.before} -> {result.after} ({result.framework}): {len(result.changes) + result.more} of "
            f"{result.compared} setting(s) differ in effect")
    lines = [head] + [f"- {c.key}: {_shown(c.before)} -> {_shown(c.after)} "
                      f"({_where(result.before, c.before_line)}; {_where(result.after, c.after_line)})"
                      for c in result.changes[:40]]
    hidden = len(result.changes) - 40 + result.more
    if hidden > 0:
        lines.append(f"... and {hidden} more")
    return "\n".join(lines)


def _step(data: Any) -> str:
    if not isinstance(data, dict):
        return ""
    return f"{len(data.get('changes') or []) + int(data.get('more') or 0)} setting(s) differ"


def _evidence(result: ConfigComparison) -> Evidence:
    """What changed between the two configs, as facts (a comparison finds no problem by itself)."""
    after = PurePath(result.after).name
    facts = [f"{after} changes {c.key}: {_shown(c.before)} -> {_shown(c.after)}" for c in result.changes[:8]]
    return Evidence(subject="config", facts=facts, healthy=True,
                    checked=f"the settings in effect of {PurePath(result.before).name} and {after} compared",
                    frameworks=[result.framework] if result.framework in ("areal", "slime") else [])


def _settings(framework: str, config: Any) -> dict[str, tuple[Any, int | None]]:
    """Every setting the file writes, with its value in effect and its line."""
    if framework == "slime":  # the entry point too: train.py and train_async.py are different runs
        flags = {flag: (config.value(flag), config.line(flag)) for flag in dict.fromkeys(f.flag for f in config.flags)}
        line = next((n for n, text in enumerate(config.text.splitlines(), 1)
                     if config.entry and config.entry in text and not text.lstrip().startswith("#")), None)
        return {ENTRY: (config.entry, line), **flags}
    out = {}
    for key in config.dotted_keys():
        value = config.get(key)
        if not isinstance(value, (dict, list)):  # leaves: a section differs through its keys
            out[key] = (value, config.line(key))
    return out


@tool(render=_render, evidence=_evidence, step=_step, cache_paths="configs", reads={"configs": ("config", "script")},
      use="for two configs, one that worked and one that failed")
def compare_configs(
    ctx: ToolContext,
    configs: Annotated[list[str], Param(min_length=2, max_length=2, description=(
        "Two configs of one framework (AReaL YAML or slime launch scripts): the run that worked first, "
        "then the one that failed."))],
) -> ConfigComparison:
    """What differs in effect between two training configs: a run that worked and one that failed.

    Compares the values in effect, defaults applied (a key written with its default is no
    change; a key dropped shows the default that now applies), each with its line in both
    files. Changes nothing.
    """
    from rlmedic.errors import UserError
    from rlmedic.tools.config.fix import load_config

    (fw_before, before), (fw_after, after) = (load_config(p, confinement=ctx.confinement) for p in configs)
    if fw_before != fw_after:
        kinds = {"areal": "an AReaL config", "slime": "a slime launch script"}
        raise UserError(f"{configs[0]} is {kinds.get(fw_before, fw_before)} and {configs[1]} "
                        f"{kinds.get(fw_after, fw_after)}: compare two configs of the same framework")
    written_before, written_after = _settings(fw_before, before), _settings(fw_after, after)
    result = ConfigComparison(before=configs[0], after=configs[1], framework=fw_before)
    keys = list(dict.fromkeys([*written_before, *written_after]))
    result.compared = len(keys)
    for key in keys:
        ctx.check_time()
        old, old_line = written_before.get(key, (before.value(key), None))  # not written: its default
        new, new_line = written_after.get(key, (after.value(key), None))
        if old == new:
            continue
        if names_secret(key.rsplit(".", 1)[-1].lstrip("-")):  # a key, token or password: that it changed, not to what
            old, new = (None if v is None else REDACTED for v in (old, new))
        if len(result.changes) < MAX_CHANGES:
            result.changes.append(SettingChange(key, old, new, old_line, new_line))
        else:
            result.more += 1
    return result
