"""Untrusted input bounds: request size limits with clear errors, and regex work that cannot hang a request."""

from __future__ import annotations

import time

import pytest

from grpo_playground.rewards import MAX_COMPLETIONS, MAX_TOTAL_CHARS, RewardInputError, score_group
from grpo_playground.rewards.guard import REGEX_TIMEOUT_S
from grpo_playground.rewards.patterns import patterns_for
from grpo_playground.tags import DEFAULT_TAGS


@pytest.mark.parametrize(
    "completions,answer,message",
    [
        ([], "42", "paste at least one"),
        (["x"] * (MAX_COMPLETIONS + 1), "42", f"65 completions in one request: the limit is {MAX_COMPLETIONS}"),
        (["x" * (MAX_TOTAL_CHARS // 2 + 1)] * 2, "42", "the limit is 200,000 per request"),
        (["x"], "4" * 2000, "the gold answer is 2,000 characters long"),
    ],
)
def test_request_limits_give_clear_errors(completions, answer, message):
    with pytest.raises(RewardInputError, match=message):
        score_group(completions, answer)


def test_limits_themselves_are_accepted():
    group = score_group(["x" * (MAX_TOTAL_CHARS // MAX_COMPLETIONS)] * MAX_COMPLETIONS, "42")
    assert len(group.completions) == MAX_COMPLETIONS


def test_redos_input_is_cut_off_not_hung():
    # 7,000 repeated tag pairs (189,000 characters) make the seed's strict pattern backtrack cubically: the stdlib re would
    # run for hours. The bounded search gives up after REGEX_TIMEOUT_S and the score says so.
    hostile = "<end_working_out><SOLUTION>" * 7_000 + "x"
    assert patterns_for(DEFAULT_TAGS).strict_search(hostile).timed_out
    start = time.monotonic()
    group = score_group([hostile, "<end_working_out><SOLUTION>42</SOLUTION>"], "42")
    assert time.monotonic() - start < 10 * REGEX_TIMEOUT_S + 2
    assert "gave up" in group.completions[0].reasons["check_answer"]
    assert group.completions[0].scores["check_answer"] == -2.0  # counted as no match
    assert group.completions[1].scores["check_answer"] == 5.0  # the rest of the group is unharmed


def test_100k_repeated_solution_tags_answer_quickly():
    hostile = "<SOLUTION>" * 19_000  # 190,000 characters: just under the request limit
    start = time.monotonic()
    group = score_group([hostile], "42")
    assert time.monotonic() - start < 10 * REGEX_TIMEOUT_S + 2
    assert group.completions[0].tag_counts["<SOLUTION>"] == 19_000
    assert len(group.completions[0].marks) <= 100  # marks sent to a browser are capped too
