"""Test isolation: no network, no telemetry, no user data dir.

Every test gets its own ``RLMEDIC_HOME`` so nothing touches the user's index.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "ANONYMIZED_TELEMETRY": "False",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_key, _value)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("rlmedic-home")
    monkeypatch.setenv("RLMEDIC_HOME", str(home))
    monkeypatch.delenv("RLMEDIC_ALLOWED_ROOTS", raising=False)
    # setenv (not delenv) so that a value set in-process (`--chroma-url` through CliRunner)
    # is undone after the test: delenv of an absent variable records nothing to restore
    for key in ("RLMEDIC_CHROMA_URL", "RLMEDIC_BASE_URL", "RLMEDIC_MODEL", "RLMEDIC_API_KEY"):
        monkeypatch.setenv(key, "")
    return home


#: The one reason every check against upstream sources gives when ``../shared`` is absent.
SHARED_MISSING = (
    "../shared (upstream docs, configs and real cases) is not beside the repo: "
    "checks against upstream sources run where it is (CI)"
)


@pytest.fixture(scope="session")
def shared() -> Path:
    """``../shared`` beside the repo (seeds, corpus, cases): upstream test data only.

    A fresh clone has no ``../shared``: the checks that regenerate or compare against
    upstream sources skip then, all from this one line with one reason, so a clone
    passes; everything else the suite needs lives in ``tests/``.
    """
    if not SHARED.is_dir():
        pytest.skip(SHARED_MISSING)
    return SHARED


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """Every skip for a missing ``../shared`` is reported at the one place that decides it, so the
    summary shows one line (``SKIPPED [18] tests/conftest.py:...``), not one per test."""
    outcome = yield
    report = outcome.get_result()
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3 and str(longrepr[2]).endswith(SHARED_MISSING):
        report.longrepr = (__file__, _SKIP_LINE, longrepr[2])


#: The line of the skip above (1-based, as pytest shows it).
_SKIP_LINE = next(n for n, line in enumerate(Path(__file__).read_text().splitlines(), 1) if "pytest.skip(SHARED_MISSING)" in line)


def _anywhere():
    from rlmedic.confine import Confinement

    return Confinement(roots=[Path("/")])


#: The confinement of a trusted caller (a unit test): every path may be read. Tools never
#: build one themselves; front doors pass the user's roots (see tests/test_registry.py).
ANYWHERE = _anywhere()
