"""How often `tiny` copies its result into <SOLUTION> after sft-W (issue 20, item 4): SFT on the seed regime's 200
worked problems, then the copy rate on held-out prompts (grpo_playground.experiments.report.copy_rate). The generator's worked solutions
now end their reasoning with tiny's pretraining sentence `The answer is N.`, which is what makes the copy happen
(results/tiny_copy_rate.md: 3% copied without it, 90% with it).

    OMP_NUM_THREADS=1 python -m pipelines.experiments.copy_probe [STEPS] [WORK]   # 120, /tmp/copy_probe
"""

import json
import sys
from pathlib import Path

from grpo_playground.cli.args import EvalArgs, TrainArgs
from grpo_playground.config import load_recipe

from grpo_playground.experiments.children import run
from grpo_playground.experiments.data_sets import build_sets
from grpo_playground.experiments.report import copy_rate
from grpo_playground.experiments.seed_regime import parse_args

from pipelines.experiments.tiny_cpu_learning import ROOT

RECIPE = ROOT / "recipes" / "tiny-cpu.yaml"
HELD_OUT = "generator:test?levels=1-2"


def main(argv: list[str]) -> int:
    steps = int(argv[0]) if argv else 120
    root = Path(argv[1]) if len(argv) > 1 else Path("/tmp/copy_probe")
    args = parse_args(["--worked", "generator:train?levels=1-2", "--answers", "generator:train?levels=1-2",
                       "--eval-data", HELD_OUT, "--n-answers", "10", "--n-eval", "200"])
    build_sets(args, load_recipe(RECIPE), root / "data")  # the same W as the seed regime's
    worked = root / "data" / "worked.jsonl"
    # build_sets reads an existing W back: one written before the generator's cue would measure the old format
    if not all(r["generated_solution"].endswith(f"The answer is {r['expected_answer']}.")
               for r in map(json.loads, worked.open())):
        raise SystemExit(f"{worked} was written before the generator ended its reasoning with the cue: use a new WORK")
    run_dir = root / f"sft_worked_{steps}"
    if not (run_dir / "sft").exists():
        run(TrainArgs(RECIPE, run_dir=run_dir, stage="sft", overrides=(
            "tracking.swanlab=disabled", "grpo.enabled=false", f"data.sft_source=openmath:{worked}",
            f"sft.max_steps={steps}", "sft.num_train_epochs=1000")).command(), root / f"sft_worked_{steps}.log")
    out = root / f"eval_worked_{steps}.json"
    if not out.exists():
        run(EvalArgs((str(run_dir / "sft"),), HELD_OUT, 200, 64, 200, out=(out,)).command(), out.with_suffix(".log"))
    e = json.loads(out.read_text())
    result = {"steps": steps, "format_rate": e["format_rate"], "accuracy": e["accuracy"],
              "accuracy_se": e["accuracy_se"], "copy": copy_rate(e["completions"])}
    print(json.dumps(result), flush=True)
    (root / f"copy_probe_{steps}.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
