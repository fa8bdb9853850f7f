"""The problem generator: reproducible, graded, correct, and with train/test splits that never meet."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from grpo_playground.data.generator import (
    LEVELS,
    TEMPLATES,
    format_solution,
    generate_problems,
    plain_solution,
    split_of,
)
from grpo_playground.tags import Tags

ARITHMETIC = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")
OPS = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__}


def test_same_arguments_give_the_same_problems():
    assert generate_problems(200, "train", seed=3) == generate_problems(200, "train", seed=3)
    assert generate_problems(50, "train", seed=3) != generate_problems(50, "train", seed=4)


def test_train_and_test_never_share_a_problem():
    train = generate_problems(5000, "train", seed=0)
    test = generate_problems(2000, "test", seed=0)
    # canonical form: the arithmetic regardless of names and wording; the question text too
    assert not {p.canonical for p in train} & {p.canonical for p in test}
    assert not {p.question for p in train} & {p.question for p in test}
    assert all(split_of(p.canonical) == "train" for p in train)
    assert all(p.split == "test" for p in test)
    # a different seed draws other problems but must respect the same partition
    assert not {p.canonical for p in generate_problems(2000, "test", seed=7)} & {p.canonical for p in train}


def test_questions_are_distinct_within_a_split():
    problems = generate_problems(3000, "train", seed=1)
    assert len({p.question for p in problems}) == 3000


@pytest.mark.parametrize("level", LEVELS)
def test_every_answer_is_recomputed_from_the_worked_steps(level):
    for p in generate_problems(300, "train", seed=level, levels=(level,)):
        found = [m for step in p.solution_steps for m in ARITHMETIC.findall(step)]
        assert len(found) == level == p.level, (p.question, p.solution_steps)  # level = number of operations
        for a, op, b, result in found:
            a, b, result = int(a), int(b), int(result)
            assert op != "/" or a % b == 0, p.solution_steps  # division is always exact
            assert OPS[op](a, b) == result, p.solution_steps
            assert 1 <= result <= 999
        assert found[-1][3] == p.answer


def test_levels_and_weights_shape_the_mix():
    counts = Counter(p.level for p in generate_problems(2000, "train", levels=(1, 5), weights=(3, 1)))
    assert set(counts) == {1, 5}
    assert 2.2 < counts[1] / counts[5] < 4.0
    assert {p.template for p in generate_problems(2000, "test")} == set(TEMPLATES)


def test_harder_levels_have_longer_solutions():
    mean_steps = [
        sum(len(p.solution_steps) for p in generate_problems(200, "train", levels=(lv,))) / 200 for lv in LEVELS
    ]
    assert mean_steps == sorted(mean_steps) and mean_steps[-1] > mean_steps[0] + 2


def test_format_solution_uses_the_given_tags():
    p = generate_problems(1, "train", seed=0)[0]
    text = format_solution(p)
    # the reasoning ends with tiny's pretraining cue, so SFT teaches the copy into <SOLUTION> (tiny_copy_rate.md)
    steps = "\n".join(p.solution_steps)
    cue = f"The answer is {p.answer}."
    assert text == f"<start_working_out>{steps}\n{cue}<end_working_out><SOLUTION>{p.answer}</SOLUTION>"
    custom = format_solution(p, Tags("<think>", "</think>", "<answer>", "</answer>"))
    assert custom == f"<think>{steps}\n{cue}</think><answer>{p.answer}</answer>"
    assert plain_solution(p).endswith(f"The answer is {p.answer}.") and "<" not in plain_solution(p)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n": -1}, "between 0 and"),
        ({"n": 5, "split": "validation"}, "'train' or 'test'"),
        ({"n": 5, "levels": (0, 6)}, "difficulty levels"),
        ({"n": 5, "levels": (1, 2), "weights": (1,)}, "one non-negative weight per level"),
        ({"n": 5, "levels": (1, 2), "weights": (0, 0)}, "not all zero"),
    ],
)
def test_bad_arguments_say_what_to_fix(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        generate_problems(**kwargs)
