"""Bounds for untrusted reward input: request size, and regex work that cannot hang the app.

The seed's strict pattern (`end .*? start (.+?) end \\s*$`) backtracks cubically on text full of
repeated tags: 100k copies of `<SOLUTION>` would keep the stdlib `re` busy for hours. The `regex`
package (already a transformers dependency, pinned in requirements.txt) takes a `timeout=`, so every
search here gives up after REGEX_TIMEOUT_S and reports it instead of hanging a request or a training step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import regex

MAX_COMPLETIONS = 64
MAX_TOTAL_CHARS = 200_000
MAX_ANSWER_CHARS = 1_000
# A legitimate search over 200,000 characters takes a few milliseconds; 0.25 s is two orders above that
# even on a busy 2-core machine, and 64 timed-out completions still answer within a request.
REGEX_TIMEOUT_S = 0.25

FLAGS = regex.MULTILINE | regex.DOTALL


class RewardInputError(ValueError):
    """Input the reward engine refuses; the message says what is wrong and how to fix it."""


@dataclass(frozen=True)
class SearchResult:
    """Outcome of one bounded search: a match, no match, or gave up (timed_out)."""

    match: regex.Match | None
    timed_out: bool = False


@lru_cache(maxsize=128)
def bounded_search(pattern: regex.Pattern, text: str) -> SearchResult:
    """pattern.search(text) that gives up after REGEX_TIMEOUT_S. Cached: scoring and explaining one
    completion ask the same question several times, and a hostile input should cost its timeout once."""
    try:
        return SearchResult(pattern.search(text, timeout=REGEX_TIMEOUT_S))
    except TimeoutError:
        return SearchResult(None, timed_out=True)


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
