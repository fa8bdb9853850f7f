"""GRPO vs more SFT in the seed's data regime: sft-W, then GRPO on answer-only problems against more SFT for the
same minutes, every arm scored on the same held-out prompts (grpo_playground.experiments.seed_regime says how).

    grpo-playground compare [--recipe recipes/tiny-cpu.yaml] [--minutes 10] [--n-worked 200] [--n-answers 4000] \
        [--n-eval 600] [--work runs/seed_regime] [--out results/learning_seed_regime_cpu] [--set SECTION.KEY=VALUE]

The app's "GRPO vs more SFT" panel runs this command as a job; `--help` lists every argument.
"""

from __future__ import annotations

import sys

from grpo_playground.experiments.seed_regime import main

if __name__ == "__main__":
    sys.exit(main())
