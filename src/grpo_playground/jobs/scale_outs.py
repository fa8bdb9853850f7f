"""A run as a verl / OpenRLHF GRPO job from the UI: the scale-out CLI as a one-step background job, zipped.

Like an export (grpo_playground.jobs.exports): its record is <run>/scale_out_job.json, its output <run>/scale_out.log,
and how it ended is read from disk: the folder <run>/scale_out/ with its scale_out.json and <run>/scale_out.zip (the
download) when it finished, else the log's last lines. Writing it again replaces both. A few seconds on a CPU
(the tokenizer, the data), no training slot.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.cli.args import ScaleOutArgs
from grpo_playground.contracts.process import log_tail
from grpo_playground.jobs.control import check_owner
from grpo_playground.jobs.record import job_running, read_record, start_job, step
from grpo_playground.jobs.runs import load_run, reconcile
from grpo_playground.run_layout import (
    ACTIVE_STATES,
    SCALE_OUT_DIR,
    SCALE_OUT_JOB,
    SCALE_OUT_LOG,
    SCALE_OUT_RESULT,
    read_json,
    run_path,
    stage_done,
)

LOG_TAIL_BYTES = 4000


def _folder(run_dir: Path) -> Path:
    return Path(run_dir) / SCALE_OUT_DIR


def _archive(run_dir: Path) -> Path:
    return Path(run_dir) / f"{SCALE_OUT_DIR}.zip"


def start_scale_out(run_id: str, token: str | None = None) -> dict:
    """Owner only: write a stopped or finished run, GRPO from its SFT adapter, as a verl / OpenRLHF job."""
    check_owner(token)
    info = reconcile(load_run(run_path(run_id)))
    if info.state in ACTIVE_STATES:
        raise RuntimeError(f"run {run_id} is {info.state}: scale it out once it has stopped or finished")
    if not stage_done(info.path, "sft"):
        raise RuntimeError(f"run {run_id} has no SFT adapter yet: verl's GRPO starts from it, so train SFT first")
    if scale_out_state(info.path)["state"] == "running":
        raise RuntimeError(f"run {run_id} is already being written as a verl / OpenRLHF job: wait for it")
    shutil.rmtree(_folder(info.path), ignore_errors=True)  # a new attempt replaces the last one
    _archive(info.path).unlink(missing_ok=True)
    command = ScaleOutArgs(_folder(info.path), run=info.path, archive=True).command()
    with open(info.path / SCALE_OUT_LOG, "wb") as log:
        start_job(info.path / SCALE_OUT_JOB, "scale-out", [step("scale-out", command)], log, job_env())
    return scale_out_state(info.path)


def scale_out_state(run_dir: Path) -> dict:
    """{"state": none|running|finished|failed, "zip": path or None, "notes": what does not carry over, "reason"}."""
    run_dir = Path(run_dir)
    record = read_record(run_dir / SCALE_OUT_JOB)
    state = {"state": "none", "zip": None, "notes": [], "reason": ""}
    if not record:
        return state
    if job_running(record):
        return {**state, "state": "running"}
    result = read_json(_folder(run_dir) / SCALE_OUT_RESULT)
    if result and _archive(run_dir).is_file():
        return {**state, "state": "finished", "zip": str(_archive(run_dir)), "notes": result["not_carried_over"]}
    error = [line for line in log_tail(run_dir / SCALE_OUT_LOG, LOG_TAIL_BYTES).splitlines() if line.startswith("error:")]
    return {**state, "state": "failed",
            "reason": error[-1][len("error:"):].strip() if error else f"see {SCALE_OUT_LOG} in the run folder"}
