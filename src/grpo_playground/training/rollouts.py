"""GRPO rollouts that use the KV cache, and the GRPO step timed by phase: `instrument_grpo(trainer, backend, timer)`.

Why: TRL 1.14.2 samples completions with the policy in training mode, and GRPOConfig turns gradient
checkpointing on by default. transformers 5.17's GradientCheckpointingLayer then drops `past_key_values` in every
decoder layer while `self.training` is set, yet `generate` still feeds one new token per step: each token after
the first is computed WITHOUT its context (the prompt and earlier tokens): the rollouts are wrong. Here
checkpointing is switched off around generation only (TRL's own `disable_gradient_checkpointing`, which it
already uses for its log-prob pass); the backward pass keeps it. Unsloth (its own checkpointing and generation)
and vLLM rollouts are only timed. On the H200 (BENCHMARKS.md) the fixed rollouts match a full recompute and TRL's
do not; the fix costs speed (679 vs 1,096 tokens/s at 64 x 128 for a SmolLM2-135M shape), since each token now
attends over its whole context: HF generate stays launch-bound either way, fast rollouts need vLLM.

`instrument_grpo(trainer, backend, timer)` also times every phase of the step (grpo_playground.step_timing):
rollout, vLLM weight sync, rewards, log-probs, and counts `rollout/tokens` (completion tokens this process generated).
Set GRPO_PLAYGROUND_SLOW_ROLLOUTS=1 to keep TRL's behaviour (benchmarks measure both in one run).
"""

from __future__ import annotations

import os

from grpo_playground.step_timing import StepTimer

SLOW_ROLLOUTS_ENV = "GRPO_PLAYGROUND_SLOW_ROLLOUTS"


def keeps_cache(backend: str, use_vllm: bool) -> bool:
    """Whether generation needs checkpointing switched off to use the KV cache (plain HF generate on TRL + PEFT)."""
    return backend == "trl" and not use_vllm and os.environ.get(SLOW_ROLLOUTS_ENV) != "1"


def instrument_grpo(trainer, backend: str, timer: StepTimer) -> None:
    """Rollouts with the KV cache (plain HF generate) and per-phase timing of a built GRPOTrainer."""
    from trl.models.utils import disable_gradient_checkpointing

    generate = trainer._generate_single_turn
    cache = keeps_cache(backend, bool(getattr(trainer, "use_vllm", False)))

    def rollout(*args, **kwargs):
        with timer.phase("rollout"):
            if cache:
                with disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
                    result = generate(*args, **kwargs)
            else:
                result = generate(*args, **kwargs)
        completion_ids = result[0]  # TRL 1.14.2 (and Unsloth's copy of it) return (completion_ids, logprobs)
        timer.count("rollout/tokens", float(sum(len(ids) for ids in completion_ids)))
        return result

    trainer._generate_single_turn = rollout
    timer.wrap(trainer, "_generate_and_score_completions", "logprobs")
    timer.wrap(trainer, "_calculate_rewards", "rewards")
    if getattr(trainer, "vllm_generation", None) is not None:  # TRL's own vLLM (colocate): policy -> vLLM each step
        timer.wrap(trainer.vllm_generation, "sync_weights", "weight_sync")
