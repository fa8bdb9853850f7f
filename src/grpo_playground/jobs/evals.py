"""Evaluation jobs from the UI: one child process in its own session evaluates the chosen checkpoints in turn.

Like a training job, it outlives the browser and the app: its job record (grpo_playground.jobs.record: one step per
checkpoint, each the eval CLI under a time limit) is <runs>/evals/eval_job.json, its output goes to
<runs>/evals/eval.log (a file, never a pipe), and its state and each checkpoint's (done, failed, stopped) are read
from the record the supervisor keeps (grpo_playground.jobs.kinds.EVAL), a failed one's reason too (its exit and the
eval CLI's error or traceback line). Stop signals the whole process group.
"""

from __future__ import annotations

import os
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.contracts.process import log_tail
from grpo_playground.contracts.states import StepState
from grpo_playground.jobs import eval_results as store
from grpo_playground.jobs.kinds import EVAL
from grpo_playground.jobs.record import step, stop_job
from grpo_playground.contracts.layout import EVAL_LOG
from grpo_playground.run_layout import evals_dir

MAX_EVAL_S = 3 * 3600  # per checkpoint: a hung model server or a huge n on CPU is stopped
LOG_TAIL_BYTES = 4000


def eval_job_state() -> dict:
    """{"state": none|running|finished|stopped|failed, "items": [{"label", "model", "out", "state":
    pending|running|done|failed|stopped, "reason"}], "log": tail} of the latest evaluation job, from its record (a
    job that ran to its end finished: its items say which checkpoints failed, and why)."""
    job = EVAL.status(evals_dir())
    if job.state == "none":
        return {"state": "none", "items": [], "log": ""}
    record, alive = job.record, job.running
    items, seen_running = [], set()
    for item in record["meta"]["items"]:
        step_state = record["steps"][item["step"]]["state"]
        reason = ""
        if Path(item["out"]).is_file():
            item_state = StepState.DONE
        elif step_state in (StepState.PENDING, StepState.RUNNING) and not alive:
            item_state = StepState.FAILED  # its supervisor died
        elif step_state == StepState.RUNNING:  # a step of several checkpoints evaluates them in turn
            item_state = StepState.PENDING if item["step"] in seen_running else StepState.RUNNING
            seen_running.add(item["step"])
        else:
            item_state = StepState.FAILED if step_state == StepState.DONE else step_state
            reason = record["steps"][item["step"]]["reason"]  # its exit and the eval CLI's own error
        items.append({**item, "state": str(item_state), "reason": reason})
    return {"state": "running" if alive else job.state, "items": items,
            "log": log_tail(evals_dir() / EVAL_LOG, LOG_TAIL_BYTES)}


def start_eval_job(models: list[str], data: str, n: int, batch_size: int, max_new_tokens: int,
                   backend: str = "transformers") -> dict:
    """Start evaluating `models` (already checked) one after the other; refuses while one runs."""
    if eval_job_state()["state"] == "running":
        raise RuntimeError("an evaluation is already running: wait for it or press Stop")
    # vLLM: one process for every checkpoint, so a base and its adapters share one engine start (~1 min each);
    # other backends: one process per checkpoint, so one that fails does not take the next ones with it
    per_step = len(models) if backend == "vllm" else 1
    items = [{"label": store.checkpoint_label(m), "model": m, "out": str(store.result_path(m)), "step": i // per_step}
             for i, m in enumerate(models)]
    steps = []
    for first in range(0, len(items), per_step):
        group = items[first:first + per_step]
        command = store.eval_command([i["model"] for i in group], data, n, batch_size, max_new_tokens,
                                     [Path(i["out"]) for i in group], backend)
        steps.append(step(", ".join(i["label"] for i in group), command, MAX_EVAL_S * len(group)))
    with open(evals_dir() / EVAL_LOG, "wb") as log:  # one job's log at a time: the results files are the record
        EVAL.start(evals_dir(), steps, log, job_env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1")),
                   meta={"items": items, "data": data, "backend": backend})
    return eval_job_state()


def stop_eval_job() -> str:
    pid = stop_job(EVAL.record(evals_dir()))
    return "No evaluation is running." if pid is None else f"Stopped the evaluation (pid {pid})."
