"""The answer's parts alone: the case view, each section, and which fixes can apply (rlmedic.agent.fit)."""

from __future__ import annotations

from rlmedic.agent import sections as S
from rlmedic.agent.case import read_case
from rlmedic.agent.fit import APPLIED, CARD, LEADING, ROOT, Candidate, contradiction, direction, exact, rank
from rlmedic.agent.inquiry import Inquiry
from rlmedic.types import Citation, Evidence, Finding, Fix

EXCERPT = ("  49 | File \"actor.py\", line 312, in ppo_update\n  50 |     loss.backward()\n  51 | \n"
           "> 52 | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB\n  53 | after")


def oom(**kw) -> Finding:
    return Finding(id="cuda-oom", category="oom_training", severity="critical", summary="CUDA out of memory in training",
                   file="/runs/train.log", line=52, evidence={"excerpt": EXCERPT}, **kw)


def logs(*findings: Finding, **kw) -> Evidence:
    return Evidence(subject="logs", findings=list(findings), root=0 if findings else None, frameworks=["areal"],
                    checked="53 lines in 1 file(s)", **kw)


# ---------------------------------------------------------------------- fit


def test_a_fix_for_another_framework_or_an_invented_key_is_contradicted() -> None:
    assert contradiction(Fix(action="x", key="--sglang-mem-fraction-static", framework="slime"), "areal", {})
    assert contradiction(Fix(action="x", key="actor_rollout_ref.rollout.n"), "areal", {})
    assert "not a setting" in contradiction(Fix(action="x", key="actor.sglang.mem_fraction_static"), "areal", {})
    assert contradiction(Fix(action="x", key="sglang.mem_fraction_static"), "areal", {}) == ""
    # the config in hand decides: a legacy key it has is its own
    assert contradiction(Fix(action="x", key="actor.sglang.mem_fraction_static"), "areal",
                         {"actor.sglang.mem_fraction_static": 0.9}) == ""
    # an environment variable is not the config's to judge
    assert contradiction(Fix(action="Set NCCL_NVLS_ENABLE=0", key="NCCL_NVLS_ENABLE"), "slime", {}) == ""


def test_a_value_already_in_effect_or_past_the_proposal_is_contradicted() -> None:
    lower = Fix(action="Lower the share (sglang.mem_fraction_static=0.8)", key="sglang.mem_fraction_static", new=0.8)
    assert direction(lower) == "lower"
    assert "already 0.8" in contradiction(lower, "areal", {"sglang.mem_fraction_static": 0.8})
    assert "at or below" in contradiction(lower, "areal", {"sglang.mem_fraction_static": 0.7})
    assert contradiction(lower, "areal", {"sglang.mem_fraction_static": 0.9}) == ""
    on = Fix(action="Turn on gradient checkpointing", key="actor.gradient_checkpointing", new=True)
    assert contradiction(on, "areal", {"actor.gradient_checkpointing": True})
    assert contradiction(on, "areal", {"actor.gradient_checkpointing": False}) == ""
    mode = Fix(action="Enable recovery itself (recover.mode=auto)", key="recover.mode", new="auto")
    assert "already auto" in contradiction(mode, "areal", {"recover.mode": "auto"})


def test_an_exact_edit_starts_from_the_value_in_effect() -> None:
    fix = exact(Fix(action="Lower the share (sglang.mem_fraction_static=0.8)", key="sglang.mem_fraction_static",
                    new=0.8), {"sglang.mem_fraction_static": 0.9})
    assert str(fix) == "set sglang.mem_fraction_static to 0.8 (was 0.9)"
    raise_it = exact(Fix(action="Raise the generation limit (gconfig.max_new_tokens)", key="gconfig.max_new_tokens"),
                     {"gconfig.max_new_tokens": 1024})
    assert "(gconfig.max_new_tokens, now 1024)" in str(raise_it)


