"""Real cases from public issue threads (../shared/cases): one test per case.

Each case's root finding (or first finding) must have the thread's category and mention
every `must_mention` term; a `kind: log` case must also point at a line with an excerpt.
"""

from __future__ import annotations

import json

import pytest

from conftest import SHARED
from rlmedic.tools.logs.diagnose import diagnose_text

CASES_FILE = SHARED / "cases" / "dev_cases.jsonl"
CASES = [json.loads(line) for line in CASES_FILE.read_text().splitlines() if line.strip()] if CASES_FILE.is_file() else []


def test_the_case_file_is_there(shared) -> None:  # noqa: ANN001 - conftest fixture
    assert CASES, f"{CASES_FILE} is missing or empty"


# without ../shared, one placeholder that the `shared` fixture skips (an empty parameter set
# would skip with pytest's own, less clear reason)
@pytest.mark.parametrize("case", CASES or [None], ids=[c["id"] for c in CASES] or ["no-cases"])
def test_real_case(case: dict, shared) -> None:  # noqa: ANN001 - conftest fixture
    diag = diagnose_text(case["user_input"], case["id"])
    finding = diag.root_finding or (diag.findings[0] if diag.findings else None)
    assert finding is not None, f"{case['id']}: nothing found (expected {case['category']})"
    assert finding.category == case["category"], f"{case['id']}: {finding.id} is {finding.category}"
    text = json.dumps(finding.to_dict()).lower()
    missing = [t for t in case["must_mention"] if t.lower() not in text]
    assert not missing, f"{case['id']}: {finding.id} does not mention {missing}"
    if case["kind"] == "log":
        root = diag.root_finding
        assert root is not None and root.line and root.evidence["excerpt"], case["id"]
