"""Every reward by name: the UI's checkboxes, the recipes' `rewards.weights` and docs/rewards.md read this dict."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from grpo_playground.rewards.equivalence import get_answer_equivalence_reward
from grpo_playground.rewards.guard import MAX_ABS_WEIGHT, RewardInputError, bounded_number
from grpo_playground.rewards.seed import (
    Reward,
    get_check_answer_reward,
    get_check_answer_strict_nomatch_reward,
    get_check_numbers_reward,
    get_match_format_approximately_reward,
    get_match_format_exactly_reward,
)
from grpo_playground.tags import DEFAULT_TAGS, Tags


@dataclass(frozen=True)
class RewardSpec:
    name: str
    factory: Callable[[Tags], Reward]
    description: str
    score_range: tuple[float, float]
    checks_answer: bool  # False: a format-only reward, which alone cannot teach correctness
    notes: str = ""


REWARDS: dict[str, RewardSpec] = {
    spec.name: spec
    for spec in [
        RewardSpec(
            "match_format_exactly", get_match_format_exactly_reward,
            "1.0 when the strict pattern (reasoning end, solution tags, nothing after) matches, else 0.",
            (0.0, 1.0), False,
            "Off in the seed: it stays 0 for the first ~100 steps of an untrained model, so it adds no gradient early.",
        ),
        RewardSpec(
            "match_format_approximately", get_match_format_approximately_reward,
            "+0.5 for each of reasoning end, solution start, solution end seen exactly once, -1.0 otherwise.",
            (-3.0, 1.5), False,
            "The opening reasoning tag is not counted: chat templates often prefill it.",
        ),
        RewardSpec(
            "check_answer", get_check_answer_reward,
            "Answer in the strict match vs gold: exact 5.0, equal after trimming 3.5, within 10% 2.0, "
            "within 20% 1.5, other number -2.5, not a number -4.5, no match -2.0.",
            (-4.5, 5.0), True,
            "Can be gamed: no match (-2.0) pays more than a clean wrong answer (-2.5).",
        ),
        RewardSpec(
            "check_answer_strict_nomatch", get_check_answer_strict_nomatch_reward,
            "check_answer with no match at -3.0, below every wrong number, so not answering never pays.",
            (-4.5, 5.0), True,
            "Use in place of check_answer (not with it).",
        ),
        RewardSpec(
            "check_numbers", get_check_numbers_reward,
            "First number after the solution tag vs gold: equal 3.5, different -1.5, none -2.5, unparsable 0.",
            (-2.5, 3.5), True,
            "Commas are removed from the guess, not from the gold: a gold such as '1,600' scores 0 everywhere.",
        ),
        RewardSpec(
            "answer_equivalence", get_answer_equivalence_reward,
            "math-verify: equal to the gold (1/2 = 0.5, LaTeX, \\boxed{}) 5.0, different -2.5, nothing readable -3.0.",
            (-3.0, 5.0), True,
            "Runs math-verify in a child process, at most 2 s per completion.",
        ),
    ]
}

DEFAULT_WEIGHTS: dict[str, float] = {"match_format_approximately": 1.0, "check_answer": 1.0, "check_numbers": 1.0}


def validate_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Known names and numbers within +-MAX_ABS_WEIGHT, or a RewardInputError naming the fix."""
    if not weights:
        raise RewardInputError(f"no reward function enabled: enable at least one of {', '.join(REWARDS)}")
    clean = {}
    for name, w in weights.items():
        if name not in REWARDS:
            raise RewardInputError(f"unknown reward {name!r}: choose from {', '.join(REWARDS)}")
        clean[name] = bounded_number(f"weight of {name}", w, MAX_ABS_WEIGHT)
    return clean


def get_reward_funcs(
    weights: Mapping[str, float] = DEFAULT_WEIGHTS, tags: Tags = DEFAULT_TAGS
) -> tuple[list[Reward], list[float]]:
    """(reward_funcs, reward_weights) for GRPOTrainer / GRPOConfig, built for these tags."""
    clean = validate_weights(weights)
    return [REWARDS[name].factory(tags) for name in clean], list(clean.values())