def test_ranking_puts_the_roots_applied_edit_first_and_unrelated_config_rules_after_the_roots_fixes() -> None:
    mb = Fix(op="set", key="actor.mb_spec.max_tokens_per_mb", old=10240, new=2048)
    timeout = Fix(op="set", key="rollout.request_timeout", old=3600, new=7200)
    root_fix = Fix(action="Use a lighter optimizer (actor.optimizer.type=adam_bf16)", key="actor.optimizer.type",
                   new="adam_bf16")
    known = Fix(action="Upgrade AReaL")
    card_dup = Fix(action="Lower the micro-batch (actor.mb_spec.max_tokens_per_mb=4096)",
                   key="actor.mb_spec.max_tokens_per_mb", new=4096)
    got, dropped = rank([Candidate(timeout, APPLIED), Candidate(mb, APPLIED, on_root=True),
                         Candidate(root_fix, ROOT, on_root=True), Candidate(known, LEADING),
                         Candidate(card_dup, CARD)], "areal", {}, has_root=True)
    assert [str(f) for f in got] == [str(mb), "Upgrade AReaL", str(root_fix), str(timeout)]
    assert dropped == []  # the card's second proposal for the same key is a duplicate, not a contradiction


# ---------------------------------------------------------------------- the case


def test_an_empty_log_makes_a_case_with_nothing_to_diagnose() -> None:
    empty = Evidence(subject="logs", findings=[Finding(id="empty-log", severity="warning", summary="empty",
                                                       file="/runs/train.log")], verdict="empty")
    case = read_case(Inquiry.of("why did my run die?"), [empty])
    assert case.nothing and not case.healthy and case.root is None
    text = [line.text for line in S.status(Inquiry.of("why?"), case).lines]
    assert text[0] == "Nothing to diagnose here: /runs/train.log is empty."
    assert [line.text for line in S.needs(Inquiry.of("why?"), case).lines][0].startswith(
        "To answer this exactly, attach the training log")


def test_findings_of_the_roots_kind_before_it_are_what_led_to_it() -> None:
    cap = Finding(id="response-length-cap", category="reward_collapse", severity="warning", file="/runs/t.log", line=77,
                  summary="seq_len/avg rose to its ceiling at step 8",
                  fixes=[Fix(action="Raise the limit (gconfig.max_new_tokens)", key="gconfig.max_new_tokens")])
    fell = Finding(id="reward-collapse", category="reward_collapse", severity="error", file="/runs/t.log", line=122,
                   summary="reward collapsed")
    config = Evidence(subject="config", settings={"gconfig.max_new_tokens": 1024})
    ev = Evidence(subject="logs", findings=[fell, cap], root=0, frameworks=["areal"])
    case = read_case(Inquiry.of("why did the reward fall?"), [ev, config])
    assert case.before_root == (cap,)
    section = S.failed(Inquiry.of("why?"), case)
    texts = [line.text for line in section.lines]
    assert texts[0] == "From the log: reward collapsed {cite}."
    assert texts[1] == "  Before it: seq_len/avg rose to its ceiling at step 8 {cite}."
    assert "  Your config: gconfig.max_new_tokens = 1024." in texts
    assert section.lines[0].cites == (Citation.log("/runs/t.log", 122),)


# ---------------------------------------------------------------------- sections


def test_the_marked_line_leads_the_evidence_then_at_most_two_lines_before_it_nearest_first() -> None:
    lines = S.evidence_lines(oom())
    assert lines[0] == "> train.log:52  torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB"
    assert lines[1:] == ["  train.log:50  loss.backward()", '  train.log:49  File "actor.py", line 312, in ppo_update']


def test_the_fixes_section_shows_five_and_folds_the_rest() -> None:
    case = read_case(Inquiry.of("why?"), [logs(oom())])
    fixes = [Fix(action=f"do thing {i}") for i in range(1, 8)]
    section = S.fixes(Inquiry.of("why?"), case, fixes, "")
    assert len([line for line in section.lines if line.text.startswith("  ")]) == 5
    assert [line.text for line in section.more] == ["  6. do thing 6", "  7. do thing 7"]


def test_a_follow_up_refers_to_the_thread_in_one_line() -> None:
    inq = Inquiry.of("and how do I resume?", history=[{"question": "why?", "summary": "CUDA out of memory"}])
    assert [line.text for line in S.earlier(inq, read_case(inq, [])).lines] == [
        "Earlier in this thread: CUDA out of memory."]
    assert not S.earlier(Inquiry.of("why?"), read_case(Inquiry.of("why?"), []))
