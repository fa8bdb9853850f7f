"""Load a data source into the normalized example form: print counts, skipped rows by reason, and a sample.

    python -m pipelines.data --source generator:train --n 1000 [--sft] [--out examples.jsonl]
    python -m pipelines.data --source "gsm8k:path/test.jsonl" --n 100
    python -m pipelines.data --source "file:my.csv?question=q&answer=a&solution=work" --sft

--sft adds the tagged worked solution (`completion`), the SFT target; rows without one are skipped and counted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grpo_playground.data import load_examples
from grpo_playground.tags import Tags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.data", description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, help="source spec, e.g. generator:train or gsm8k:PATH.jsonl")
    parser.add_argument("--n", type=int, default=None, help="number of examples (default: all; generator: 1000)")
    parser.add_argument("--sft", action="store_true", help="include the tagged worked solution (SFT target)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    parser.add_argument("--tags", nargs=4, metavar=("REASONING_START", "REASONING_END", "SOLUTION_START", "SOLUTION_END"),
                        help="format tags (default: the recipe's)")
    parser.add_argument("--out", type=Path, default=None, help="write the examples as JSONL")
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
