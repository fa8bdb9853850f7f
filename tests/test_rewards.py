"""Every score band of the seed's four reward functions, one table per function, each case saying why.

The expected values are the seed's (Unsloth Qwen3 GRPO notebook / recipe.md), quirks included: the
product must score exactly what the recipe it teaches scores.
"""

from __future__ import annotations

import pickle

import pytest

from grpo_playground.rewards import (
    DEFAULT_WEIGHTS,
    REWARDS,
    check_answer,
    check_answer_strict_nomatch,
    check_numbers,
    get_check_answer_reward,
    get_reward_funcs,
    match_format_approximately,
    match_format_exactly,
)
from grpo_playground.rewards.guard import RewardInputError
from grpo_playground.tags import Tags

W = "<start_working_out>6 x 7 = 42<end_working_out>"  # a well-formed reasoning part
S, E = "<SOLUTION>", "</SOLUTION>"


def score(fn, text: str, gold: str = "42") -> float:
    return fn(None, [[{"role": "assistant", "content": text}]], [gold])[0]


MATCH_FORMAT_EXACTLY = [
    (W + S + "42" + E, 1.0),  # the seed's value for a strict match
    (W + S + "42" + E + "  \n\n", 1.0),  # trailing whitespace is allowed by [\s]{0,}$
    ("6 x 7<end_working_out>" + S + "42" + E, 1.0),  # prefilled opening tag: the pattern does not need it
    (W + S + "42" + E + " done", 0.0),  # text after the answer on the same line: $ does not match
    (W + S + "42" + E + "\nmore text", 1.0),  # MULTILINE: $ matches before the newline, so text on a new line passes
    (W + S + "42", 0.0),  # truncated: the solution tag never closed
    ("<start_working_out>6 x 7 = 42" + S + "42" + E, 0.0),  # no reasoning end before the solution
    (W + S + E, 0.0),  # (.+?) needs at least one character between the solution tags
    ("", 0.0),  # empty output
    (W + "<solution>42</solution>", 0.0),  # the seed's story: the model wrote the tag in other capitals
]


@pytest.mark.parametrize("text,expected", MATCH_FORMAT_EXACTLY)
def test_match_format_exactly(text, expected):
    assert score(match_format_exactly, text) == expected


MATCH_FORMAT_APPROXIMATELY = [
    (W + S + "42" + E, 1.5),  # each of the three counted tags once: 3 x 0.5
    ("6 x 7<end_working_out>" + S + "42" + E, 1.5),  # prefilled opening tag is not counted
    ("<start_working_out>" * 2 + "x<end_working_out>" + S + "42" + E, 1.5),  # nor is a repeated opening tag
    ("<start_working_out>6 x 7" + S + "42" + E, 0.0),  # reasoning end missing: 0.5 + 0.5 - 1.0
    (W + S + "42", 0.0),  # truncated before </SOLUTION>: 0.5 + 0.5 - 1.0
    (W + S + "42" + E + E, 0.0),  # closing tag twice: "exactly once" fails for it
    (W + S + "1" + E + "<end_working_out>" + S + "2" + E, -3.0),  # every tag twice: -1.0 each
    ("", -3.0),  # empty output: no tag at all
    ("the answer is 42", -3.0),  # plain prose, the untrained model's usual output
]


@pytest.mark.parametrize("text,expected", MATCH_FORMAT_APPROXIMATELY)
def test_match_format_approximately(text, expected):
    assert score(match_format_approximately, text) == expected


