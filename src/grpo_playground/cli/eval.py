"""Evaluate a model on a data source: format rate, strict and lenient accuracy, length, re-check rate.

    grpo-playground eval --model tiny --data generator:test --n 200 [--batch-size 32] [--max-new-tokens 256] \
        [--out results.json]

MODEL: a registry name (tiny, smollm2-135m, ...), a local model folder, or a run's adapter folder (runs/<id>/sft,
runs/<id>/grpo: its run's recipe.yaml supplies the tags and the prefill setting). DATA: any source spec
(generator:test, gsm8k:PATH.jsonl, hub:openai/gsm8k, ...). Progress goes to stderr; the last stdout line is one
JSON object with the metrics (and their standard errors, `<metric>_se`). Repeat --model (and --out) to evaluate
several checkpoints in one process: with --backend vllm a base and its run's adapters share one engine start.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from grpo_playground.cli.args import EvalArgs
from grpo_playground.contracts.process import fail, keep_traceback, write_json_atomic


def main(argv: list[str] | None = None) -> int:
    args = EvalArgs.parse_args(argv)
    keep_traceback()  # in a job: why it died goes to the file its supervisor reads
    if args.out and len(args.out) != len(args.model):
        EvalArgs.parser().error(f"{len(args.model)} --model but {len(args.out)} --out: give one --out per --model, or none")

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from grpo_playground.eval.runner import evaluate_each

    try:
        results = evaluate_each(
            args.model, backend=args.backend, device=args.device, data=args.data, n=args.n,
            batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, prefill_reasoning=args.prefill,
            enable_thinking=args.enable_thinking, seed=args.seed,
        )
        for i, result in enumerate(results):
            if args.out:
                _write(args.out[i], result)
            _report(result)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        return fail(str(error))
    return 0


def _write(out: Path, result: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, result)  # a reader (the UI) never sees a half-written file
    print(f"wrote {out}", file=sys.stderr)


def _report(result: dict) -> None:
    """A sample and the rates on stderr; the summary as one JSON line on stdout."""
    from grpo_playground.eval.runner import summary_line

    sample = result["completions"][0]
    print(f"sample: {sample['problem'][:120]!r}\n  -> {sample['text'][:300]!r} (gold {sample['answer']})", file=sys.stderr)
    print(f"n={result['n']}  " + "  ".join(
        f"{k} {result[k]:.3f}±{result[k + '_se']:.3f}" for k in ("format_rate", "accuracy", "lenient_accuracy", "recheck_rate")
    ) + f"  tokens {result['mean_completion_tokens']:.1f}", file=sys.stderr)
    for level, row in result.get("per_level", {}).items():
        print(f"  level {level}: n={row['n']} accuracy {row['accuracy']:.3f}±{row['accuracy_se']:.3f} format {row['format_rate']:.3f}", file=sys.stderr)
    print(json.dumps(summary_line(result)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
