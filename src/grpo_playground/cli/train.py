"""Train a run from a recipe: SFT then GRPO (or one stage), writing everything into the run's folder.

    OMP_NUM_THREADS=1 grpo-playground train --config recipes/tiny-cpu.yaml [--stage all|sft|grpo|preflight] \
        [--runs-dir runs | --run-dir runs/ID] [--resume] [--set grpo.max_steps=20 ...]

Also `python -m grpo_playground.cli.train` (and `python -m pipelines.train` in a checkout). --config takes a recipe
file or the name of a shipped recipe (quick, tiny-cpu, smollm2, qwen3-8b), so an installed package trains without
a checkout. --run-dir uses (or creates) that folder; otherwise a new folder <runs-dir>/<time>-<name>-<hex> is made.
--resume continues the run in --run-dir from its last checkpoint (the step count continues).
--stage preflight only samples a few groups from the model and writes preflight.json.
The run folder's path is the last line printed. Exit status: 0 finished or stopped, 1 failed, 2 bad arguments.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from grpo_playground.cli.args import TrainArgs
from grpo_playground.contracts.process import keep_traceback
from grpo_playground.contracts.shipped import recipe_path
from grpo_playground.contracts.layout import RECIPE_FILE, TRACEBACK_FILE
from grpo_playground.run_layout import RUNS_DIR_ENV, new_run_id, runs_dir


def main(argv: list[str] | None = None) -> int:
    from grpo_playground.config import override_keys_help  # torch-free: --help lists every key --set takes

    args = TrainArgs.parse_args(argv, epilog=override_keys_help())
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from grpo_playground.config import ConfigError, apply_overrides, load_recipe

    try:
        cfg = apply_overrides(load_recipe(recipe_path(args.config)), args.overrides)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.resume and args.run_dir is None:
        print("error: --resume needs --run-dir (the folder of the run to continue)", file=sys.stderr)
        return 2
    if args.runs_dir is not None:
        os.environ[RUNS_DIR_ENV] = str(args.runs_dir)

    run_dir = args.run_dir or runs_dir() / new_run_id(cfg.name)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    keep_traceback(Path(run_dir) / TRACEBACK_FILE)  # a crash past here (an import, a bug) says why in that file

    from grpo_playground.training.job import run_job

    if cfg.hardware.num_gpus > 1:  # one process per GPU under `accelerate launch`, all in this run folder
        from grpo_playground.training.multigpu import exec_command, relaunch_command, visible_cuda_gpus

        argv = list(sys.argv[1:] if argv is None else argv)
        try:
            command = relaunch_command(cfg.hardware.num_gpus, TrainArgs.MODULE,
                                       argv + ([] if args.run_dir else ["--run-dir", str(run_dir)]), visible_cuda_gpus())
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if command:
            exec_command(command)
    # The app saved the recipe into the run folder and runs it from there: the job reads it and leaves it as it is.
    in_folder = args.config.resolve() == (Path(run_dir) / RECIPE_FILE).resolve() and not args.overrides
    state = run_job(cfg, run_dir, args.stage, args.resume, recipe_saved=in_folder)
    print(Path(run_dir).resolve(), flush=True)
    return 1 if state == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
