"""Bounds for untrusted reward input: request size, number ranges, and the CPU time one request may use.

The reward patterns are linear (patterns.py), so a request within the size limits costs milliseconds; the CPU
budget is the backstop that keeps it so whatever a request holds. It counts this thread's CPU time
(`time.thread_time`), not the wall clock: waiting on math-verify or a custom reward's child (each bounded by
its own deadline) costs the server nothing, while work in this process does.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time

MAX_COMPLETIONS = 64
MAX_TOTAL_CHARS = 200_000
MAX_ANSWER_CHARS = 1_000
# A weight or an extra score (a custom reward) past these cannot be a reward design, and keeps every total,
# mean and squared deviation of a group far inside a float: 6 rewards x 1e6 x 1e6, squared, x 64 is ~1e28.
MAX_ABS_WEIGHT = 1e6
MAX_ABS_SCORE = 1e6
# The reward engine's own CPU time per request: 64 completions of the largest size take ~50 ms here.
REQUEST_CPU_S = 1.0

_budget = threading.local()


class RewardInputError(ValueError):
    """Input the reward engine refuses; the message says what is wrong and how to fix it."""


def check_request(completions: list[str], answer: str) -> None:
    """Raise RewardInputError when a scoring request is past the limits an app can serve safely."""
    if not isinstance(answer, str):
        raise RewardInputError(f"the gold answer must be text, got {type(answer).__name__}")
    if len(answer) > MAX_ANSWER_CHARS:
        raise RewardInputError(
            f"the gold answer is {len(answer):,} characters long: keep it under {MAX_ANSWER_CHARS:,} "
            "(it is the final answer only, e.g. 42)"
        )
    if not completions:
        raise RewardInputError("no completions to score: paste at least one (separate several with a line ---)")
    if len(completions) > MAX_COMPLETIONS:
        raise RewardInputError(
            f"{len(completions)} completions in one request: the limit is {MAX_COMPLETIONS} "
            "(a GRPO group is usually 4-16); score them in smaller groups"
        )
    total = sum(len(c) for c in completions)
    if total > MAX_TOTAL_CHARS:
        raise RewardInputError(
            f"the completions hold {total:,} characters: the limit is {MAX_TOTAL_CHARS:,} per request; "
            "trim them or score fewer at once"
        )


def bounded_number(what: str, value, limit: float) -> float:
    """`value` as a float within +-limit, or a RewardInputError naming `what` and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise RewardInputError(f"{what} is {_shown(value)}: give a number such as 1.0")
    try:
        number = float(value)
    except ValueError:
        raise RewardInputError(f"{what} is {_shown(value)}: give a number such as 1.0") from None
    except OverflowError:  # an int past a float's range, e.g. 10**400
        number = math.inf
    if not math.isfinite(number) or abs(number) > limit:
        raise RewardInputError(f"{what} is {_shown(value)}: give a finite number between {-limit:g} and {limit:g}")
    return number


def _shown(value) -> str:
    """A bad value as an error quotes it: short, and an int of thousands of digits by its size only."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"an integer of {int(value.bit_length() * math.log10(2)) + 1} digits"
    return repr(value)[:40]


@contextlib.contextmanager
def cpu_budget(seconds: float = REQUEST_CPU_S):
    """Within this block (this thread), scoring may use `seconds` of CPU; `charge()` past that refuses the rest."""
    previous = getattr(_budget, "limit", None)
    _budget.limit = (time.thread_time() + seconds, seconds)
    try:
        yield
    finally:
        _budget.limit = previous


def charge(done: int, total: int) -> None:
    """Raise RewardInputError when this thread's request has spent its CPU budget (no-op outside cpu_budget)."""
    limit = getattr(_budget, "limit", None)
    if limit is not None and time.thread_time() > limit[0]:
        raise RewardInputError(
            f"this request used its {limit[1]:g} s of scoring time after {done} of {total} completions: "
            "score fewer or shorter completions at once"
        )
