"""Time the pre-flight's sampling (training.preflight.sample_groups) one prompt per generate call, as it was, against
all prompts in left-padded calls, on the same model, prompts and machine; prints a table with the ratio.

    OMP_NUM_THREADS=1 python -m benchmarks.preflight_speed [--recipe recipes/quick.yaml] [--repeats 3] \
        [--out results/preflight_speed_cpu.json]

Each mode runs --repeats times on the recipe's own pre-flight prompts (grpo.preflight_prompts x num_generations,
its temperature and completion length); the median counts. Sampling differs between the modes only in the random
numbers drawn, so the completions' mean length is shown beside each time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from grpo_playground.config.recipe_io import load_recipe
from grpo_playground.data import load_examples
from grpo_playground.data.chat_template import render_prompt
from grpo_playground.training import preflight
from grpo_playground.training.backend import load_policy

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.preflight_speed", description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "quick.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    cfg = load_recipe(args.recipe)
    policy = load_policy(cfg, "sft")
    tags = cfg.rewards.tags
    examples = load_examples(cfg.data.eval_source, n=cfg.grpo.preflight_prompts, tags=tags, seed=cfg.data.seed).examples
    prompts = [render_prompt(policy.tokenizer, e["prompt"], tags, cfg.data.prefill_reasoning) for e in examples]
    batched_rows = preflight.PREFLIGHT_MAX_ROWS
    rows = {}
    for mode, max_rows in (("one prompt per call (before)", cfg.grpo.num_generations), ("batched", batched_rows)):
        preflight.PREFLIGHT_MAX_ROWS = max_rows
        times, lengths = [], []
        for repeat in range(args.repeats):
            torch.manual_seed(repeat)
            began = time.perf_counter()
            groups = preflight.sample_groups(policy, prompts, cfg)
            times.append(time.perf_counter() - began)
            completions = [c for g in groups for c in g]
            lengths.append(statistics.mean(len(policy.tokenizer(c)["input_ids"]) for c in completions))
        rows[mode] = {"median_s": round(statistics.median(times), 2), "times_s": [round(t, 2) for t in times],
                      "mean_completion_tokens": round(statistics.mean(lengths), 1)}
    preflight.PREFLIGHT_MAX_ROWS = batched_rows
    base = rows["one prompt per call (before)"]["median_s"]
    print(f"pre-flight sampling, {args.recipe.name}: {len(prompts)} prompts x {cfg.grpo.num_generations}, "
          f"up to {cfg.grpo.max_completion_length} tokens, {policy.device}, {torch.get_num_threads()} thread(s)")
    print("| mode | median s | runs s | mean completion tokens | x (before) |\n|---|---|---|---|---|")
    for mode, row in rows.items():
        print(f"| {mode} | {row['median_s']} | {', '.join(map(str, row['times_s']))} | {row['mean_completion_tokens']} "
              f"| {base / row['median_s']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"recipe": str(args.recipe.name), "prompts": len(prompts),
                                        "num_generations": cfg.grpo.num_generations, "device": policy.device,
                                        "threads": torch.get_num_threads(), "modes": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
