"""The one bounded way the app scores what a visitor sent: the sandbox's /score and live view, a chat reply.

A request is checked and timed as a whole: each gold answer must be a number (or LaTeX) the rewards can compare
(`check_gold`), and inside `scoring_request()` the reward engine's own work stays within guard.REQUEST_CPU_S of CPU
and math-verify's within equivalence.REQUEST_BUDGET_S of its checkers, whatever the request holds.

Large requests take turns: a request of more than LARGE_REQUEST_CHARS (64 completions of 3,000 characters cost
~30 ms of CPU, 25 times a group of 8 short ones) scores in one of LARGE_REQUEST_LANES lanes, or is refused as busy
after LANE_WAIT_S. Sixteen of them at once then take one core's share, not all of it, and the small requests
beside them stay fast (tests/security/test_scoring_under_load.py).
"""

from __future__ import annotations

import contextlib
import threading
import time

from grpo_playground.data.answers import gold_answer_problem
from grpo_playground.rewards.equivalence import REQUEST_BUDGET_S, request_deadline
from grpo_playground.rewards.guard import MAX_ANSWER_CHARS, RewardInputError, cpu_budget


def check_gold(gold: str) -> str:
    """The gold answer, stripped, or a RewardInputError saying why the rewards cannot compare against it."""
    gold = (gold or "").strip()
    if not gold:
        raise RewardInputError("give the gold answer (the final answer only, e.g. 42)")
    if len(gold) > MAX_ANSWER_CHARS:
        raise RewardInputError(f"the gold answer is {len(gold):,} characters long: keep it under {MAX_ANSWER_CHARS:,}")
    problem = gold_answer_problem(gold)
    if problem:
        raise RewardInputError(problem)
    return gold


LARGE_REQUEST_CHARS = 20_000
LARGE_REQUEST_LANES = 1
LANE_WAIT_S = 2.0

_lanes = threading.BoundedSemaphore(LARGE_REQUEST_LANES)


def request_deadline_from_now() -> float:
    """When a request starting now has spent its math-verify budget (time.monotonic())."""
    return time.monotonic() + REQUEST_BUDGET_S


@contextlib.contextmanager
def scoring_request(chars: int, deadline: float | None = None):
    """Score `chars` characters of completions inside this block: math-verify until `deadline` (default: the budget
    from now), the reward engine within its CPU budget, a large request in its lane. A request scored in parts (a
    chat's replies as each finishes) passes one deadline."""
    large = chars > LARGE_REQUEST_CHARS
    if large and not _lanes.acquire(timeout=LANE_WAIT_S):
        raise RewardInputError(f"busy: other large requests (over {LARGE_REQUEST_CHARS:,} characters) are being "
                               "scored; try again in a moment, or score fewer or shorter completions at once")
    try:
        remaining = (deadline if deadline is not None else request_deadline_from_now()) - time.monotonic()
        with request_deadline(max(0.0, remaining)), cpu_budget():
            yield
    finally:
        if large:
            _lanes.release()
