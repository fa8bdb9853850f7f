"""Time a training job from Start to its end with every process a fresh interpreter (cold) against its supervisor and
step forked from the warm launcher (jobs.warm_start), on the same recipe and machine; prints a table with the ratio.

    OMP_NUM_THREADS=1 python -m benchmarks.warm_start [--recipe recipes/tiny-cpu.yaml] [--repeats 3] \
        [--out results/warm_start_cpu.json]

The job is the recipe's SFT stage cut to one step (what the first seconds of every job cost: the interpreter, the
imports, the model); the modes alternate, cold first, and the median counts. The launcher is made ready before the
first warm job (an app pays that once, beside its first job).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.config import apply_overrides, load_recipe
from grpo_playground.jobs import warm_start
from grpo_playground.jobs.control import create_run, spawn_job, train_command
from grpo_playground.jobs.runs import load_run, reconcile

ROOT = Path(__file__).resolve().parents[1]
ONE_STEP = ["sft.max_steps=1", "sft.logging_steps=1", "sft.save_steps=100", "data.n_sft=64",
            "sft.per_device_train_batch_size=8"]


def one_job(recipe: Path, warm: bool) -> float:
    os.environ[warm_start.WARM_ENV] = "1" if warm else "0"
    run_dir = create_run(apply_overrides(load_recipe(recipe), ONE_STEP), "bench")
    began = time.perf_counter()
    spawn_job(run_dir, train_command(run_dir, "sft"), "sft")
    while (state := reconcile(load_run(run_dir)).state) not in {"finished", "failed", "stopped"}:
        time.sleep(0.05)
    if state != "finished":
        raise SystemExit(f"the job {state}: see {run_dir / 'train.log'}")
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.warm_start", description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "tiny-cpu.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ["GRPO_PLAYGROUND_RUNS_DIR"] = tempfile.mkdtemp(prefix="warm-bench-")
    if not warm_start.enabled():
        raise SystemExit("warm starts are off here (a GPU, not Linux, or GRPO_PLAYGROUND_WARM_START=0)")
    warm_start._launcher = warm_start._Launcher(job_env())
    began = time.perf_counter()
    while not warm_start._launcher.usable():
        if warm_start._launcher.proc.returncode is not None:
            raise SystemExit("the launcher exited before it was ready")
        time.sleep(0.1)
    launcher_s = time.perf_counter() - began
    times = {"cold": [], "warm": []}
    for _ in range(args.repeats):
        for mode in times:
            times[mode].append(one_job(args.recipe, warm=mode == "warm"))
    cold, warm = statistics.median(times["cold"]), statistics.median(times["warm"])
    print(f"recipe {args.recipe.name}, SFT of one step, {args.repeats} jobs a mode, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; the launcher was ready in {launcher_s:.1f} s")
    print("| mode | median s, Start to finished | runs s | vs cold |")
    print("|---|---|---|---|")
    for mode, median in (("cold: fresh interpreters", cold), ("warm: forked from the launcher", warm)):
        runs = ", ".join(f"{t:.1f}" for t in times[mode.split(":")[0]])
        print(f"| {mode} | {median:.1f} | {runs} | {median / cold:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"recipe": args.recipe.name, "cores": os.cpu_count(), "launcher_s": launcher_s,
                                        "seconds": times, "median": {"cold": cold, "warm": warm},
                                        "ratio": warm / cold}, indent=1) + "\n")
    warm_start._launcher.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
