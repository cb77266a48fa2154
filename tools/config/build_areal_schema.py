"""Build ``areal_schema.json`` from AReaL's configuration reference (development time only).

AReaL documents every config dataclass as a Markdown table in ``docs/en/cli_reference.md``
(one ``## <Name> Configuration`` section per class, preceded by a ``(section-<anchor>)=``
label). This script turns those tables into a small JSON schema that rlmedic ships as
package data, so the product never reads the docs at run time::

    python tools/config/build_areal_schema.py ../shared/corpus/areal/en/cli_reference.md \
        -o tools/config/areal_schema.json

Re-run it when AReaL's reference changes and commit the result; ``tests/test_config_schema.py``
checks that the shipped file is what this script produces from the shared corpus.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

#: Experiment-level sections: the union of their fields is the top level of a YAML file.
ROOT_SECTIONS = ("base-experiment", "grpo", "ppo", "rw", "sft", "dpo")

#: Fields typed as a bare ``tuple`` in the reference hold lists of scheduling specs.
TUPLE_ITEM_SECTION = {"scheduling_spec": "scheduling"}

_ANCHOR = re.compile(r"^\(section-([a-z0-9-]+)\)=\s*$")
_HEADING = re.compile(r"^## (.+?)\s*$")
_LINK = re.compile(r"\[`([^`]+)`\]\(section-([a-z0-9-]+)\)")
_CHOICES = re.compile(r"\*\*Choices:\*\*\s*(.+?)\s*$")
#: "Replaces the removed ``a`` and ``b``": field names a section's class took over.
_REMOVED = re.compile(r"removed\s+((?:``\w+``(?:\s*(?:,|and)\s*)*)+)")


def _split_row(line: str) -> list[str]:
    """Split a Markdown table row on unescaped pipes; ``\\|`` stays a literal pipe."""
    cells, current, i = [], [], 0
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            current.append("|")
            i += 2
            continue
        if body[i] == "|":
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(body[i])
        i += 1
    cells.append("".join(current).strip())
    return cells


def _parse_default(text: str) -> tuple[bool, Any]:
    """Return (required, default) from a Default cell such as ``"fa3"``, ``0.9``, **Required**."""
    if text == "**Required**":
        return True, None
    if text.startswith("`") and text.endswith("`"):
        text = text[1:-1]
    if text == "None":
        return False, None
    if text in ("True", "False"):
        return False, text == "True"
    if text.startswith('"') and text.endswith('"'):
        return False, text[1:-1]
    try:
        return False, int(text)
    except ValueError:
        pass
    try:
        return False, float(text)
    except ValueError:
        return False, text


def _parse_type(text: str) -> dict[str, Any]:
    """Type cell -> {"type": kind, "section": anchor?, "nullable": bool}."""
    nullable = bool(re.search(r"\|\s*None\s*$", text))
    core = re.sub(r"\s*\|\s*None\s*$", "", text).strip()
    link = _LINK.search(core)
    if link:
        return {"type": "object", "class": link.group(1), "section": link.group(2), "nullable": nullable}
    core = core.strip("`")
    kinds = {
        "string": "string",
        "boolean": "boolean",
        "integer": "integer",
        "float": "float",
        "dict": "dict",
        "tuple": "list",
        "list of string": "list",
        "list of integer": "list",
        "list of float": "list",
    }
    return {"type": kinds.get(core, "any"), "nullable": nullable}


def parse_reference(text: str) -> dict[str, Any]:
    """Parse the reference Markdown into ``{"sections": {anchor: {...}}}``."""
    sections: dict[str, dict[str, Any]] = {}
    anchor: str | None = None
    current: dict[str, Any] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _ANCHOR.match(line)
        if match:
            anchor = match.group(1)
            current = None
            continue
        match = _HEADING.match(line)
        if match:
            if anchor:
                current = {"title": match.group(1), "line": number, "fields": {}}
                sections[anchor] = current
            anchor = None
            continue
        if current is None:
            continue
        if not line.startswith("| `"):
            for group in _REMOVED.findall(line):
                current.setdefault("replaces_removed", []).extend(re.findall(r"``(\w+)``", group))
            continue
        cells = _split_row(line)
        if len(cells) < 3:
            continue
        name = cells[0].strip("`")
        field: dict[str, Any] = _parse_type(cells[1])
        required, default = _parse_default(cells[2])
        field["required"] = required
        field["default"] = default
        description = cells[3] if len(cells) > 3 else ""
        choices = _CHOICES.search(description)
        if choices:
            field["choices"] = re.findall(r"`([^`]+)`", choices.group(1))
        if name in TUPLE_ITEM_SECTION and field["type"] == "list":
            field["items_section"] = TUPLE_ITEM_SECTION[name]
        field["line"] = number
        current["fields"][name] = field
    return {"sections": sections}


def build(reference: Path) -> dict[str, Any]:
    parsed = parse_reference(reference.read_text(encoding="utf-8"))
    sections = parsed["sections"]
    missing = [s for s in ROOT_SECTIONS if s not in sections]
    if missing:
        raise SystemExit(f"{reference}: missing experiment section(s) {', '.join(missing)}")
    dangling = sorted(
        {
            f.get("section") or f.get("items_section")
            for s in sections.values()
            for f in s["fields"].values()
            if (f.get("section") or f.get("items_section")) and (f.get("section") or f.get("items_section")) not in sections
        }
    )
    if dangling:
        raise SystemExit(f"{reference}: links to undocumented section(s) {', '.join(dangling)}")
    return {
        "source": "AReaL docs/en/cli_reference.md",
        "generated_by": "tools/config/build_areal_schema.py",
        "root_sections": list(ROOT_SECTIONS),
        "sections": sections,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path, help="path to AReaL's docs/en/cli_reference.md")
    parser.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    data = build(args.reference)
    text = json.dumps(data, indent=1, sort_keys=False, ensure_ascii=False) + "\n"
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
