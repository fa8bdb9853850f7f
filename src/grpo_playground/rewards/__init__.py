"""The reward engine: the seed recipe's reward functions, a registry, group scoring, explanations, design check.

Pure Python (no torch), so the UI can import it. Public doors:

    from grpo_playground.rewards import (
        match_format_exactly, match_format_approximately, check_answer, check_numbers,   # TRL reward funcs
        REWARDS, DEFAULT_WEIGHTS, get_reward_funcs,      # registry -> GRPOTrainer(reward_funcs=..., reward_weights=...)
        score_group, check_design, RewardInputError,     # the sandbox, the pre-flight and the job's samples
    )
"""

from grpo_playground.rewards.design_check import PROBES, DesignReport, check_design
from grpo_playground.rewards.equivalence import answer_equivalence, get_answer_equivalence_reward
from grpo_playground.rewards.group import SCALE_MODES, CompletionScore, GroupScore, Mark, group_advantages, one_group_scale, score_group
from grpo_playground.rewards.guard import MAX_COMPLETIONS, MAX_TOTAL_CHARS, RewardInputError
from grpo_playground.rewards.patterns import completion_text
from grpo_playground.rewards.registry import DEFAULT_WEIGHTS, REWARDS, RewardSpec, get_reward_funcs, validate_weights
from grpo_playground.rewards.seed import (
    Judgement,
    Reward,
    check_answer,
    check_answer_strict_nomatch,
    check_numbers,
    get_check_answer_reward,
    get_check_answer_strict_nomatch_reward,
    get_check_numbers_reward,
    get_match_format_approximately_reward,
    get_match_format_exactly_reward,
    match_format_approximately,
    match_format_exactly,
)

__all__ = [
    "DEFAULT_WEIGHTS", "MAX_COMPLETIONS", "MAX_TOTAL_CHARS", "PROBES", "REWARDS", "SCALE_MODES",
    "CompletionScore", "DesignReport", "GroupScore", "Judgement", "Mark", "Reward", "RewardInputError",
    "RewardSpec", "answer_equivalence", "check_answer", "check_answer_strict_nomatch", "check_design",
    "check_numbers", "completion_text", "get_answer_equivalence_reward", "get_check_answer_reward",
    "get_check_answer_strict_nomatch_reward", "get_check_numbers_reward", "get_match_format_approximately_reward",
    "get_match_format_exactly_reward", "get_reward_funcs", "group_advantages", "one_group_scale", "match_format_approximately",
    "match_format_exactly", "score_group", "validate_weights",
]
