"""Unsloth 2026.10.9's FP8 GRPO path (`model.load_in_fp8` with vLLM rollouts), mended where its first GPU run failed
(results/gpu/h100_recipes35_lease7/): the adapter's hand-over to vLLM, and vLLM's context sized for FP8 weights."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def unsloth_counts_fp8_weights():
    """Unsloth 2026.10.9 fits vLLM's context to the KV cache left beside the weights, and counts the weights of a 16-bit
    checkpoint loaded with load_in_fp8 as 16-bit (it looks for "fp8" in the model's name): within the 8B's 22 GiB
    budget it cut vLLM's context to 768 tokens, under the recipe's 1,024-token completions
    (results/gpu/h100_recipes35_lease7/). Counted as 8-bit weights while the engine starts."""
    from unsloth_zoo import vllm_utils

    original = vllm_utils.vllm_weights_memory_usage
    vllm_utils.vllm_weights_memory_usage = lambda config, **kw: original(config, **{**kw, "load_in_8bit": True})
    try:
        yield
    finally:
        vllm_utils.vllm_weights_memory_usage = original


def hand_lora_to_vllm_without_inference_mode(model) -> None:
    """Unsloth 2026.10.9 hands each step's adapter to vLLM (`model.load_lora`) under torch.inference_mode, where the
    state_dict() of torchao's FP8 weights raises "Cannot set version_counter for inference tensor" (pytorch#164872;
    Unsloth's own FP8 weight export takes no_grad for the same reason): every FP8 run failed at its first rollout
    (results/gpu/h100_recipes35_lease7/). The same hand-over under no_grad."""
    import functools

    import torch
    from unsloth_zoo import vllm_utils

    unwrapped = getattr(vllm_utils.load_lora, "__wrapped__", None)  # None: a release that dropped the decorator
    if unwrapped is not None:
        model.load_lora = functools.partial(torch.no_grad()(unwrapped), model)
