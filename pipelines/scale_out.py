"""`python -m pipelines.scale_out`, for a checkout's documented commands: the CLI is grpo_playground.cli.scale_out
(`grpo-playground scale-out` once installed)."""

import sys

from grpo_playground.cli.scale_out import main

if __name__ == "__main__":
    sys.exit(main())
