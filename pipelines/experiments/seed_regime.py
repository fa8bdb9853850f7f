"""`python -m pipelines.experiments.seed_regime`, kept so that a checkout's documented commands (BENCHMARKS.md,
results/*.md) work: the experiment is grpo_playground.experiments (`grpo-playground compare` once installed)."""

import sys

from grpo_playground.experiments.seed_regime import main

if __name__ == "__main__":
    sys.exit(main())
