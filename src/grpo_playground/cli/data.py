"""Load a data source into the normalized example form: print counts, skipped rows by reason, and a sample.

    grpo-playground data --source generator:train --n 1000 [--sft] [--out examples.jsonl]
    grpo-playground data --source "gsm8k:path/test.jsonl" --n 100
    grpo-playground data --source "file:my.csv?question=q&answer=a&solution=work" --sft
    grpo-playground data --source generator:test --n 1 --model tiny [--no-prefill] [--enable-thinking]

--sft adds the tagged worked solution (`completion`), the SFT target; rows without one are skipped and counted.
--model also prints how that model's tokenizer splits the format tags and the exact prompt its chat template
renders for the first example (what the model will see), with notes on prefill and thinking.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grpo_playground.data import load_examples
from grpo_playground.tags import Tags


def report_template(model: str, example: dict, tags: Tags, prefill: bool, enable_thinking: bool) -> None:
    from grpo_playground.data.chat_template import template_report
    from grpo_playground.data.tag_tokens import format_report, tag_token_report
    from grpo_playground.models import load_tokenizer

    tokenizer = load_tokenizer(model)
    print(f"tag tokens in {model}'s tokenizer:\n{format_report(tag_token_report(tokenizer, tags))}")
    report = template_report(tokenizer, example, tags, prefill, enable_thinking)
    print(f"rendered prompt (what {model} sees before its first token):\n{report.prompt}")
    print(f"assistant prefix: {report.assistant_prefix!r}   turn end: {report.turn_end!r}")
    for note in report.notes:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grpo-playground data", description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, help="source spec, e.g. generator:train or gsm8k:PATH.jsonl")
    parser.add_argument("--n", type=int, default=None, help="number of examples (default: all; generator: 1000)")
    parser.add_argument("--sft", action="store_true", help="include the tagged worked solution (SFT target)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    parser.add_argument("--tags", nargs=4, metavar=("REASONING_START", "REASONING_END", "SOLUTION_START", "SOLUTION_END"),
                        help="format tags (default: the recipe's)")
    parser.add_argument("--out", type=Path, default=None, help="write the examples as JSONL")
    parser.add_argument("--model", default=None, help="also report tag tokens and the rendered prompt for this model")
    parser.add_argument("--prefill", action=argparse.BooleanOptionalAction, default=True,
                        help="prefill the opening reasoning tag (default on, as RunConfig)")
    parser.add_argument("--enable-thinking", action="store_true", help="Qwen3 templates: leave the thinking switch on")
    args = parser.parse_args(argv)

    try:
        tags = Tags(*args.tags) if args.tags else Tags()
        result = load_examples(args.source, n=args.n, tags=tags, with_solution=args.sft, seed=args.seed)
    except (ValueError, FileNotFoundError, RuntimeError, ModuleNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(result.summary())
    if result.examples:
        sample = result.examples[0]
        print("sample:")
        for message in sample["prompt"] + sample.get("completion", []):
            print(f"  [{message['role']}] {message['content']}")
        print(f"  [answer] {sample['answer']}   [level] {sample['level']}")
        levels = sorted({e["level"] for e in result.examples if e["level"] is not None})
        if levels:
            counts = {level: sum(e["level"] == level for e in result.examples) for level in levels}
            print(f"levels: {counts}")
    if args.model and result.examples:
        report_template(args.model, result.examples[0], tags, args.prefill, args.enable_thinking)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", encoding="utf-8") as f:
            for example in result.examples:
                f.write(json.dumps(example, ensure_ascii=False) + "\n")
        print(f"wrote {len(result.examples)} examples to {args.out}")
    print(json.dumps({"examples": len(result.examples), "rows_seen": result.rows_seen, "skipped": result.skipped}))
    return 0 if result.examples else 1


if __name__ == "__main__":
    sys.exit(main())
