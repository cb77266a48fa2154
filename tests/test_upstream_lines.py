"""The answer lines for upstream fixes, alone: versions from every piece of evidence re-judge each match."""

from __future__ import annotations

from rlmedic.agent.events import Answer
from rlmedic.agent.upstream import apply_upstream, judged, upstream_lines, versions_of
from rlmedic.types import Evidence, UpstreamFix


def fix(pr: int, *, release: str = "v0.8.0", score: float = 1.5, strong: bool = True, **kw) -> UpstreamFix:
    return UpstreamFix(repo="verl-project/verl", commit=f"{pr:040d}", subject=f"[actor] fix: thing {pr} (#{pr})", pr=pr,
                       date="2026-01-02", release=release, matched="function verl/workers/actor.py:update_policy",
                       score=score, package="verl", strong=strong, **kw)


def logs(*fixes: UpstreamFix, versions: dict[str, str] | None = None) -> Evidence:
    return Evidence(subject="logs", upstream_fixes=list(fixes), versions=versions or {})


def lines_of(evidence: list[Evidence]) -> tuple[list[str], Answer]:
    answer = Answer(answer="")
    return upstream_lines(evidence, answer.cite), answer


def test_the_fix_after_the_users_release_leads_with_what_to_do() -> None:
    lines, answer = lines_of([logs(fix(7001)), Evidence(subject="env", versions={"verl": "0.7.0"})])
    assert lines[0] == ("Fixed upstream after your verl 0.7.0: verl-project/verl#7001 '[actor] fix: thing 7001 (#7001)' "
                        "(merged 2026-01-02, in v0.8.0) [1].")
    assert lines[2] == "  Do: upgrade verl to 0.8.0 or later, or apply that change to your copy."
    assert answer.citations[0].url == "https://github.com/verl-project/verl/pull/7001"


def test_an_unreleased_fix_says_install_from_main_or_apply_it() -> None:
    lines, _ = lines_of([logs(fix(7002, release=""), versions={"verl": "0.8.0"})])
    assert "not released yet" in lines[0] and "git cherry-pick 0000000000" in lines[2]


def test_a_listing_beats_a_banner_and_a_fix_already_in_points_elsewhere() -> None:
    evidence = [logs(fix(7001), versions={"verl": "0.7.0"}), Evidence(subject="env", versions={"verl": "0.8.1"})]
    assert versions_of(evidence) == {"verl": "0.8.1"}
    lines, _ = lines_of(evidence)
    assert lines[0].startswith("Already fixed in your verl 0.8.1: verl-project/verl#7001") and "elsewhere" in lines[0]
    assert judged(evidence)[0].status == "in_yours"


def test_unknown_version_hedges_and_weak_matches_only_get_mentioned() -> None:
    lines, _ = lines_of([logs(fix(7003), fix(7004, score=0.7, strong=False), fix(7005, score=0.2, strong=False))])
    assert lines[0].startswith("Likely fixed upstream: verl-project/verl#7003")
    assert "if your verl is older than 0.8.0" in lines[2]
    assert lines[3].startswith("Possibly related upstream change: verl-project/verl#7004")
    assert not any("#7005" in line for line in lines)


def test_nothing_strong_leads_nothing_and_duplicates_merge() -> None:
    lines, _ = lines_of([logs(fix(7004, score=0.3, strong=False))])
    assert lines == []
    answer = Answer(answer="")
    apply_upstream(answer, [logs(fix(7001, score=1.0)), logs(fix(7001, score=1.4))])
    assert [f["pr"] for f in answer.upstream_fixes] == [7001] and answer.upstream_fixes[0]["score"] == 1.4


def test_section_puts_the_lead_in_the_short_answer_and_the_rest_in_more() -> None:
    from rlmedic.agent.upstream import section

    s = section([logs(fix(7001), fix(7004, score=0.7, strong=False)), Evidence(subject="env", versions={"verl": "0.7.0"})])
    assert s.name == "upstream" and s.lines[0].text.startswith("Fixed upstream after your verl 0.7.0: verl-project/verl#7001")
    assert "{cite}" in s.lines[0].text and s.lines[0].cites[0].url.endswith("/pull/7001")
    assert len(s.lines) == 3 and s.more[0].text.startswith("Possibly related upstream change: verl-project/verl#7004")
    assert not section([logs()])
