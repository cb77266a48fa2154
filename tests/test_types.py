"""The shared vocabulary: terminal text, the JSON form of citations, fixes and findings."""

from __future__ import annotations

import json

import pytest

from rlmedic.types import Citation, Finding, Fix


@pytest.mark.parametrize(
    ("citation", "text"),
    [
        (Citation.card("oom-actor-train"), "card:oom-actor-train"),
        (Citation.card("oom-actor-train", "AReaL: Troubleshooting"), "card:oom-actor-train (AReaL: Troubleshooting)"),
        (Citation.doc("docs/a.md", "Memory", (3, 9)), "docs/a.md § Memory (lines 3-9)"),
        (Citation.doc("docs/a.md"), "docs/a.md"),
        (Citation.log("rank0.log", 12), "rank0.log:12"),
        (Citation(kind="config", ref="run.yaml", lines=(4, 4)), "run.yaml:4"),
        (Citation(kind="issue", ref="inclusionAI/AReaL#123", section="OOM at start-up",
                  url="https://github.com/inclusionAI/AReaL/issues/123"), "inclusionAI/AReaL#123 § OOM at start-up"),
    ],
)
def test_citation_text_and_json(citation: Citation, text: str) -> None:
    assert str(citation) == text
    data = citation.to_dict()
    assert data == {"kind": citation.kind, "ref": citation.ref, "section": citation.section,
                    "lines": list(citation.lines) if citation.lines else None, "url": citation.url, "text": text}
    # the JSON form reads back into the same citation (``text`` is derived, not stored)
    assert Citation.from_dict(json.loads(json.dumps(data))) == citation


def test_citation_rejects_unknown_kinds_and_bad_line_ranges() -> None:
    with pytest.raises(ValueError, match="Citation.kind: 'web' is not one of card, doc"):
        Citation(kind="web", ref="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Citation.lines: expected two line numbers"):
        Citation(kind="doc", ref="x", lines=(None, None))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Citation.lines"):
        Citation(kind="doc", ref="x", lines=(3,))  # type: ignore[arg-type]
    # a JSON list reads back as the tuple it was
    assert Citation(kind="doc", ref="x", lines=[3, 9]).lines == (3, 9)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fix", "text"),
    [
        (Fix(op="set", key="actor.mb_spec.max_tokens_per_mb", old=1536, new=2048), "set actor.mb_spec.max_tokens_per_mb to 2048 (was 1536)"),
        (Fix(op="set", key="recover.mode", new="auto"), "set recover.mode to auto"),
        (Fix(op="add_flag", key="--use-dynamic-batch-size", new=True), "set --use-dynamic-batch-size to True"),
        (Fix(op="delete", key="allocation_mode", old="sglang.d4"), "remove allocation_mode"),
        (Fix(op="remove_flag", key="--no-load-optim"), "remove --no-load-optim"),
        (Fix(op="rename", key="actor.mb_spce", new="mb_spec"), "rename actor.mb_spce to mb_spec"),
        (Fix(op="action", why="kill 4121 before restarting"), "kill 4121 before restarting"),
        (Fix(action="Lower it (actor.mb_spec.max_tokens_per_mb=4096)", key="actor.mb_spec.max_tokens_per_mb", new=4096),
         "Lower it (actor.mb_spec.max_tokens_per_mb=4096)"),
    ],
)
def test_fix_text(fix: Fix, text: str) -> None:
    assert str(fix) == text
    assert fix.to_dict()["action"] == text


def test_fix_json_carries_the_change_contract_and_citation_objects() -> None:
    card = Citation.card("oom-actor-train", "AReaL: Troubleshooting")
    fix = Fix(op="set", key="k", old=1, new=2, why="fits", rule="r", citations=(card, Citation.doc("d.md")))
    data = fix.to_dict()
    assert {k: data[k] for k in ("key", "old", "new", "reason", "why", "rule", "op")} == {
        "key": "k", "old": 1, "new": 2, "reason": "fits", "why": "fits", "rule": "r", "op": "set"}
    assert data["citation"] == card.to_dict() and [c["text"] for c in data["citations"]] == [str(card), "d.md"]
    assert fix.citation == card and fix.reason == "fits"
    assert Fix(key="k").citation is None and Fix(key="k").to_dict()["citation"] is None


def test_finding_json_holds_every_documented_key() -> None:
    cite = Citation.log("train.log", 7)
    finding = Finding(id="cuda-oom", category="oom_training", severity="error", summary="CUDA out of memory",
                      file="train.log", line=7, key="actor.mb_spec.max_tokens_per_mb", rule="r",
                      fixes=[Fix(op="set", key="actor.mb_spec.max_tokens_per_mb", new=2048)], citations=[cite])
    data = json.loads(json.dumps(finding.to_dict()))
    # diagnose's contract and lint/fix-config's problem contract, in one shape
    assert {"id", "category", "severity", "file", "line", "evidence", "summary", "fixes", "citations"} <= set(data)
    assert {"key", "message", "severity", "citation"} <= set(data)
    assert data["message"] == data["summary"] == "CUDA out of memory"
    assert data["fixes"] == ["set actor.mb_spec.max_tokens_per_mb to 2048"] and data["fix_details"][0]["op"] == "set"
    assert data["citation"] == data["citations"][0] == cite.to_dict() and data["citation"]["text"] == "train.log:7"
    assert data["fixable"] is True and Finding(id="x", severity="info", summary="s").to_dict()["fixable"] is False


def test_finding_validates_severity_and_nested_objects() -> None:
    with pytest.raises(ValueError, match="Finding.severity: 'fatal' is not one of critical, error, warning, info"):
        Finding(id="x", severity="fatal", summary="s")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Finding(severity="info", summary="s")  # type: ignore[call-arg]  # id is required
    with pytest.raises(TypeError):
        Finding("x", "info", "s")  # type: ignore[misc]  # keywords only, as before
    with pytest.raises(ValueError, match="Fix.op: 'patch'"):
        Fix(op="patch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Finding.fixes: expected a list of Fix"):
        Finding(id="x", severity="info", summary="s", fixes="set k")  # type: ignore[arg-type]
    # nested JSON objects become the objects they describe; a fix's citations are a tuple (fixes are hashable)
    finding = Finding(id="x", severity="info", summary="s", fixes=[{"op": "set", "key": "k", "new": 2,
                                                                    "citations": [{"kind": "card", "ref": "c"}]}])
    assert finding.fixes == [Fix(op="set", key="k", new=2, citations=(Citation.card("c"),))]
    assert hash(finding.fixes[0]) == hash(Fix(op="set", key="k", new=2, citations=[Citation.card("c")]))
