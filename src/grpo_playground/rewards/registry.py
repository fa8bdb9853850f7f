"""Every reward by name: the UI's checkboxes, the recipes' `rewards.weights` and docs/rewards.md read this dict."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from grpo_playground.rewards.equivalence import get_answer_equivalence_reward
from grpo_playground.rewards.guard import MAX_ABS_WEIGHT, RewardInputError, bounded_number
from grpo_playground.rewards.shaping import (
    DEFAULT_SHAPING,
    FormatGated,
    Shaping,
    get_cosine_scaled_reward,
    get_repetition_penalty_reward,
    get_soft_overlong_reward,
)
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
    factory: Callable[..., Reward]  # (tags), or (tags, shaping) when `shaped`
    description: str
    score_range: tuple[float, float]
    checks_answer: bool  # False: a format-only reward, which alone cannot teach correctness
    notes: str = ""
    shaped: bool = False  # reads the Shaping knobs (length limits, n-gram size)

    def build(self, tags: Tags, shaping: Shaping = DEFAULT_SHAPING) -> Reward:
        """The reward for these tags and knobs; behind the format gate when it checks the answer and the gate is on."""
        reward = self.factory(tags, shaping) if self.shaped else self.factory(tags)
        return FormatGated(reward, self.score_range[0]) if shaping.gate_on_format and self.checks_answer else reward


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
        RewardSpec(
            "cosine_scaled", get_cosine_scaled_reward,
            "Correctness scaled by length (open-r1): right 1.0 when short down to 0.5 at rewards.cosine_max_len "
            "characters; wrong -1.0 when short up to -0.5.",
            (-1.0, 1.0), True,
            "Short and right beats long and right; a wrong answer is punished less the longer it thinks, so pair it "
            "with repetition_penalty or soft_overlong against padding.", shaped=True,
        ),
        RewardSpec(
            "soft_overlong", get_soft_overlong_reward,
            "DAPO's soft overlong punishment: 0, then linear to -1 over the last rewards.overlong_buffer tokens "
            "before grpo.max_completion_length.",
            (-1.0, 0.0), False,
            "Never rewards shortness; only running into the limit, where truncation cuts off the answer.", shaped=True,
        ),
        RewardSpec(
            "repetition_penalty", get_repetition_penalty_reward,
            "Share of repeated word n-grams (rewards.repetition_n_grams) times rewards.repetition_max_penalty "
            "(open-r1).",
            (-1.0, 0.0), False,
            "0 for text without repeats; the full penalty for one phrase repeated to the limit.", shaped=True,
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
    weights: Mapping[str, float] = DEFAULT_WEIGHTS, tags: Tags = DEFAULT_TAGS, shaping: Shaping = DEFAULT_SHAPING
) -> tuple[list[Reward], list[float]]:
    """(reward_funcs, reward_weights) for GRPOTrainer / GRPOConfig, built for these tags and shaping knobs."""
    clean = validate_weights(weights)
    return [REWARDS[name].build(tags, shaping) for name in clean], list(clean.values())