CHECK_ANSWER = [
    (W + S + "42" + E, "42", 5.0),  # exact string
    (W + S + " 42 " + E, "42", 3.5),  # equal after strip
    (W + S + "\n42\n" + E, "42", 3.5),  # newlines inside the tags are stripped too
    (W + S + "41" + E, "42", 2.0),  # ratio 0.976: within 10%
    (W + S + "9" + E, "10", 2.0),  # ratio exactly 0.9: the band is inclusive
    (W + S + "11" + E, "10", 2.0),  # ratio 1.1: inclusive upper edge
    (W + S + "35" + E, "42", 1.5),  # ratio 0.833: within 20%
    (W + S + "12" + E, "10", 1.5),  # ratio exactly 1.2: inclusive
    (W + S + "7" + E, "42", -2.5),  # a clean wrong number
    (W + S + "2.50" + E, "2.5", 2.0),  # decimals: same value, different string -> only the 10% band (seed quirk)
    (W + S + "-10" + E, "-10", 5.0),  # negative, exact
    (W + S + "-9" + E, "-10", 2.0),  # negative near miss: ratio 0.9
    (W + S + "10" + E, "-10", -2.5),  # sign flipped: ratio -1
    (W + S + "1,600" + E, "1600", -4.5),  # float("1,600") fails: commas cost the most (seed quirk)
    (W + S + "1,600" + E, "1,600", 5.0),  # ... unless the gold has the same commas
    (W + S + "42 apples" + E, "42", -4.5),  # units make it not a number
    (W + S + "$42" + E, "42", -4.5),  # a currency sign too
    (W + S + "forty-two" + E, "42", -4.5),  # words are not numbers
    (W + S + "1" + E, "0", -4.5),  # gold 0: division by zero
    (W + S + "0" + E, "0", 5.0),  # ... but an exact 0 is still exact
    (W + S + "42", "42", -2.0),  # truncated: no strict match, whatever the number
    (W + S + "42" + E + " I think", "42", -2.0),  # text after the answer on the same line: no match
    (W + S + "7" + E + "\n" + W + S + "42" + E, "42", -2.5),  # repeated answers: the first strict match counts
    ("6 x 7<end_working_out>" + S + "42" + E, "42", 5.0),  # prefilled opening tag
    (W + S + E, "42", -2.0),  # empty between the tags: (.+?) cannot match
    (W + S + "   " + E, "42", -4.5),  # only spaces between the tags: matched, but not a number
    ("", "42", -2.0),  # empty output
]


@pytest.mark.parametrize("text,gold,expected", CHECK_ANSWER)
def test_check_answer(text, gold, expected):
    assert score(check_answer, text, gold) == expected


@pytest.mark.parametrize("text,gold,expected", CHECK_ANSWER)
def test_check_answer_strict_nomatch_only_moves_no_match(text, gold, expected):
    # The variant keeps every band except no match, which drops below the worst wrong number (-2.5).
    assert score(check_answer_strict_nomatch, text, gold) == (-3.0 if expected == -2.0 else expected)


CHECK_NUMBERS = [
    (W + S + "42" + E, "42", 3.5),  # equal
    (W + S + "The answer is 42." + E, "42", 3.5),  # first number after the tag, trailing period kept: "42." parses
    (W + S + "42.0" + E, "42", 3.5),  # decimals compare as floats
    (W + S + "1,600" + E, "1600", 3.5),  # commas are removed from the guess
    (W + S + "1,600" + E, "1,600", 0.0),  # but not from the gold: float("1,600") fails -> 0
    (W + S + "-10" + E, "-10", 3.5),  # negative numbers keep their sign
    (W + S + "- 10" + E, "-10", -1.5),  # a space after the minus loses it: 10 != -10
    (W + S + "42 apples", "42", 3.5),  # units after the number and no closing tag: the number is still read
    (W + S + "41" + E, "42", -1.5),  # different number
    (W + S + "7" + E + " and 42", "42", -1.5),  # only the first number after the tag counts
    (W + S + "3.5.2" + E, "42", 0.0),  # unparsable number: 0
    (W + S + ". 42" + E, "42", 0.0),  # a lone period is captured as the "number" and fails to parse
    (W + S + "forty-two" + E, "42", -2.5),  # no digit after the tag
    ("42 " + S + "x" + E, "42", -2.5),  # a number before the tag is not read
    ("the answer is 42", "42", -2.5),  # no tag at all
    ("", "42", -2.5),  # empty output
]


@pytest.mark.parametrize("text,gold,expected", CHECK_NUMBERS)
def test_check_numbers(text, gold, expected):
    assert score(check_numbers, text, gold) == expected


