"""Evaluate a model on a data source: format rate, strict and lenient accuracy, length, re-check rate.

    grpo-playground eval --model tiny --data generator:test --n 200 [--batch-size 32] [--max-new-tokens 256] \
        [--out results.json]

MODEL: a registry name (tiny, smollm2-135m, ...), a local model folder, or a run's adapter folder (runs/<id>/sft,
runs/<id>/grpo: its run's recipe.yaml supplies the tags and the prefill setting). DATA: any source spec
(generator:test, gsm8k:PATH.jsonl, hub:openai/gsm8k, ...). Progress goes to stderr; the last stdout line is one
JSON object with the metrics (and their standard errors, `<metric>_se`).
"""

from __future__ import annotations

import json
import os
import sys

from grpo_playground.cli.args import EvalArgs


def main(argv: list[str] | None = None) -> int:
    args = EvalArgs.parse_args(argv)

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
