"""The real cases the benchmarks measure: the shared dev cases (when ../shared is there) and the
mined cases under tests/data/known_cases/ with their dev / held-out split."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_CASES = ROOT.parent / "shared" / "cases" / "dev_cases.jsonl"
KNOWN_CASES = ROOT / "tests" / "data" / "known_cases"


def load_cases() -> list[dict]:
    cases = []
    if SHARED_CASES.is_file():
        for line in SHARED_CASES.read_text().splitlines():
            if line.strip():
                cases.append({**json.loads(line), "split": "dev", "from": "shared"})
    for path in sorted(KNOWN_CASES.glob("*.jsonl")) if KNOWN_CASES.is_dir() else []:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                case = json.loads(line)
            except json.JSONDecodeError:
                print(f"{path.name}:{n}: not JSON, skipped", file=sys.stderr)
                continue
            if case.get("split") in ("dev", "heldout") and case.get("user_input") and case.get("category"):
                cases.append({**case, "from": path.name})
    return cases
