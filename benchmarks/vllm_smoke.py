"""Does the carried vLLM generate on this GPU? SmolLM2-135M bf16, 64 prompts x 128 tokens, throughput printed last.

    python -m benchmarks.vllm_smoke          # prints "VLLM_SMOKE ok: N tokens in S s = T tok/s" on success

A file, not a script fed on stdin: vLLM's engine subprocess re-imports __main__ by path and fails on '<stdin>'.
"""

from __future__ import annotations

import time


def main() -> None:
    from vllm import LLM, SamplingParams

    from grpo_playground.models import hf_dir

    llm = LLM(model=str(hf_dir("smollm2-135m")), gpu_memory_utilization=0.1, max_model_len=1024, dtype="bfloat16",
              seed=0)
    prompts = [f"Question {i}: what is {i} plus {2 * i}? Think step by step." for i in range(64)]
    params = SamplingParams(max_tokens=128, temperature=0.9, ignore_eos=True)
    llm.generate(prompts[:8], params)  # warm-up
    started = time.perf_counter()
    outputs = llm.generate(prompts, params)
    seconds = time.perf_counter() - started
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(f"VLLM_SMOKE ok: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.0f} tok/s (64 x 128, SmolLM2-135M bf16)")


if __name__ == "__main__":
    main()
