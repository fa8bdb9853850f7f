"""Evaluate a model on a data source: format rate, strict and lenient accuracy, length, re-check rate.

    python -m pipelines.eval --model tiny --data generator:test --n 200 [--batch-size 32] [--max-new-tokens 256] \
        [--out results.json]

MODEL: a registry name (tiny, smollm2-135m, ...), a local model folder, or a run's adapter folder (runs/<id>/sft,
runs/<id>/grpo: its run's recipe.yaml supplies the tags and the prefill setting). DATA: any source spec
(generator:test, gsm8k:PATH.jsonl, hub:openai/gsm8k, ...). Progress goes to stderr; the last stdout line is one
JSON object with the metrics (and their standard errors, `<metric>_se`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.eval", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="registry name, local model folder, or run adapter folder")
    parser.add_argument("--data", default="generator:test", help="source spec (default generator:test)")
    parser.add_argument("--n", type=int, default=100, help="number of examples (default 100)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--prefill", action=argparse.BooleanOptionalAction, default=None,
                        help="prefill the opening reasoning tag (default: the run's recipe, else on)")
    parser.add_argument("--enable-thinking", action="store_true", help="Qwen3 templates: leave the thinking switch on")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    parser.add_argument("--backend", default="transformers")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda when available)")
    parser.add_argument("--out", type=Path, default=None, help="write the full results (every completion) as JSON")
    args = parser.parse_args(argv)

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from grpo_playground.eval import evaluate, summary_line

    try:
        result = evaluate(
            args.model, args.data, n=args.n, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
            prefill_reasoning=args.prefill, enable_thinking=args.enable_thinking, seed=args.seed,
            backend=args.backend, device=args.device,
        )
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(args.out.suffix + ".tmp")
        tmp.write_text(json.dumps(result, indent=1, ensure_ascii=False))
        tmp.replace(args.out)  # a reader (the UI) never sees a half-written file
        print(f"wrote {args.out}", file=sys.stderr)
    sample = result["completions"][0]
    print(f"sample: {sample['problem'][:120]!r}\n  -> {sample['text'][:300]!r} (gold {sample['answer']})", file=sys.stderr)
    print(f"n={result['n']}  " + "  ".join(
        f"{k} {result[k]:.3f}±{result[k + '_se']:.3f}" for k in ("format_rate", "accuracy", "lenient_accuracy", "recheck_rate")
    ) + f"  tokens {result['mean_completion_tokens']:.1f}", file=sys.stderr)
    for level, row in result.get("per_level", {}).items():
        print(f"  level {level}: n={row['n']} accuracy {row['accuracy']:.3f}±{row['accuracy_se']:.3f} format {row['format_rate']:.3f}", file=sys.stderr)
    print(json.dumps(summary_line(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
