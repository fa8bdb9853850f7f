"""Memory of the GRPO log-prob pass on CPU: TRL's full-vocabulary path against the chunked one (grpo.logprobs).

A tiny Qwen3 with the real 151,936-token vocabulary and a LoRA, through the product's trainer
(training.grpo_trainer): per-token log-probs and entropies of rows x length completion tokens, then backward.
Each case runs in its own process; the figure is its peak resident memory above what it held before the pass
(ru_maxrss). The full path's grows with rows x length x vocabulary (float32 logits, their log-softmax and its
gradient); the chunked path's grows only until TRL's token chunk (2,048 tokens x 8,192 vocabulary rows) is full.

    OMP_NUM_THREADS=1 python -m benchmarks.logprob_memory            # a table of MiB by path, rows and length
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = [(4, 64), (8, 128), (16, 128), (32, 128), (64, 128)]  # rows x completion tokens
FULL_UP_TO = 2048  # tokens: beyond it the full path needs several GiB (64 x 128 would take ~15 GiB here)
VOCAB = 151936


def tiny_model(hidden: int = 32, layers: int = 2):
    """A random Qwen3 of the real vocabulary with LoRA on three projections (B non-zero, as after training)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from grpo_playground.models.shapes import QWEN3_COMMON

    torch.manual_seed(0)
    config = dict(QWEN3_COMMON, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_window_layers=layers)
    model = get_peft_model(Qwen3ForCausalLM(Qwen3Config(**config)),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    return model


def tiny_trainer(model, out: str, prompts: list[str], rows: int, completion: int, beta: float = 0.04, **options):
    """The product's GRPOTrainer on CPU for `model` (no rollouts run: callers give the batch)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from benchmarks.gpu_grpo import qwen3_tokenizer_files
    from grpo_playground.training.grpo_trainer import PlaygroundGRPOTrainer

    args = GRPOConfig(output_dir=out, per_device_train_batch_size=rows, num_generations=2,
                      max_completion_length=completion, beta=beta, loss_type="dr_grpo", use_cpu=True, bf16=False,
                      report_to="none", logging_steps=1, gradient_checkpointing=False)
    trainer = PlaygroundGRPOTrainer(
        model=model, reward_funcs=[lambda completions, **kw: [float(len(c) % 5) for c in completions]], args=args,
        processing_class=AutoTokenizer.from_pretrained(str(qwen3_tokenizer_files())),
        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]), **options)
    trainer.current_gradient_accumulation_steps = 1  # set by train(); the loss reads it
    return trainer


def measure(path: str, rows: int, length: int) -> dict:
    """Peak MiB of one log-prob forward + backward above the process's memory before it."""
    import torch

    torch.set_num_threads(1)
    model = tiny_model()
    with tempfile.TemporaryDirectory() as out:
        trainer = tiny_trainer(model, out, ["x"], rows, length, logprobs=path)
        ids = torch.randint(100, VOCAB - 1, (rows, 16 + length))
        mask = torch.ones_like(ids)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        logps, entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, length, compute_entropy=True)
        logps.sum().backward()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"path": path, "rows": rows, "length": length, "peak_growth_mib": (peak - before) / 1024}


def main() -> int:
    if len(sys.argv) == 4:  # one case, in a fresh process
        print(json.dumps(measure(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
        return 0
    root = Path(__file__).resolve().parents[1]
    results = []
    for rows, length in CASES:
        for path in ("full", "chunked") if rows * length <= FULL_UP_TO else ("chunked",):
            out = subprocess.run([sys.executable, "-m", "benchmarks.logprob_memory", path, str(rows), str(length)],
                                 cwd=root, capture_output=True, text=True, check=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
    print("| rows x length | float32 logits MiB | full path: peak growth MiB | chunked: peak growth MiB | chunked / full |")
    print("|---|---|---|---|---|")
    for rows, length in CASES:
        full, chunked = (next((r for r in results if (r["path"], r["rows"], r["length"]) == (p, rows, length)), None)
                         for p in ("full", "chunked"))
        logits = rows * length * VOCAB * 4 / 2**20
        shown = f"{full['peak_growth_mib']:,.0f}" if full else "not run"
        ratio = f"{chunked['peak_growth_mib'] / full['peak_growth_mib']:.2f}" if full else "-"
        print(f"| {rows} x {length} | {logits:,.0f} | {shown} | {chunked['peak_growth_mib']:,.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
