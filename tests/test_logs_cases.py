"""Real cases from public issue threads (../shared/cases): category and must_mention.

The score is printed (run with -s) and held to a floor: most `kind: log` cases must be
right on both counts, and a clear majority of all cases.
"""

from __future__ import annotations

import json

import pytest

from conftest import SHARED
from rlmedic.tools.logs.diagnose import diagnose_text

CASES = SHARED / "cases" / "dev_cases.jsonl"


def _score(case: dict) -> tuple[bool, bool]:
    diag = diagnose_text(case["user_input"], case["id"])
    finding = diag.root_finding or (diag.findings[0] if diag.findings else None)
    if finding is None:
        return False, False
    text = json.dumps(finding.to_dict()).lower()
    return finding.category == case["category"], all(t.lower() in text for t in case["must_mention"])


def test_real_cases(shared) -> None:  # noqa: ANN001 - conftest fixture
    cases = [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]
    assert cases
    results = {c["id"]: (c["kind"], *_score(c)) for c in cases}
    logs = [r for r in results.values() if r[0] == "log"]
    log_cat = sum(r[1] for r in logs)
    log_mm = sum(r[2] for r in logs)
    all_cat = sum(r[1] for r in results.values())
    all_mm = sum(r[2] for r in results.values())
    print(
        f"\nreal cases: log {log_cat}/{len(logs)} category, {log_mm}/{len(logs)} must_mention; "
        f"all {all_cat}/{len(cases)} category, {all_mm}/{len(cases)} must_mention"
    )
    misses = {k: v for k, v in results.items() if not (v[1] and v[2])}
    assert log_cat >= 0.8 * len(logs) and log_mm >= 0.8 * len(logs), misses
    assert all_cat >= 0.6 * len(cases) and all_mm >= 0.6 * len(cases), misses


@pytest.mark.parametrize("kind", ["log"])
def test_log_cases_point_at_a_line(shared, kind: str) -> None:  # noqa: ANN001
    for line in CASES.read_text().splitlines():
        case = json.loads(line)
        if case["kind"] != kind:
            continue
        root = diagnose_text(case["user_input"], case["id"]).root_finding
        assert root is not None, case["id"]
        assert root.line and root.evidence["excerpt"], case["id"]
