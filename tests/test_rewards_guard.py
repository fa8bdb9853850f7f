"""Untrusted input bounds: request size limits with clear errors, patterns that stay linear, a CPU budget per request."""

from __future__ import annotations

import random
import time

import pytest
import regex

from grpo_playground.rewards import MAX_COMPLETIONS, MAX_TOTAL_CHARS, RewardInputError, score_group
from grpo_playground.rewards.guard import cpu_budget
from grpo_playground.rewards.patterns import patterns_for
from grpo_playground.tags import Tags


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


def _seed_patterns(tags: Tags) -> tuple[regex.Pattern, regex.Pattern]:
    """The seed's regexes verbatim (Unsloth Qwen3 GRPO notebook): what the linear matcher must agree with."""
    re_, ss, se = (regex.escape(x) for x in (tags.reasoning_end, tags.solution_start, tags.solution_end))
    flags = regex.MULTILINE | regex.DOTALL
    return (regex.compile(rf"{re_}.*?{ss}(.+?){se}[\s]{{0,}}$", flags),
            regex.compile(ss + r".*?[\s]{0,}([-]?[\d\.\,]{1,})", flags))


def _capture(found) -> tuple[str, int, int] | None:
    if found is None:
        return None
    if isinstance(found, regex.Match):
        return found.group(1), *found.span(1)
    return found.text, found.start, found.end


def test_linear_patterns_match_exactly_what_the_seed_regexes_match():
    # Short random texts over an alphabet of tag letters, spaces, newlines and number characters, with tags
    # that overlap themselves and each other: the cases where a hand-written matcher would drift.
    rng = random.Random(0)
    tag_sets = [("a", "b", "c"), ("ab", "b", "ba"), ("aa", "a ", "a\n"), ("a", "aa", "aaa"), ("x", "1", "-"),
                ("<end_working_out>", "<SOLUTION>", "</SOLUTION>")]
    for trial in range(6_000):
        chosen = rng.choice(tag_sets) if trial % 2 else tuple(
            "".join(rng.choice("ab x1\n") for _ in range(rng.randint(1, 3))) for _ in range(3))
        try:
            tags = Tags("s", *chosen)
        except ValueError:
            continue  # blank or equal tags: refused by Tags itself
        alphabet = "ab \n1-.,x\t" if len(chosen[0]) < 5 else ["<end_working_out>", "<SOLUTION>", "</SOLUTION>", "4", " ", "\n", "x"]
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))
        strict, numbers = _seed_patterns(tags)
        linear = patterns_for(tags)
        assert _capture(linear.strict_search(text)) == _capture(strict.search(text)), (chosen, text)
        assert _capture(linear.number_search(text)) == _capture(numbers.search(text)), (chosen, text)


def test_one_letter_tags_and_repeated_tags_cost_milliseconds():
    # Before: reasoning_end `a`, solution_start `b`, solution_end `c` and "abb" * 1039 ran the strict and the
    # number regex to their 0.25 s timeout each: 64 of them, one /score, ~20 s of server time.
    tags = Tags("s", "a", "b", "c")
    start = time.thread_time()
    group = score_group(["abb" * 1039] * MAX_COMPLETIONS, "42", tags=tags)
    assert time.thread_time() - start < 1.0  # measured: ~30 ms here
    assert group.completions[0].reasons["check_answer"].startswith("no answer extracted")
    hostile = "<end_working_out><SOLUTION>" * 7_000 + "x"  # cubic for the seed's regex: hours without a timeout
    start = time.thread_time()
    group = score_group([hostile, "<end_working_out><SOLUTION>42</SOLUTION>"], "42")
    assert time.thread_time() - start < 1.0
    assert [c.scores["check_answer"] for c in group.completions] == [-2.0, 5.0]


def test_a_request_stops_at_its_cpu_budget():
    # The backstop behind the linear patterns: past its budget a request is refused, not served for minutes.
    with cpu_budget(0.0), pytest.raises(RewardInputError, match="used its 0 s of scoring time after 0 of 3"):
        score_group(["<SOLUTION>1</SOLUTION>"] * 3, "1")
    assert len(score_group(["<SOLUTION>1</SOLUTION>"] * 3, "1").completions) == 3  # no budget outside the block


def test_100k_repeated_solution_tags_answer_quickly():
    hostile = "<SOLUTION>" * 19_000  # 190,000 characters: just under the request limit
    start = time.thread_time()
    group = score_group([hostile], "42")
    assert time.thread_time() - start < 1.0
    assert group.completions[0].tag_counts["<SOLUTION>"] == 19_000
    assert len(group.completions[0].marks) <= 100  # marks sent to a browser are capped too


def test_a_large_request_waits_its_turn_in_the_lane_and_is_told_busy_while_a_small_one_goes_on():
    """Over LARGE_REQUEST_CHARS a request takes the one lane or, after LANE_WAIT_S, is refused as busy (deploy.md,
    rewards.md); a small request never waits for the lane."""
    import threading

    from grpo_playground.rewards import scoring_request as requests

    holding, release = threading.Event(), threading.Event()

    def hold_the_lane():
        with requests.scoring_request(requests.LARGE_REQUEST_CHARS + 1):
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_lane)
    holder.start()
    try:
        assert holding.wait(10)
        started = time.monotonic()
        with pytest.raises(RewardInputError, match="busy: other large requests"):
            with requests.scoring_request(requests.LARGE_REQUEST_CHARS + 1):
                pass
        assert requests.LANE_WAIT_S - 0.1 < time.monotonic() - started < requests.LANE_WAIT_S + 2
        started = time.monotonic()
        with requests.scoring_request(requests.LARGE_REQUEST_CHARS):  # at the limit: not large
            assert time.monotonic() - started < 0.5
    finally:
        release.set()
        holder.join(10)
    with requests.scoring_request(requests.LARGE_REQUEST_CHARS + 1):  # the lane is free again
        pass
