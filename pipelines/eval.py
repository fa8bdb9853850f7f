"""`python -m pipelines.eval`, kept so that a checkout's documented commands work: the CLI is grpo_playground.cli.eval
(`grpo-playground eval` once installed)."""

import sys

from grpo_playground.cli.eval import main

if __name__ == "__main__":
    sys.exit(main())
