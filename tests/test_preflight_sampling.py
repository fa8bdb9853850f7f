"""The pre-flight samples all its prompts in one left-padded generate call: each group must still be its own
prompt's completions, as when the prompts went one at a time (the real `tiny` model, near-greedy, on CPU)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("torch")

from grpo_playground.config.recipe_io import load_recipe  # noqa: E402
from grpo_playground.data import load_examples  # noqa: E402
from grpo_playground.data.chat_template import render_prompt  # noqa: E402
from grpo_playground.training import preflight  # noqa: E402
from grpo_playground.training.backend import load_policy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_batched_groups_match_one_prompt_at_a_time(monkeypatch):
    import torch

    torch.manual_seed(0)
    cfg = load_recipe(ROOT / "recipes" / "quick.yaml")
    # near-greedy: batched and one-by-one sampling draw random numbers differently, argmax does not
    cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, temperature=1e-6, top_p=1.0, num_generations=2,
                                                            max_completion_length=12))
    policy = load_policy(cfg, "sft")
    tags = cfg.rewards.tags
    examples = load_examples("generator:test?levels=1-3", n=5, tags=tags, seed=3).examples
    prompts = [render_prompt(policy.tokenizer, e["prompt"], tags, cfg.data.prefill_reasoning) for e in examples]
    lengths = {len(policy.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts}
    assert len(lengths) > 1, "the prompts must differ in length, or padding is not tested"
    side = policy.tokenizer.padding_side

    one_by_one = [preflight.sample_groups(policy, [p], cfg)[0] for p in prompts]
    monkeypatch.setattr(preflight, "PREFLIGHT_MAX_ROWS", 6)  # 3 prompts per call: two calls, the last one short
    batched = preflight.sample_groups(policy, prompts, cfg)

    assert [len(g) for g in batched] == [2] * len(prompts)
    assert batched == one_by_one
    assert len({g[0] for g in batched}) > 1, "every prompt got the same completion: the test shows nothing"
    assert policy.tokenizer.padding_side == side and policy.model.training
