"""The reward design check: it must catch the seed's gameable ordering, for any weights, and clear on the fix."""

from __future__ import annotations

from grpo_playground.rewards import DEFAULT_WEIGHTS, check_design
from grpo_playground.tags import Tags

STRICT_SET = {"match_format_approximately": 1.0, "check_answer_strict_nomatch": 1.0, "check_numbers": 1.0}


def test_seed_set_is_flagged_as_gameable_and_the_fix_is_named():
    report = check_design(DEFAULT_WEIGHTS)
    # The recipe's measured failure: running on after </SOLUTION> (-2.0 total) beats a clean wrong answer (-2.5).
    assert report.totals["runs_on"] == -2.0 and report.totals["wrong"] == -2.5
    assert not report.ok
    warnings = [f.message for f in report.findings if f.severity == "warning"]
    assert any("keeps writing after the closing tag" in m and "-2, not less than" in m for m in warnings)
    assert any("replace check_answer with check_answer_strict_nomatch" in m and "every such completion" in m
               for m in warnings)


def test_registered_variant_removes_the_incentive():
    report = check_design(STRICT_SET)
    assert report.ok, report.findings
    assert report.totals["runs_on"] < report.totals["wrong"]
    assert max(report.totals, key=report.totals.get) == "correct"


def test_the_check_follows_custom_weights():
    # A strict-format bonus of 0.25 is smaller than the 0.5 that running on gains: still gameable ...
    small = check_design({**DEFAULT_WEIGHTS, "match_format_exactly": 0.25})
    assert not small.ok and small.totals["wrong"] == -2.25
    # ... a bonus of 1.0 makes a clean ending pay, even with the seed's check_answer.
    assert check_design({**DEFAULT_WEIGHTS, "match_format_exactly": 1.0}).ok
    # Turning the variant's weight to 0 brings the tie back: not answering no longer costs anything.
    assert not check_design({**STRICT_SET, "check_answer_strict_nomatch": 0.0}).ok


def test_format_only_set_and_flat_set_are_warned_about():
    format_only = check_design({"match_format_approximately": 1.0})
    assert any("No enabled reward checks the answer" in f.message for f in format_only.findings)
    flat = check_design({"check_answer": 0.0})
    assert any("cannot tell completions apart" in f.message for f in flat.findings)


def test_negative_weight_that_rewards_wrong_answers_is_caught():
    report = check_design({"check_answer": -1.0})
    assert any("The correct answer is not the best-scoring completion" in f.message for f in report.findings)


def test_near_miss_share_is_reported_when_near_misses_pay_like_exact_answers():
    report = check_design({"check_answer_strict_nomatch": 1.0})
    # check_answer alone: near miss +2.0, wrong -2.5, exact +5.0: 60% of the lead.
    assert any(f.severity == "info" and "near miss earns 60%" in f.message for f in report.findings)


def test_probes_use_the_current_tags():
    tags = Tags(reasoning_end="</think>", solution_start="<answer>", solution_end="</answer>")
    report = check_design(DEFAULT_WEIGHTS, tags)
    assert report.totals["correct"] == 10.0 and report.totals["runs_on"] == -2.0


def test_a_correct_answer_with_its_unit_scoring_below_a_wrong_number_is_flagged():
    # check_answer alone: "42 apples" for 42 is no number to compare, -4.5, below a clean wrong "13" (-2.5)
    report = check_design({"check_answer": 1.0})
    assert report.totals["correct_with_unit"] < report.totals["wrong"]
    assert any(f.severity == "warning" and "'42 apples' for 42" in f.message and "check_numbers" in f.message
               for f in report.findings)
    # check_numbers reads the 42 inside the answer: right-with-a-unit then beats wrong, nothing to flag
    fixed = check_design(STRICT_SET)
    assert fixed.totals["correct_with_unit"] > fixed.totals["wrong"]
    assert not any("'42 apples'" in f.message for f in fixed.findings)
