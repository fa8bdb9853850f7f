"""Check that `tiny` is a good default: a short TRL SFT must teach it the format and keep its arithmetic.

    OMP_NUM_THREADS=1 python -m pipelines.check_tiny_sft --steps 150 --n-eval 600

Not the training pipeline (that is `pipelines.train`): a minimal TRL SFTTrainer run (full fine-tune, or
LoRA with --lora-r) on the generator's formatted solutions, prompts rendered through tiny's chat template
with the opening tag prefilled (the recipe's default), then greedy decoding on held-out TEST problems.
Prints one JSON line last: format rate (strict recipe regex) and accuracy before and after SFT.
"""

from __future__ import annotations

import argparse
import json
import time

from grpo_playground.data import load_examples
from grpo_playground.data.chat_template import render_examples
from grpo_playground.models import load_model_and_tokenizer
from grpo_playground.rewards.patterns import patterns_for
from grpo_playground.tags import DEFAULT_TAGS
from pipelines.build_tiny import greedy


def format_and_accuracy(model, tokenizer, rows: list[dict]) -> dict:
    """Strict-format rate and exact accuracy of greedy completions, overall and per level."""
    completions = greedy(model, tokenizer, [row["prompt"] for row in rows], max_new_tokens=200)
    patterns = patterns_for(DEFAULT_TAGS)
    matches = [patterns.strict_search(text) for text in completions]
    correct = [m is not None and m.text.strip() == row["answer"] for m, row in zip(matches, rows)]
    by_level = {}
    for level in sorted({row["level"] for row in rows}):
        picked = [c for c, row in zip(correct, rows) if row["level"] == level]
        by_level[str(level)] = round(sum(picked) / len(picked), 3)
    return {
        "format_rate": round(sum(m is not None for m in matches) / len(rows), 3),
        "accuracy": round(sum(correct) / len(rows), 3),
        "accuracy_by_level": by_level,
        "sample": completions[0],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lora-r", type=int, default=0, help="0: full fine-tune; >0: LoRA rank on all 7 projections")
    parser.add_argument("--n-train", type=int, default=4000)
    parser.add_argument("--n-eval", type=int, default=600)
    parser.add_argument("--output-dir", default="/tmp/check_tiny_sft")
    args = parser.parse_args(argv)

    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    torch.set_num_threads(1)
    model, tokenizer = load_model_and_tokenizer(args.model, device="cpu")
    train = render_examples(load_examples("generator:train", n=args.n_train, with_solution=True, seed=1).examples, tokenizer)
    evaluation = render_examples(load_examples("generator:test", n=args.n_eval).examples, tokenizer)
    before = format_and_accuracy(model, tokenizer, evaluation)
    print("before SFT:", json.dumps({k: v for k, v in before.items() if k != "sample"}), flush=True)

    peft_config = None
    if args.lora_r:
        from peft import LoraConfig

        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        peft_config = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules=targets, task_type="CAUSAL_LM")
    config = SFTConfig(
        output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, lr_scheduler_type="linear", warmup_steps=5, weight_decay=0.01, max_length=384,
        logging_steps=10, save_strategy="no", report_to="none", use_cpu=True, dataloader_num_workers=0,
        # TRL's defaults (bf16 autocast, gradient checkpointing) made a CPU step ~12x slower here
        bf16=False, gradient_checkpointing=False,
    )
    rows = [{"prompt": row["prompt"], "completion": row["completion"]} for row in train]
    trainer = SFTTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows),
                         processing_class=tokenizer, peft_config=peft_config)
    started = time.time()
    trainer.train()
    minutes = (time.time() - started) / 60
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    model = trainer.model.eval()
    after = format_and_accuracy(model, tokenizer, evaluation)
    print("sample after SFT:", after.pop("sample"))
    before.pop("sample")
    print(json.dumps({"model": args.model, "steps": args.steps, "lora_r": args.lora_r, "lr": args.lr,
                      "sft_minutes": round(minutes, 2), "loss_first": losses[0] if losses else None,
                      "loss_last": losses[-1] if losses else None, "n_eval": len(evaluation),
                      "before": before, "after": after}))


if __name__ == "__main__":
    main()
