"""The child processes an experiment runs, one after another: the product's own training and eval CLIs, each
with its output in a log file beside its run folder."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from grpo_playground.child_process import python_child_env
from grpo_playground.cli.args import EvalArgs, TrainArgs
from grpo_playground.run_layout import read_status


def run(command: list[str], log: Path) -> None:
    """Run one CLI to its end, its output appended to `log` (a file, never a pipe); a failure ends the experiment
    with the command and the log's name."""
    print(f"$ {' '.join(command)}", flush=True)
    with open(log, "a") as f:
        done = subprocess.run(command, env=python_child_env(OMP_NUM_THREADS="1"), stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}; see {log}")


def train(recipe: Path, run_dir: Path, stage: str, overrides: list[str]) -> dict:
    """Run one step of the experiment (skipped when its folder already finished: a rerun picks up where it stopped).
    A folder left unfinished (stopped, cut) is cleared first: the step starts over, as its measured time must not
    count the attempt before (a stage's seconds add up in its status)."""
    if read_status(run_dir).get("state") == "finished":
        return read_status(run_dir)
    if run_dir.is_dir():
        shutil.rmtree(run_dir)
    command = TrainArgs(recipe, run_dir=run_dir, stage=stage, overrides=tuple(overrides)).command()
    run(command, run_dir.parent / f"{run_dir.name}.log")
    return read_status(run_dir)


def eval_batch(n: int, backend: str) -> int:
    """The eval CLI's --batch-size: vLLM schedules its own batches, so it gets as many prompts as the CLI takes at
    once (1,319 GSM8K test prompts are more than that)."""
    from grpo_playground.eval.runner import MAX_BATCH

    return min(n, MAX_BATCH) if backend == "vllm" else 64


def evaluate(model: str, out: Path, n: int, max_new_tokens: int, data: str, seed: int,
             backend: str = "transformers") -> dict:
    """Score one checkpoint (its file read back when it exists)."""
    if not out.exists():
        command = EvalArgs((model,), data, n, eval_batch(n, backend), max_new_tokens, seed=seed, backend=backend,
                           out=(out,)).command()
        run(command, out.with_suffix(".log"))
    return json.loads(out.read_text())


def evaluate_together(models: dict[str, str], outs: dict[str, Path], n: int, max_new_tokens: int, data: str,
                      seed: int, backend: str) -> dict[str, dict]:
    """Score several checkpoints on the same prompts in one eval CLI process (through vLLM: one engine for
    all of them); a checkpoint whose file exists is read back, not scored again."""
    missing = [name for name in models if not outs[name].exists()]
    if missing:
        command = EvalArgs(tuple(models[m] for m in missing), data, n, eval_batch(n, backend), max_new_tokens,
                           seed=seed, backend=backend, out=tuple(outs[m] for m in missing)).command()
        run(command, outs[missing[0]].with_suffix(".log"))
    return {name: json.loads(outs[name].read_text()) for name in models}
