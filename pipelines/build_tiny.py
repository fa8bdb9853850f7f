"""Build the embedded `tiny` model in assets/tiny: tokenizer, Qwen3 weights, README with the numbers reached.

    OMP_NUM_THREADS=1 python -m pipelines.build_tiny --out assets/tiny

Pretrains a ~1M-parameter Qwen3ForCausalLM from scratch on the generator's TRAIN
problems rendered as chat conversations whose answers are plain-language solutions ending
"The answer is N." (no format tags). Then it measures, on held-out TEST problems with greedy decoding:
- plain accuracy: "The answer is N" equals the gold answer (what the base model has learned);
- format rate with the recipe's system prompt and prefilled opening tag (near 0: SFT must teach it).
Training takes about 12 CPU minutes on one thread (1800 steps; more wall-clock on a busy machine);
`--device cuda` builds the same in under a minute where a GPU exists (how assets/tiny was built).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import time
from pathlib import Path

from grpo_playground.data.chat_template import render_prompt
from grpo_playground.data.generator import Problem, generate_problems
from grpo_playground.models import tiny_build
from grpo_playground.rewards.patterns import patterns_for
from grpo_playground.tags import DEFAULT_TAGS, system_prompt

ANSWER_IS = re.compile(r"The answer is (-?\d+)")
LIMIT_MB = 20  # assets/tiny must stay small enough to commit


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("assets/tiny"), help="output folder")
    parser.add_argument("--steps", type=int, default=1800,
                        help="optimizer steps (1800 x batch 16: about 12 CPU minutes on one thread); 0: use --minutes")
    parser.add_argument("--minutes", type=float, default=11.0,
                        help="with --steps 0: a budget in CPU minutes of this process (not wall-clock: on a shared "
                        "machine the same budget buys the same steps); the learning-rate schedule follows its used share")
    parser.add_argument("--batch-size", type=int, default=16, help="small batches: more updates for the same CPU time")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (cosine decay to 10%%)")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--vocab-size", type=int, default=1000, help="BPE vocabulary before the 4 tag tokens")
    parser.add_argument("--n-train", type=int, default=50_000, help="distinct training problems")
    parser.add_argument("--level-weights", default="3,3,2,1,1",
                        help="relative share of levels 1..5 in pretraining: short problems teach the arithmetic "
                        "with fewer tokens, so easy levels get more of the small budget")
    parser.add_argument("--eval-n", type=int, default=600, help="held-out test problems to measure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared: keep 1)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda to build faster where a GPU exists (use --steps)")
    return parser.parse_args(argv)


def tokenizer_texts(problems: list[Problem]) -> list[str]:
    """Raw text for BPE training: the pieces of the conversations, not the ChatML markup around them."""
    rng = random.Random(0)
    # Role names open every turn: weight them like the markup does, so each becomes one token.
    texts = ["system\n", "user\n", "assistant\n"] * 2000 + [system_prompt(DEFAULT_TAGS), *tiny_build.GENERIC_SYSTEM_PROMPTS]
    for problem in problems[:20_000]:
        for message in tiny_build.conversation(problem, rng):
            texts.append(message["content"])
    return texts


def batches(lengths: list[int], batch_size: int, rng: random.Random):
    """Endless batches of similar-length examples (less padding): shuffle, sort within chunks, shuffle batches."""
    order = list(range(len(lengths)))
    while True:
        rng.shuffle(order)
        chunk = batch_size * 50
        result = []
        for start in range(0, len(order), chunk):
            part = sorted(order[start : start + chunk], key=lengths.__getitem__)
            result += [part[i : i + batch_size] for i in range(0, len(part) - batch_size + 1, batch_size)]
        rng.shuffle(result)
        yield from result


def pretrain(model, encoded: list[list[int]], pad_id: int, args) -> dict:
    import torch

    rng = random.Random(args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))

    budget_s = args.minutes * 60

    def progress(step: int, elapsed: float) -> float:
        """Share of the run done: by steps when a step count is fixed, else by CPU time used."""
        return step / args.steps if args.steps else elapsed / budget_s

    def lr_at(step: int, done: float) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(done, 1.0))))  # cosine to 10%

    model.train()
    started, cpu_started = time.time(), time.process_time()
    losses: list[float] = []
    stream = batches([len(e) for e in encoded], args.batch_size, rng)
    step = 0
    while progress(step, time.process_time() - cpu_started) < 1:
        rows = [encoded[i] for i in next(stream)]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad_id)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        labels = ids.masked_fill(mask == 0, -100)
        ids, mask, labels = ids.to(model.device), mask.to(model.device), labels.to(model.device)
        lr = lr_at(step, progress(step, time.process_time() - cpu_started))
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        step += 1
        if step % 50 == 1:
            elapsed = time.time() - started
            recent = sum(losses[-50:]) / len(losses[-50:])
            cpu = time.process_time() - cpu_started
            print(f"step {step:5d}  loss {recent:.4f}  lr {lr:.2e}  {elapsed / step:.3f} s/step  "
                  f"{elapsed / 60:.1f} min wall, {cpu / 60:.1f} min CPU", flush=True)
    model.eval()
    return {
        "steps": step,
        "first_loss": round(sum(losses[:20]) / len(losses[:20]), 4),
        "final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "train_minutes": round((time.time() - started) / 60, 2),
        "train_cpu_minutes": round((time.process_time() - cpu_started) / 60, 2),
    }


def greedy(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 100) -> list[str]:
    """Greedy completions of already-rendered prompts (left padding, special tokens dropped like TRL)."""
    import torch

    tokenizer.padding_side = "left"
    outputs = []
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer(prompts[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
        batch = batch.to(model.device)
        with torch.no_grad():
            generated = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
        outputs += tokenizer.batch_decode(generated[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return outputs


def evaluate_base(model, tokenizer, problems: list[Problem]) -> dict:
    """Plain-language accuracy (generic system prompt) and recipe format rate (recipe prompt, tag prefilled)."""
    plain_prompts = [
        render_prompt(tokenizer, [{"role": "system", "content": tiny_build.GENERIC_SYSTEM_PROMPTS[0]},
                                  {"role": "user", "content": p.question}], prefill_reasoning=False)
        for p in problems
    ]
    plain = greedy(model, tokenizer, plain_prompts, max_new_tokens=200)
    correct = [bool((m := ANSWER_IS.search(text)) and m.group(1) == p.answer) for text, p in zip(plain, problems)]

    recipe_prompts = [
        render_prompt(tokenizer, [{"role": "system", "content": system_prompt(DEFAULT_TAGS)},
                                  {"role": "user", "content": p.question}], prefill_reasoning=True)
        for p in problems
    ]
    recipe = greedy(model, tokenizer, recipe_prompts, max_new_tokens=200)
    patterns = patterns_for(DEFAULT_TAGS)
    formatted = [patterns.strict_search(text) is not None for text in recipe]

    by_level = {}
    for level in sorted({p.level for p in problems}):
        picked = [c for c, p in zip(correct, problems) if p.level == level]
        by_level[str(level)] = round(sum(picked) / len(picked), 3)
    return {
        "eval_n": len(problems),
        "plain_accuracy": round(sum(correct) / len(problems), 3),
        "plain_accuracy_by_level": by_level,
        "recipe_format_rate": round(sum(formatted) / len(problems), 3),
        "sample_plain": plain[0],
        "sample_recipe_prompt": recipe[0],
    }


def write_readme(out: Path, metrics: dict, command: str) -> None:
    levels = ", ".join(f"level {k}: {v:.1%}" for k, v in metrics["plain_accuracy_by_level"].items())
    (out / "README.md").write_text(
        f"""# tiny: the embedded default model

