"""Evaluation: per-completion judgements (table of cases), summaries with standard errors, and real model runs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_playground.eval import score_completion, summarize
from grpo_playground.tags import Tags

ROOT = Path(__file__).resolve().parents[1]
WORK = "so 6 * 7 = 42 apples.<end_working_out>"


@pytest.mark.parametrize(
    "text, answer, in_format, correct, lenient, rechecks",
    [
        (WORK + "<SOLUTION>42</SOLUTION>", "42", True, True, True, False),  # the recipe's format, right answer
        (WORK + "<SOLUTION>41</SOLUTION>", "42", True, False, False, False),  # in format, wrong answer
        (WORK + "<SOLUTION> 42 </SOLUTION>\n", "42", True, True, True, False),  # spaces and a trailing newline are fine
        (WORK + "<SOLUTION>1,600</SOLUTION>", "1600", True, True, True, False),  # same number, with a comma
        (WORK + "<SOLUTION>-10</SOLUTION>", "-10", True, True, True, False),  # negative answers
        (WORK + "<SOLUTION>3.50</SOLUTION>", "3.5", True, True, True, False),  # same value, other spelling
        (WORK + "<SOLUTION>42", "42", False, False, True, False),  # truncated: never closed, only lenient counts
        (WORK + "<SOLUTION>42</SOLUTION> done", "42", False, False, True, False),  # text after the answer breaks strict
        ("<SOLUTION>42</SOLUTION>", "42", False, False, True, False),  # no <end_working_out> before the answer
        ("The answer is 42.", "42", False, False, True, False),  # plain prose: the base model's habit
        ("It is 42. Wait, let me re-check: 6 * 7 = 41", "42", False, False, False, True),  # last number decides lenient
        ("Let me double-check the sum: 42", "42", False, False, True, True),
        ("", "42", False, False, False, False),  # empty completion
    ],
)
def test_score_completion(text, answer, in_format, correct, lenient, rechecks):
    score = score_completion(text, answer)
    assert (score.in_format, score.correct, score.lenient_correct, score.rechecks) == (in_format, correct, lenient, rechecks)


def test_score_with_custom_tags():
    tags = Tags("<think>", "</think>", "<answer>", "</answer>")
    assert score_completion("x</think><answer>7</answer>", "7", tags).correct
    assert not score_completion(WORK + "<SOLUTION>7</SOLUTION>", "7", tags).in_format


def test_summarize_rates_standard_errors_and_levels():
    texts = [WORK + "<SOLUTION>42</SOLUTION>", WORK + "<SOLUTION>41</SOLUTION>", "42", "nothing"]
    scores = [score_completion(t, "42", n_tokens=n) for t, n in zip(texts, (10, 20, 30, 40))]
    summary = summarize(scores, levels=[1, 1, 2, None])
    assert summary["n"] == 4
    assert summary["format_rate"] == 0.5 and summary["format_rate_se"] == 0.25  # sqrt(.5 * .5 / 4)
    assert summary["accuracy"] == 0.25 and summary["accuracy_se"] == round(math.sqrt(0.25 * 0.75 / 4), 4)
    assert summary["lenient_accuracy"] == 0.5
    assert summary["mean_completion_tokens"] == 25.0
    assert summary["mean_completion_tokens_se"] == round(math.sqrt(sum((x - 25) ** 2 for x in (10, 20, 30, 40)) / 3 / 4), 2)
    assert summary["per_level"] == {
        "1": {"n": 2, "accuracy": 0.5, "accuracy_se": 0.3536, "format_rate": 1.0},
        "2": {"n": 1, "accuracy": 0.0, "accuracy_se": 0.0, "format_rate": 0.0},
    }
    assert "per_level" not in summarize(scores)
    with pytest.raises(ValueError):
        summarize([])
