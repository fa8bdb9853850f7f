"""GRPO rollout probe without TRL: HF generate the way TRL 1.14.2 calls it (policy in training mode, gradient
checkpointing on, LoRA unmerged) versus the product's fix (checkpointing off around generation only,
grpo_playground.training.rollouts), on random-weight models shaped like SmolLM2-135M and Qwen3-0.6B.

    python -m benchmarks.rollout_probe [--rows 64] [--new-tokens 128] [--prompt-tokens 150] [--out FILE.json]

Needs only torch, transformers and peft (what the GPU image has): one short device call. For each shape it prints
the rollout time and generated tokens/s of both ways at the recorded baseline's batch (8 prompts x 8 generations,
128 new tokens), the memory-bandwidth floor of decoding (weight bytes per step / 4.3 TB/s), and a greedy
correctness check against a full recompute without any cache (TRL's way loses the context; the fix matches).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

HBM_BYTES_PER_S = 4.3e12
SHAPES = {
    # HuggingFaceTB/SmolLM2-135M-Instruct config.json
    "smollm2-135m-shape": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                         num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
                                         max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
                                         tie_word_embeddings=True)),
    # Qwen/Qwen3-0.6B config.json
    "qwen3-0.6b-shape": ("qwen3", dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                       max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                                       tie_word_embeddings=True)),
}
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


DEVICE = "cuda"


def build(shape: str):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    kind, fields = SHAPES[shape]
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (Qwen3Config, Qwen3ForCausalLM)
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = model_cls(config_cls(**fields)).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    # The product's LoRA (r 32, alpha 64, all seven projections), as TRL receives it.
    model = get_peft_model(model, LoraConfig(r=32, lora_alpha=64, target_modules=PROJECTIONS, task_type="CAUSAL_LM"))
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    model.train()  # Trainer's state while GRPO samples
    return model, params


def generate(model, prompts, new_tokens: int, cache_fix: bool, greedy: bool = False):
    import torch

    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=not greedy, use_cache=True,
                  pad_token_id=0)
    if not greedy:
        kwargs.update(temperature=0.9, top_p=1.0)
    with torch.no_grad():
        if cache_fix:  # what grpo_playground.training.rollouts does around TRL's generation
            model.gradient_checkpointing_disable()
            try:
                out = model.generate(input_ids=prompts, **kwargs)
            finally:
                model.gradient_checkpointing_enable()
        else:
            out = model.generate(input_ids=prompts, **kwargs)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return out[:, prompts.shape[1]:]


def timed(model, prompts, new_tokens, cache_fix, repeats=1):
    generate(model, prompts[:8], 8, cache_fix)  # warm-up: kernels, allocator
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = generate(model, prompts, new_tokens, cache_fix)
        best = min(best, time.perf_counter() - start)
    return best, out.numel()


def probe(shape: str, rows: int, new_tokens: int, prompt_tokens: int) -> dict:
    import torch

    model, params = build(shape)
    vocab = SHAPES[shape][1]["vocab_size"]
    g = torch.Generator(device=DEVICE).manual_seed(1)
    prompts = torch.randint(1, vocab, (rows, prompt_tokens), device=DEVICE, generator=g)
    result = {"shape": shape, "params": params, "rows": rows, "new_tokens": new_tokens, "prompt_tokens": prompt_tokens}
    for name, fix in (("trl_default", False), ("product_fix", True)):
        seconds, tokens = timed(model, prompts, new_tokens, fix)
        result[name] = {"rollout_s": round(seconds, 3), "tokens": tokens, "tok_s": round(tokens / seconds, 1)}
    result["speedup"] = round(result["product_fix"]["tok_s"] / result["trl_default"]["tok_s"], 2)
    weight_bytes = params * 2
    result["floor_tok_s"] = round(rows * HBM_BYTES_PER_S / weight_bytes)
    result["fix_share_of_floor"] = round(result["product_fix"]["tok_s"] / result["floor_tok_s"], 4)
    # Correctness: greedy tokens against a full recompute with no cache at all (eval mode, nothing dropped).
    few = prompts[:4, :min(32, prompt_tokens)]
    with torch.no_grad():
        model.eval()
        reference = model.generate(input_ids=few, max_new_tokens=16, min_new_tokens=16, do_sample=False,
                                   use_cache=False, pad_token_id=0)[:, few.shape[1]:]
        model.train()
    result["trl_default_matches_reference"] = bool(torch.equal(generate(model, few, 16, False, greedy=True), reference))
    result["product_fix_matches_reference"] = bool(torch.equal(generate(model, few, 16, True, greedy=True), reference))
    if DEVICE == "cuda":
        result["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        torch.cuda.empty_cache()
    del model
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rollout_probe", description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--rows", type=int, default=64, help="completions per rollout (8 prompts x 8 generations)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=150)
    parser.add_argument("--budget-s", type=float, default=150.0, help="skip the next shape after this many seconds")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a quick check of the script")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import torch
    import transformers

    global DEVICE
    DEVICE = args.device
    started = time.time()
    results = {"torch": torch.__version__, "transformers": transformers.__version__,
               "gpu": torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu", "probes": []}
    for shape in args.shapes.split(","):
        if time.time() - started > args.budget_s:
            print(f"{shape}: skipped (budget)", flush=True)
            continue
        results["probes"].append(probe(shape, args.rows, args.new_tokens, args.prompt_tokens))
        print(json.dumps(results["probes"][-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    print("| shape | rows x new tokens | TRL default s (tok/s) | product fix s (tok/s) | speedup | floor tok/s | "
          "TRL default correct | fix correct |")
    for r in results["probes"]:
        a, b = r["trl_default"], r["product_fix"]
        print(f"| {r['shape']} | {r['rows']} x {r['new_tokens']} | {a['rollout_s']} ({a['tok_s']:.0f}) | "
              f"{b['rollout_s']} ({b['tok_s']:.0f}) | {r['speedup']}x | {r['floor_tok_s']} | "
              f"{r['trl_default_matches_reference']} | {r['product_fix_matches_reference']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