A {metrics['parameters'] / 1e6:.2f}M-parameter Qwen3ForCausalLM ({tiny_build.ARCHITECTURE['num_hidden_layers']} layers,
hidden {tiny_build.ARCHITECTURE['hidden_size']}, tied embeddings) with its own byte-level BPE tokenizer
({metrics['vocab_size']} tokens, digits one per token, ChatML special tokens, the four format tags as ordinary
added tokens). Pretrained from scratch on the built-in generator's TRAIN problems as chat conversations
with plain-language solutions and NO format tags: it solves problems in prose but does not speak the format.
Why and how: docs/tiny_model.md.

Built with (on {metrics['device']}: {metrics['steps']} steps, {metrics['train_minutes']:.1f} min wall-clock):

    {command}

The same command runs on one CPU thread without `--device`: about 0.4 s of CPU per step at batch 16, so
about 12 CPU minutes for 1800 steps (wall-clock grows with the machine's load).

## Numbers reached (greedy, {metrics['eval_n']} held-out TEST problems, levels 1-5 equally mixed)
| measure | value |
|---|---|
| training loss (first 20 steps -> last 50 steps) | {metrics['first_loss']} -> {metrics['final_loss']} |
| steps x batch | {metrics['steps']} x {metrics['batch_size']} (levels 1..5 mixed {':'.join(f"{w:g}" for w in metrics['level_weights'])}) |
| plain accuracy ("The answer is N" correct, generic system prompt) | {metrics['plain_accuracy']:.1%} ({levels}) |
| format rate with the recipe's system prompt, `{DEFAULT_TAGS.reasoning_start}` prefilled | {metrics['recipe_format_rate']:.1%} |

All numbers: metrics.json.
"""
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch
    from transformers import GenerationConfig, Qwen3ForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    weights = [float(w) for w in args.level_weights.split(",")]
    problems = generate_problems(args.n_train, split="train", seed=args.seed, weights=weights)
    tokenizer = tiny_build.train_tokenizer(tokenizer_texts(problems), args.vocab_size)
    rng = random.Random(args.seed)
    texts = [tokenizer.apply_chat_template(tiny_build.conversation(p, rng), tokenize=False) for p in problems]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    lengths = sorted(len(e) for e in encoded)
    print(f"tokenizer: {len(tokenizer)} tokens; conversation length median {lengths[len(lengths) // 2]}, max {lengths[-1]}")

    model = Qwen3ForCausalLM(tiny_build.model_config(tokenizer)).to(args.device)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"model: {parameters:,} parameters")
    metrics = {"parameters": parameters, "vocab_size": len(tokenizer), "batch_size": args.batch_size,
               "lr": args.lr, "seed": args.seed, "level_weights": weights, "device": args.device}
    metrics |= pretrain(model, encoded, tokenizer.pad_token_id, args)

    # Saved before the evaluation, so a run cut short still leaves a usable model.
    args.out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        eos_token_id=[tokenizer.eos_token_id, tokenizer.pad_token_id], pad_token_id=tokenizer.pad_token_id,
        do_sample=True, temperature=0.8, top_p=0.95, max_new_tokens=256,  # the recipe's inference settings
    )
    model.to("cpu").save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    metrics |= evaluate_base(model.to(args.device), tokenizer, generate_problems(args.eval_n, split="test", seed=args.seed))
    print(json.dumps({k: v for k, v in metrics.items() if not k.startswith("sample")}))
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    command = "OMP_NUM_THREADS=1 python -m pipelines.build_tiny " + " ".join(argv or __import__("sys").argv[1:])
    write_readme(args.out, metrics, command.strip())
    size_mb = sum(f.stat().st_size for f in args.out.iterdir()) / 2**20
    if size_mb > LIMIT_MB:
        raise SystemExit(f"{args.out} is {size_mb:.1f} MB, over the {LIMIT_MB} MB limit: shrink the model")
    print(args.out)


if __name__ == "__main__":
    main()
