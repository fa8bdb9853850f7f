"""The one bounded way the app scores what a visitor sent: the sandbox's /score and live view, a chat reply.

A request is checked and timed as a whole: each gold answer must be a number (or LaTeX) the rewards can compare
(`check_gold`), and inside `scoring_request()` the reward engine's own work stays within guard.REQUEST_CPU_S of CPU
and math-verify's within equivalence.REQUEST_BUDGET_S of its checkers, whatever the request holds.
"""

from __future__ import annotations

import contextlib
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


def request_deadline_from_now() -> float:
    """When a request starting now has spent its math-verify budget (time.monotonic())."""
    return time.monotonic() + REQUEST_BUDGET_S


@contextlib.contextmanager
def scoring_request(deadline: float | None = None):
    """Score inside this block: math-verify until `deadline` (default: the budget from now), the reward engine
    within its CPU budget. A request scored in parts (a chat's replies as each finishes) passes one deadline."""
    remaining = (deadline if deadline is not None else request_deadline_from_now()) - time.monotonic()
    with request_deadline(max(0.0, remaining)), cpu_budget():
        yield
