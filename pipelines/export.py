"""`python -m pipelines.export`, kept so that a checkout's documented commands work: the CLI is grpo_playground.cli.export
(`grpo-playground export` once installed)."""

import sys

from grpo_playground.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
