"""`python -m pipelines.data`, kept so that a checkout's documented commands work: the CLI is grpo_playground.cli.data
(`grpo-playground data` once installed)."""

import sys

from grpo_playground.cli.data import main

if __name__ == "__main__":
    sys.exit(main())
