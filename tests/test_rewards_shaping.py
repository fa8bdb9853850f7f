"""The shaped rewards (open-r1's cosine length, DAPO's soft overlong, the n-gram repetition penalty) and the
format gate: their numbers, TRL's call, the design check that knows them, and the recipe keys that set them."""

from __future__ import annotations

import math
import pickle

import pytest

from grpo_playground.config import ConfigError
from grpo_playground.config.recipe_io import dump_recipe, recipe_from_text
from grpo_playground.rewards import DEFAULT_WEIGHTS, REWARDS, check_design, get_reward_funcs, score_group
from grpo_playground.rewards.shaping import Shaping
from grpo_playground.tags import DEFAULT_TAGS

RIGHT = "<end_working_out><SOLUTION>42</SOLUTION>"
WRONG = "<end_working_out><SOLUTION>13</SOLUTION>"
RUNS_ON = "<end_working_out><SOLUTION>13</SOLUTION> and then I keep going"


def reward(name: str, **knobs):
    funcs, _ = get_reward_funcs({name: 1.0}, DEFAULT_TAGS, Shaping(**knobs))
    return funcs[0]


@pytest.mark.parametrize("text,expected", [
    (RIGHT, 1.0 - 0.25 * (1 - math.cos(len(RIGHT) / 100 * math.pi))),  # right and short: near 1.0
    ("x" * (100 - len(RIGHT)) + RIGHT, 0.5),      # right at cosine_max_len: the floor of a right answer
    ("x" * (50 - len(RIGHT)) + RIGHT, 0.75),      # right at half the length: halfway along the cosine
    ("x" * (50 - len(WRONG)) + WRONG, -0.75),     # wrong at half: halfway from -1.0 to -0.5
    ("x" * (100 - len(WRONG)) + WRONG, -0.5),     # wrong and long: punished least (thinking longer when unsure)
    ("x" * 400 + WRONG, -0.5),                    # past max_len stays at the end value (open-r1's cosine would wrap)
    ("42", -1.0 + 0.25 * (1 - math.cos(0.02 * math.pi))),  # no strict match counts as wrong
    ("<end_working_out><SOLUTION>4.2.0</SOLUTION>", None),  # not a number: wrong (checked below)
])
def test_cosine_scaled_follows_open_r1s_formula(text, expected):
    score = reward("cosine_scaled", cosine_max_len=100)(None, [text], "42")[0]
    if expected is None:
        assert score < 0
    else:
        assert score == pytest.approx(expected, abs=1e-9)


def test_cosine_scaled_right_as_a_number():
    # "42.0" for 42 and "1,600" for 1600 are the gold as numbers: right (above 0.5), not wrong (below -0.5)
    scores = reward("cosine_scaled")(None, [RIGHT.replace("42", "42.0"), RIGHT.replace("42", "1,600")], ["42", "1600"])
    assert all(s > 0.9 for s in scores), scores


@pytest.mark.parametrize("n_tokens,expected", [
    (80, 0.0),     # up to max_completion_length - buffer: no punishment, shortness never rewarded
    (90, -0.5),    # halfway into the buffer
    (100, -1.0),   # at the limit: TRL cut it here
    (130, -1.0),   # past the limit (a backend that did not cut): the floor
])
def test_soft_overlong_reads_trls_completion_ids(n_tokens, expected):
    fn = reward("soft_overlong", max_completion_length=100, overlong_buffer=20)
    # TRL 1.14.2's _calculate_rewards passes completion_ids= to every reward function
    assert fn(prompts=None, completions=["x"], answer="42", completion_ids=[[7] * n_tokens]) == [expected]


def test_soft_overlong_without_token_ids_estimates_and_says_so():
    fn = reward("soft_overlong", max_completion_length=100, overlong_buffer=20)
    judged = fn.judge("x" * 360, "42")  # ~90 tokens at 4 characters a token
    assert judged.score == pytest.approx(-0.5) and "estimated" in judged.reason


@pytest.mark.parametrize("text,expected", [
    ("a b c a b c a b c", -(1 - 3 / 7)),      # 7 trigrams, 3 distinct
    ("The cat. the CAT. the cat.", -(1 - 2 / 4)),  # lower-cased words: 4 trigrams, 2 distinct
    ("one two three four five", 0.0),        # no repeats
    ("one two", 0.0),                        # fewer words than n
    ("", 0.0),
    ("go " * 500, -(1 - 1 / 498)),           # one phrase repeated: close to the full penalty
])
def test_repetition_penalty_follows_open_r1s_formula(text, expected):
    assert reward("repetition_penalty")(None, [text], "42") == [pytest.approx(expected)]


