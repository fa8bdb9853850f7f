"""`grpo-playground COMMAND [ARGS]`: the installed console script; each command is one module of this package (its
arguments class's MODULE: cli/args.py; `data` is cli/data.py).

    grpo-playground train --config quick          # a shipped recipe's name or a recipe file
    grpo-playground eval --model tiny --n 20
    grpo-playground export --run runs/RUN_ID --gguf q4_k_m
    grpo-playground data --source generator:train --n 5
    grpo-playground scale-out --config smollm2 --out scale_out/smollm2
    grpo-playground compare --minutes 3 --n-worked 100 --n-answers 1000 --n-eval 200
"""

from __future__ import annotations

import importlib
import sys

from grpo_playground.cli.args import CLIS

COMMANDS = {"train": "train a run from a recipe (SFT then GRPO)", "eval": "evaluate a model on a data source",
            "export": "export a run or a model to GGUF", "data": "load a data source and show a sample",
            "scale-out": "write a recipe or a run as a verl / OpenRLHF GRPO job",
            "compare": "GRPO vs more SFT: the seed-regime experiment, every arm trained and scored"}


def usage() -> str:
    listing = "\n".join(f"  {name:<9} {what}" for name, what in COMMANDS.items())
    return f"usage: grpo-playground COMMAND [ARGS] (COMMAND --help for its arguments)\n\ncommands:\n{listing}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if not argv or argv[0] not in COMMANDS:
        unknown = f"\n\nerror: unknown command {argv[0]!r}: use one of {', '.join(COMMANDS)}" if argv else ""
        print(usage() + unknown, file=sys.stderr)
        return 2
    modules = {cli.COMMAND: cli.MODULE for cli in CLIS} | {"data": "grpo_playground.cli.data"}
    return importlib.import_module(modules[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