def test_the_generators_sft_text_scores_as_the_recipe_says():
    # format_solution ends the reasoning with "The answer is N." (results/tiny_copy_rate.md): the rewards read only
    # what follows the reasoning end, so that cue is never mistaken for the answer, right or wrong.
    from grpo_playground.data.generator import format_solution, generate_problems

    seed_four = ("match_format_exactly", "match_format_approximately", "check_answer", "check_numbers")
    custom = Tags("<think>", "</think>", "<answer>", "</answer>")  # the tags are configurable: the same scores
    for p in generate_problems(20, "train", seed=0):
        for tags in (Tags(), custom):
            text = format_solution(p, tags)
            assert text.endswith(f"\nThe answer is {p.answer}.{tags.reasoning_end}{tags.solution_start}{p.answer}"
                                 f"{tags.solution_end}")
            assert [score(REWARDS[name].factory(tags), text, p.answer) for name in seed_four] == [1.0, 1.5, 5.0, 3.5]
    cue = "<start_working_out>6 x 7 = 42\nThe answer is {}.<end_working_out>"
    assert [score(f, cue.format(42) + S + "41" + E) for f in (check_answer, check_numbers)] == [2.0, -1.5]
    assert [score(f, cue.format(41) + S + "42" + E) for f in (check_answer, check_numbers)] == [5.0, 3.5]
    truncated = cue.format(42) + S  # cut before the answer: the cue earns nothing
    assert [score(f, truncated) for f in (match_format_exactly, check_answer, check_numbers)] == [0.0, -2.0, -2.5]


def test_plain_strings_and_chat_format_score_the_same():
    texts = [row[0] for row in CHECK_ANSWER]
    golds = [row[1] for row in CHECK_ANSWER]
    chat = [[{"role": "assistant", "content": t}] for t in texts]
    assert check_answer(None, texts, golds) == check_answer(None, chat, golds)


def test_one_gold_string_is_broadcast_and_a_wrong_count_is_refused():
    assert check_numbers(None, [S + "42", S + "7"], "42") == [3.5, -1.5]
    with pytest.raises(ValueError, match="one answer per completion"):
        check_numbers(None, [S + "42", S + "7"], ["42"])


def test_tags_with_regex_metacharacters_are_matched_literally():
    tags = Tags(reasoning_start="<<", reasoning_end="[/think]", solution_start="(ans)", solution_end="$$")
    fn = get_check_answer_reward(tags)
    assert score(fn, "work[/think](ans)42$$") == 5.0
    # Unescaped, "(ans)" would be a group matching "ans" and "$$" an anchor: this would wrongly match.
    assert score(fn, "work[/think]ans42") == -2.0


def test_reward_objects_pickle_and_keep_their_names():
    funcs, weights = get_reward_funcs(DEFAULT_WEIGHTS, Tags(solution_start="<A>", solution_end="</A>"))
    assert [f.__name__ for f in funcs] == list(DEFAULT_WEIGHTS) and weights == [1.0, 1.0, 1.0]
    for f in funcs:
        g = pickle.loads(pickle.dumps(f))
        assert g.__name__ == f.__name__ and g == f
        assert g(None, ["x<end_working_out><A>42</A>"], "42") == f(None, ["x<end_working_out><A>42</A>"], "42")


def test_registry_names_match_function_names_and_defaults_are_registered():
    for name, spec in REWARDS.items():
        assert spec.factory(Tags()).__name__ == name
        low, high = spec.score_range
        assert low < high and spec.description
    assert set(DEFAULT_WEIGHTS) <= set(REWARDS)


@pytest.mark.parametrize(
    "weights,message",
    [
        ({}, "enable at least one"),
        ({"check_anser": 1.0}, "unknown reward 'check_anser'"),
        ({"check_answer": "heavy"}, "give a number"),
        ({"check_answer": float("nan")}, "finite"),
    ],
)
def test_bad_weights_say_what_to_fix(weights, message):
    with pytest.raises(RewardInputError, match=message):
        get_reward_funcs(weights)


def test_docs_describe_every_registered_reward():
    # docs/rewards.md is hand-written: fail when a reward is registered without being documented.
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "rewards.md").read_text()
    assert [name for name in REWARDS if f"`{name}`" not in docs] == []
