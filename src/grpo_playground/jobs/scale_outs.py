"""A run as a verl / OpenRLHF GRPO job from the UI: the scale-out CLI as a one-step background job, zipped.

Like an export (grpo_playground.jobs.exports), its state is read back from disk as every job's is
(grpo_playground.jobs.kinds.SCALE_OUT): its record <run>/scale_out_job.json says whether it still runs, the folder
<run>/scale_out/ with its scale_out.json and <run>/scale_out.zip (the download) that it finished; a failed one's
reason is the CLI's own error, which it writes to the file its supervisor reads, never a line of its log
(<run>/scale_out.log). Writing it again replaces both. A few seconds on a CPU (the tokenizer, the data), no training
slot.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.contracts.states import JobState
from grpo_playground.jobs.kinds import SCALE_OUT, scale_out_archive
from grpo_playground.jobs.record import step
from grpo_playground.jobs.runs import load_run, reconcile
from grpo_playground.owner import check_owner
from grpo_playground.contracts.layout import SCALE_OUT_DIR, SCALE_OUT_LOG
from grpo_playground.contracts.states import ACTIVE_STATES
from grpo_playground.run_layout import run_path, stage_done


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
    folder = info.path / SCALE_OUT_DIR
    shutil.rmtree(folder, ignore_errors=True)  # a new attempt replaces the last one
    scale_out_archive(info.path).unlink(missing_ok=True)
    command = SCALE_OUT.args(folder, run=info.path, archive=True).command()
    with open(info.path / SCALE_OUT_LOG, "wb") as log:
        SCALE_OUT.start(info.path, [step("scale-out", command)], log, job_env())
    return scale_out_state(info.path)


def scale_out_state(run_dir: Path) -> dict:
    """{"state": none|running|finished|failed, "zip": path or None, "notes": what does not carry over, "reason"}."""
    job = SCALE_OUT.status(Path(run_dir))
    state = {"state": "none", "zip": None, "notes": [], "reason": ""}
    if job.state == "none":
        return state
    if job.running:
        return {**state, "state": "running"}
    if job.state == JobState.FINISHED:
        return {**state, "state": "finished", "zip": job.result["zip"], "notes": job.result["not_carried_over"]}
    return {**state, "state": "failed", "reason": job.reason}
