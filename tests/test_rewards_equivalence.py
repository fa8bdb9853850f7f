"""answer_equivalence: math-verify in a child process, bounded in time, usable from any thread."""

from __future__ import annotations

import math
import threading
import time

import pytest

from grpo_playground.rewards import answer_equivalence
from grpo_playground.rewards.equivalence import VERIFY_TIMEOUT_S

W = "<start_working_out>work<end_working_out>"

CASES = [
    (W + "<SOLUTION>1/2</SOLUTION>", "0.5", 5.0),  # a fraction equals its decimal
    (W + "<SOLUTION>\\frac{1}{2}</SOLUTION>", "1/2", 5.0),  # LaTeX fraction
    ("so the result is \\boxed{42}", "42", 5.0),  # no tags: math-verify's own \boxed{} extraction
    (W + "<SOLUTION>1,600</SOLUTION>", "1600", 5.0),  # thousands separator in the answer
    (W + "<SOLUTION>1600</SOLUTION>", "1,600", 5.0),  # ... and in a GSM8K-style gold
    (W + "<SOLUTION>41</SOLUTION>", "42", -2.5),  # different value: a plain wrong answer
    ("I cannot tell", "42", -3.0),  # nothing to read: below any wrong answer, so silence never pays
    ("", "42", -3.0),  # empty output
]


@pytest.mark.parametrize("text,gold,expected", CASES)
def test_answer_equivalence_bands(text, gold, expected):
    assert answer_equivalence(None, [text], [gold]) == [expected]


def test_hostile_expression_is_cut_off_and_the_worker_recovers():
    # A power tower makes sympy compute for minutes: the parent stops waiting and kills the child.
    start = time.monotonic()
    judged = answer_equivalence.judge(W + "<SOLUTION>9^9^9^9^9^9</SOLUTION>", "1")
    assert time.monotonic() - start < VERIFY_TIMEOUT_S + 5
    # no verdict on the answer, and saying so (the TRL path scores it -3.0: test_scoring_under_load.py)
    assert math.isnan(judged.score) and judged.reason.startswith("could not score") and "stopped" in judged.reason
    assert answer_equivalence(None, [W + "<SOLUTION>42</SOLUTION>"], "42") == [5.0]


def test_works_from_a_worker_thread():
    # math-verify's own signal-based timeouts fail outside the main thread (Gradio and TRL call from threads).
    out = []
    t = threading.Thread(target=lambda: out.append(answer_equivalence(None, [W + "<SOLUTION>0.25</SOLUTION>"], "1/4")))
    t.start()
    t.join(60)
    assert out == [[5.0]]


def test_a_question_given_up_on_never_answers_the_next_one():
    # Before: a question whose time ran out before its answering process read it stayed in the pipe; the next
    # answerer answered it, and every later question read the verdict of the one before (under load a tower read
    # 5.0 and honest answers their neighbour's verdicts).
    from grpo_playground.rewards.equivalence import EquivalenceWorker

    worker = EquivalenceWorker()
    try:
        worker.warm_up()
        for _ in range(3):  # given up on at once: its answerer is replaced, most likely before it read the question
            assert worker.verify("1/2", "0.5", timeout=0)["unscored"]
        for gold, pred, equivalent in [("42", "41", False), ("1/2", "0.5", True), ("7", "8", False)] * 2:
            reply = worker.verify(gold, pred)
            assert reply.get("equivalent") is equivalent, (gold, pred, reply)
    finally:
        worker.close()
