"""A GRPO step's rollout batch through a plain `vllm.LLM.generate`, beside the rollout inside the step.

The GRPO benchmark (benchmarks.gpu_grpo) times the rollout TRL's colocated vLLM does inside each step. This runs the
same batch (the product's generator prompts in the model's chat template, prompts x G rows, the step's temperature
and length) on its own engine, two ways on one engine:
  trl    what TRL 1.14.2's colocate mode asks: every row its own request (n=1, prompts repeated G times), logprobs=0;
  plain  what a hand-written rollout asks: each prompt once with n=G, no logprobs.
`--engine trl` builds the engine as TRL does (max_num_batched_tokens 4096, logprobs_mode processed_logprobs, seed
0); `--engine plain` with vLLM's defaults. Random-weight shapes never emit EOS: pass --ignore-eos for exact counts.

    python -m benchmarks.vllm_rollout --model smollm2-135m --prompts 8 --generations 8 --tokens 128 --out r.json

A file, not a script fed on stdin: vLLM's engine subprocess re-imports __main__ by path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REQUESTS = ("trl", "plain")
ENGINES = ("trl", "plain")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_rollout", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a registry name (smollm2-135m) or an HF folder")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128, help="max new tokens (the step's max_completion_length)")
    parser.add_argument("--temperature", type=float, default=0.9)
    parser.add_argument("--share", type=float, default=0.1, help="gpu_memory_utilization")
    parser.add_argument("--max-model-len", type=int, default=None, help="default: tokens + 1024, as the benchmark recipes")
    parser.add_argument("--engine", choices=ENGINES, default="trl")
    parser.add_argument("--repeats", type=int, default=3, help="timed batches per request kind, after one warm-up")
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    for name in ("prompts", "generations", "tokens", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def batch_prompts(tokenizer, n: int) -> list[list[int]]:
    """The product's GRPO prompts (generator:train, default tags, reasoning prefilled) as token ids."""
    from grpo_playground.config import RunConfig
    from grpo_playground.data import load_examples
    from grpo_playground.data.chat_template import render_examples

    cfg = RunConfig()
    loaded = load_examples("generator:train", n=n, tags=cfg.rewards.tags, seed=cfg.data.seed)
    rows = render_examples(loaded.examples, tokenizer, cfg.rewards.tags, cfg.data.prefill_reasoning)
    return [tokenizer(row["prompt"], add_special_tokens=False)["input_ids"] for row in rows]


def requests(kind: str, prompt_ids: list[list[int]], generations: int) -> tuple[list[dict], int]:
    """(vLLM prompts, n) for one request kind."""
    if kind == "trl":
        return [{"prompt_token_ids": ids} for ids in prompt_ids for _ in range(generations)], 1
    return [{"prompt_token_ids": ids} for ids in prompt_ids], generations


def summarize(kind: str, seconds: list[float], tokens: list[int]) -> dict:
    return {"request": kind, "median_s": statistics.median(seconds), "tokens": statistics.median(tokens),
            "tok_s": statistics.median(t / s for t, s in zip(tokens, seconds)), "runs_s": [round(s, 3) for s in seconds]}


def table(results: list[dict]) -> str:
    lines = ["| engine | request | median s | tokens | tok/s | x trl request |", "|---|---|---|---|---|---|"]
    base = next((r["tok_s"] for r in results if r["request"] == "trl"), None)
    for r in results:
        ratio = f"{r['tok_s'] / base:.2f}" if base else "-"
        lines.append(f"| {r['engine']} | {r['request']} | {r['median_s']:.3f} | {r['tokens']:.0f} | {r['tok_s']:,.0f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from vllm import LLM, SamplingParams

    from grpo_playground.models import hf_dir

    location = str(hf_dir(args.model)) if not Path(args.model).is_dir() else args.model
    engine = dict(max_num_batched_tokens=4096, logprobs_mode="processed_logprobs", seed=0) if args.engine == "trl" else {}
    started = time.perf_counter()
    llm = LLM(model=location, gpu_memory_utilization=args.share, dtype="bfloat16",
              max_model_len=args.max_model_len or args.tokens + 1024, **engine)
    engine_s = time.perf_counter() - started
    from transformers import AutoTokenizer

    prompt_ids = batch_prompts(AutoTokenizer.from_pretrained(location), args.prompts)  # the trainer's tokenizer
    results = []
    for kind in REQUESTS:
        prompts, n = requests(kind, prompt_ids, args.generations)
        params = SamplingParams(n=n, temperature=args.temperature, top_p=1.0, max_tokens=args.tokens,
                                ignore_eos=args.ignore_eos, **({"logprobs": 0} if kind == "trl" else {}))
        llm.generate(prompts, params, use_tqdm=False)  # warm-up: the batch shape's graphs and sampler
        seconds, tokens = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            outputs = llm.generate(prompts, params, use_tqdm=False)
            seconds.append(time.perf_counter() - t0)
            tokens.append(sum(len(c.token_ids) for o in outputs for c in o.outputs))
        results.append({"engine": args.engine, **summarize(kind, seconds, tokens)})
    print(table(results))
    if args.out:
        import torch

        args.out.write_text(json.dumps({"model": args.model, "card": torch.cuda.get_device_name(0),
                                        "prompts": args.prompts, "generations": args.generations,
                                        "tokens": args.tokens, "engine_start_s": round(engine_s, 1),
                                        "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
