"""Evaluation jobs from the UI: one child process in its own session evaluates the chosen checkpoints in turn.

Like a training job, it outlives the browser and the app: its pid and plan go to <runs>/evals/eval_job.json and its
output to <runs>/evals/eval.log (a file, never a pipe), and its state is read back from disk: running while the pid
lives, then each checkpoint done (its result file exists) or failed. The chain is a plain `sh -c` of
`python -m pipelines.eval` commands, each under coreutils `timeout`, so what runs is what the CLI would run; Stop
signals the whole process group.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.eval import results as store
from grpo_playground.jobs.background import start_detached, stop_detached
from grpo_playground.contracts.process import is_alive, log_tail
from grpo_playground.run_layout import EVAL_JOB, EVAL_LOG, evals_dir, read_json, write_json_atomic
MAX_EVAL_S = 3 * 3600  # per checkpoint: a hung model server or a huge n on CPU is stopped
LOG_TAIL_BYTES = 4000
FAILED_MARK = "[eval] FAILED:"


def _job_file() -> Path:
    return evals_dir() / EVAL_JOB


def eval_job_state() -> dict:
    """{"state": none|running|finished|stopped, "items": [{"label", "out", "state": done|failed|pending|running}],
    "log": tail} of the latest evaluation job."""
    job = read_json(_job_file())
    if not job:
        return {"state": "none", "items": [], "log": ""}
    running = is_alive(job.get("pid"), job.get("start_ticks"))
    log = log_tail(evals_dir() / EVAL_LOG, LOG_TAIL_BYTES)
    failed = {line.split(FAILED_MARK, 1)[1].rsplit(" (exit", 1)[0].strip()
              for line in log.splitlines() if FAILED_MARK in line}
    items, first_open = [], True
    for item in job.get("items", []):
        if Path(item["out"]).is_file():
            state = "done"
        elif item["label"] in failed:
            state = "failed"
        elif running:
            state, first_open = ("running" if first_open else "pending"), False
        else:
            state = "stopped" if job.get("stopped") else "failed"
        items.append({**item, "state": state})
    state = "running" if running else ("stopped" if job.get("stopped") else "finished")
    return {"state": state, "items": items, "log": log}


def start_eval_job(models: list[str], data: str, n: int, batch_size: int, max_new_tokens: int,
                   backend: str = "transformers") -> dict:
    """Start evaluating `models` (already checked) one after the other; refuses while one runs."""
    if eval_job_state()["state"] == "running":
        raise RuntimeError("an evaluation is already running: wait for it or press Stop")
    items = [{"label": store.checkpoint_label(m), "model": m, "out": str(store.result_path(m))} for m in models]
    # vLLM: one process for every checkpoint, so a base and its adapters share one engine start (~1 min each);
    # other backends: one process per checkpoint, so one that fails does not take the next ones with it
    groups = [items] if backend == "vllm" else [[item] for item in items]
    steps = []
    for group in groups:
        command = store.eval_command([i["model"] for i in group], data, n, batch_size, max_new_tokens,
                                     [Path(i["out"]) for i in group], backend)
        labels = ", ".join(i["label"] for i in group)
        failed = "; ".join(f"echo {shlex.quote(FAILED_MARK + ' ' + i['label'])} \"(exit $code)\"" for i in group)
        # --foreground keeps `timeout` in the job's process group, so Stop (killpg) reaches the evaluation too
        steps.append(f"echo {shlex.quote(f'[eval] {labels}')}; timeout --foreground {MAX_EVAL_S * len(group)} "
                     f"{shlex.join(command)} || {{ code=$?; {failed}; }}")
    env = job_env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    log_path = evals_dir() / EVAL_LOG
    with open(log_path, "wb") as log:  # one job's log at a time: the results files are the record
        process = start_detached(["/bin/sh", "-c", "; ".join(steps)], log, env)
    write_json_atomic(_job_file(), {**process, "items": items, "data": data, "backend": backend,
                                    "started": time.time()})
    return eval_job_state()


def stop_eval_job() -> str:
    pid = stop_detached(_job_file())
    return "No evaluation is running." if pid is None else f"Stopped the evaluation (pid {pid})."
