"""Write a recipe, or a run's SFT checkpoint, as a verl or OpenRLHF GRPO job (one GPU is not enough any more).

    grpo-playground scale-out --config smollm2 --out scale_out/smollm2
    grpo-playground scale-out --run runs/RUN_ID --out scale_out/RUN_ID [--set grpo.max_steps=500 ...] [--zip]

--run takes the run's own recipe and starts GRPO from its SFT adapter. The folder holds reward.py (the recipe's
rewards for both trainers), the data, verl_grpo.yaml + run_verl.sh, run_openrlhf.sh and a README saying what
does not carry over (grpo_playground.export.scale_out). Exit status: 0 written, 2 bad arguments or input.
"""

from __future__ import annotations

import sys

from grpo_playground.cli.args import ScaleOutArgs
from grpo_playground.contracts.process import fail, keep_traceback


def main(argv: list[str] | None = None) -> int:
    args = ScaleOutArgs.parse_args(argv)
    keep_traceback()  # in a job: why it died goes to the file its supervisor reads

    from grpo_playground.config import ConfigError, apply_overrides, load_recipe
    from grpo_playground.contracts.shipped import recipe_path
    from grpo_playground.export import scale_out
    from grpo_playground.contracts.layout import RECIPE_FILE

    try:
        if args.run is not None and not (args.run / RECIPE_FILE).is_file():
            raise FileNotFoundError(f"{args.run} has no {RECIPE_FILE}: give a run folder (runs/ID) or use --config")
        recipe = args.run / RECIPE_FILE if args.run is not None else recipe_path(args.config)
        cfg = apply_overrides(load_recipe(recipe), list(args.overrides))
        summary = scale_out.write(scale_out.plan(cfg, args.run), args.out, args.n_eval)
        archive = scale_out.zip_folder(args.out) if args.archive else None
    except (ConfigError, FileNotFoundError, FileExistsError, ValueError, RuntimeError) as error:
        return fail(str(error))
    print(f"wrote {args.out}{f' and {archive}' if archive else ''}: {summary['rows']['train']} training and "
          f"{summary['rows']['test']} held-out prompts, reward.py, run_verl.sh (verl {summary['verl']}), "
          f"run_openrlhf.sh (OpenRLHF {summary['openrlhf']})")
    for note in summary["not_carried_over"]:
        print(f"not carried over: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
