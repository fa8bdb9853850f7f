"""Group scoring: totals, advantages equal to what TRL's GRPOTrainer computes, zero-variance reasons, explanations."""

from __future__ import annotations

import inspect
import textwrap
from types import SimpleNamespace

import pytest

from grpo_playground.rewards import DEFAULT_WEIGHTS, score_group
from grpo_playground.tags import Tags

W = "<start_working_out>6 x 7 = 42<end_working_out>"
GROUP = [
    W + "<SOLUTION>42</SOLUTION>",  # correct: 1.5 + 5.0 + 3.5
    W + "<SOLUTION>41</SOLUTION>",  # near miss: 1.5 + 2.0 - 1.5
    W + "<SOLUTION>7</SOLUTION>",  # wrong: 1.5 - 2.5 - 1.5
    W + "<SOLUTION>42",  # truncated: 0.0 - 2.0 + 3.5
    "",  # empty: -3.0 - 2.0 - 2.5
]


def trl_advantages(rewards_per_func: list[list[float]], weights: list[float], scale: str) -> tuple[list, list]:
    """Run the lines of the installed TRL's GRPOTrainer that turn per-function rewards into advantages.

    The block is cut from TRL's own source (from the unscorable mask to nan_to_num) and executed as is,
    so a change in TRL's formula makes this test fail instead of silently drifting from it.
    """
    import torch
    from trl.trainer import grpo_trainer

    source = inspect.getsource(grpo_trainer.GRPOTrainer._generate_and_score_completions)
    start = source.index("        unscorable_mask = ")
    end = source.index("advantages = torch.nan_to_num(advantages, nan=0.0)")
    end = source.index("\n", end)
    block = textwrap.dedent(source[start:end])
    scope = {
        "torch": torch,
        "nanstd": grpo_trainer.nanstd,
        "device": "cpu",
        "num_generations": len(rewards_per_func),
        "rewards_per_func": torch.tensor(rewards_per_func, dtype=torch.float32),
        "self": SimpleNamespace(
            multi_objective_aggregation="sum_then_normalize",
            reward_weights=torch.tensor(weights, dtype=torch.float32),
            scale_rewards=scale,
        ),
    }
    exec(block, scope)  # noqa: S102 - TRL's own code, from the installed package
    return scope["advantages"].tolist(), scope["is_std_zero"].tolist()


@pytest.mark.parametrize("scale", ["group", "none"])
@pytest.mark.parametrize("weights", [DEFAULT_WEIGHTS, {"check_answer": 2.0, "match_format_exactly": 0.5}])
def test_advantages_equal_trl(scale, weights):
    group = score_group(GROUP, "42", weights, scale=scale)
    per_func = [[c.scores[n] for n in group.names] for c in group.completions]
    expected, zero = trl_advantages(per_func, list(group.weights.values()), scale)
    assert group.advantages == pytest.approx(expected, rel=1e-5, abs=1e-5)
    assert not group.zero_variance and not any(zero)


def test_seed_totals_and_dr_grpo_is_total_minus_mean():
    group = score_group(GROUP, "42", scale="none")
    assert group.totals == [10.0, 2.0, -2.5, 1.5, -7.5]
    assert group.mean == pytest.approx(0.7)
    assert group.advantages == pytest.approx([9.3, 1.3, -3.2, 0.8, -8.2])


def test_zero_variance_group_is_flagged_like_trl_with_a_plain_reason():
    # The seed's story: the model wrote "solution" instead of <SOLUTION>, every completion scored the same.
    group = score_group(["<start_working_out>6 x 7 = 42 solution: 42"] * 8, "42")
    expected, zero = trl_advantages([[-3.0, -2.0, -2.5]] * 8, [1.0, 1.0, 1.0], "group")
    assert group.zero_variance and all(zero)
    assert group.advantages == expected == [0.0] * 8
    assert group.zero_variance_reason.startswith("all 8 completions scored -7.5: advantage 0")
    assert "no <SOLUTION> tag: the model wrote 'solution' instead" in group.zero_variance_reason


def test_single_completion_has_no_gradient_either():
    group = score_group([GROUP[0]], "42")
    assert group.zero_variance and "group of 1" in group.zero_variance_reason


def test_explanation_names_what_each_pattern_saw():
    group = score_group(GROUP, "42")
    correct, near, wrong, truncated, empty = group.completions
    assert correct.strict_answer == "42" and correct.number == "42"
    assert correct.tag_counts == {"<start_working_out>": 1, "<end_working_out>": 1, "<SOLUTION>": 1, "</SOLUTION>": 1}
    answer_mark = next(m for m in correct.marks if m.label == "answer (strict match)")
    assert correct.text[answer_mark.start:answer_mark.end] == "42"
    assert near.reasons["check_answer"] == "answer 41 is within 10% of 42 (ratio 0.976): +2"
    assert wrong.reasons["check_answer"] == "answer 7 is more than 20% away from 42 (ratio 0.167): -2.5"
    assert truncated.strict_answer is None and truncated.number == "42"
    assert "truncated: <SOLUTION> never closed" in truncated.reasons["check_answer"]
    assert "</SOLUTION> x0: -1" in truncated.reasons["match_format_approximately"]
    assert empty.reasons["check_answer"] == "no answer extracted (empty completion): -2"


@pytest.mark.parametrize(
    "text,reason",
    [
        # each strict-pattern miss gets its own words, so the user knows what to fix
        (W + "<solution>42</solution>", "the tag appears with different capitals"),
        ("<start_working_out>6 x 7<SOLUTION>42</SOLUTION>", "no <end_working_out> before <SOLUTION>"),
        (W + "<SOLUTION>42</SOLUTION> and that is all", "text after </SOLUTION> on the same line"),
        (W + "<SOLUTION></SOLUTION>", "nothing between <SOLUTION> and </SOLUTION>"),
        ("6 x 7 = 42", "no <SOLUTION> tag"),
        ("6 x 7 = 42. SOLUTION: 42", "no <SOLUTION> tag: the model wrote 'SOLUTION' instead"),
    ],
)
def test_strict_miss_reasons(text, reason):
    assert reason in score_group([text], "42").completions[0].reasons["check_answer"]


def test_custom_tags_and_extra_scores_join_the_total():
    tags = Tags(reasoning_end="</think>", solution_start="<answer>", solution_end="</answer>")
    group = score_group(["x</think><answer>42</answer>", "x"], "42", {"check_answer": 1.0}, tags,
                        extra_scores={"custom": [1.0, 0.5]})
    assert group.names == ["check_answer", "custom"]
    assert group.totals == [6.0, -1.5]
    assert group.table()[0] == ["check_answer", "custom", "total", "advantage"]


def test_numeric_gold_is_read_as_text():
    assert score_group(GROUP, 42).totals == score_group(GROUP, "42").totals


def test_bad_scale_is_refused():
    with pytest.raises(ValueError, match="'group' \\(GRPO\\) or 'none'"):
        score_group(GROUP, "42", scale="batch")


def test_trl_names_the_reward_funcs_after_the_registry():
    # TRL logs rewards/<get_callable_name(fn)>/mean; an async-looking callable would never be awaited.
    from trl.trainer.utils import get_callable_name, is_async_callable

    from grpo_playground.rewards import REWARDS, get_reward_funcs

    funcs, _ = get_reward_funcs({name: 1.0 for name in REWARDS})
    assert [get_callable_name(f) for f in funcs] == list(REWARDS)
    assert not any(is_async_callable(f) for f in funcs)