def test_repetition_penalty_scales_with_its_knobs():
    assert reward("repetition_penalty", repetition_n_grams=1, repetition_max_penalty=-2.0)(
        None, ["a a a b"], "1") == [pytest.approx(-2.0 * (1 - 2 / 4))]


def test_gate_counts_the_answer_only_when_the_format_passes():
    texts = [RIGHT, WRONG, RUNS_ON, "<SOLUTION>42"]
    plain = score_group(texts, "42", DEFAULT_WEIGHTS)
    gated = score_group(texts, "42", DEFAULT_WEIGHTS, shaping=Shaping(gate_on_format=True))
    # format passed: the same scores
    assert [c.scores for c in gated.completions[:2]] == [c.scores for c in plain.completions[:2]]
    # failed: each answer check at its floor; check_numbers' +3.5 for the number after an unclosed tag is gone
    assert plain.completions[3].scores["check_numbers"] == 3.5
    for c in gated.completions[2:]:
        assert c.scores["check_answer"] == REWARDS["check_answer"].score_range[0]
        assert c.scores["check_numbers"] == REWARDS["check_numbers"].score_range[0]
        assert "gated: format failed" in c.reasons["check_answer"]
    # the seed's gaming: running on (-2.0) beat a clean wrong answer (-2.5); gated it does not
    assert plain.completions[2].total > plain.completions[1].total
    assert gated.completions[2].total < gated.completions[1].total
    # format rewards are never gated: they are what the gate reads
    assert gated.completions[3].scores["match_format_approximately"] == plain.completions[3].scores[
        "match_format_approximately"]


def test_shaped_and_gated_rewards_pickle_and_keep_their_logged_names():
    names = ["check_answer", "cosine_scaled", "soft_overlong", "repetition_penalty", "answer_equivalence"]
    funcs, _ = get_reward_funcs(dict.fromkeys(names, 1.0), DEFAULT_TAGS, Shaping(gate_on_format=True))
    assert [f.__name__ for f in funcs] == names  # TRL logs rewards/<name>/mean
    assert pickle.loads(pickle.dumps(funcs)) == funcs


def test_design_check_knows_padding_and_its_fix():
    cosine = {"check_answer_strict_nomatch": 1.0, "cosine_scaled": 1.0}
    report = check_design(cosine)
    # cosine_scaled pays a wrong answer more the longer it is: padding a wrong answer raises the reward
    assert report.totals["padded_wrong"] > report.totals["wrong"]
    assert any("padded with a repeated phrase" in f.message and "repetition_penalty" in f.message
               for f in report.findings)
    fixed = check_design({**cosine, "repetition_penalty": 1.0})
    assert fixed.totals["padded_wrong"] < fixed.totals["wrong"]
    assert not any("padded" in f.message for f in fixed.findings)


def test_design_check_offers_the_gate_and_clears_with_it():
    assert any("rewards.gate_on_format" in f.message for f in check_design(DEFAULT_WEIGHTS).findings)
    gated = check_design(DEFAULT_WEIGHTS, DEFAULT_TAGS, Shaping(gate_on_format=True))
    assert gated.ok, gated.findings


def test_recipe_keys_reach_the_rewards_and_round_trip():
    cfg = recipe_from_text(
        "rewards:\n  weights: {check_answer: 1.0, soft_overlong: 1.0, repetition_penalty: 0.5}\n"
        "  gate_on_format: true\n  overlong_buffer: 64\n  repetition_n_grams: 2\n"
        "grpo:\n  max_completion_length: 200\n")
    shaping = cfg.rewards.shaping(cfg.grpo.max_completion_length)
    assert shaping == Shaping(True, 200, 64, 1000, 2, -1.0)
    again = recipe_from_text(dump_recipe(cfg))
    assert again.rewards == cfg.rewards


@pytest.mark.parametrize("text,words", [
    ("rewards:\n  weights: {soft_overlong: 1.0}\n  overlong_buffer: 512\ngrpo:\n  max_completion_length: 256\n",
     ["rewards.overlong_buffer", "below grpo.max_completion_length"]),
    ("rewards:\n  repetition_max_penalty: 0.5\n", ["rewards.repetition_max_penalty", "negative"]),
    ("rewards:\n  repetition_n_grams: 0\n", ["rewards.repetition_n_grams", "between 1 and 16"]),
])
def test_bad_shaping_knobs_name_the_fix(text, words):
    with pytest.raises(ConfigError) as info:
        recipe_from_text(text)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_recipe_form_offers_the_gate_and_the_knobs():
    from grpo_playground.ui.config_form import form_fields

    kinds = {f.key: f.kind for f in form_fields()}
    assert kinds["rewards.gate_on_format"] == "bool"
    assert {kinds[k] for k in ("rewards.overlong_buffer", "rewards.cosine_max_len", "rewards.repetition_n_grams")} \
        == {"int"}
