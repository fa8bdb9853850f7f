"""`python -m pipelines.train`, kept so that a checkout's documented commands work: the CLI is grpo_playground.cli.train
(`grpo-playground train` once installed)."""

import sys

from grpo_playground.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
