""""GRPO vs more SFT" comparisons from the UI: `grpo-playground compare` as a background job.

Each comparison has its own folder, <runs>/comparisons/<id>/: the recipe it runs (a copy: editing the original
later changes nothing), comparison_job.json (its job record: grpo_playground.jobs.record), comparison.log (a file,
never a pipe), work/ (the experiment's data, run folders and progress.json) and comparison_result.json/.md when it
is done. Like an evaluation job it outlives the browser and the app; its state is read back from its record: waiting (for the training slot) or
running while its supervisor lives, then finished (the result exists), stopped (Stop was pressed) or failed. A
stopped or failed comparison resumes in its folder (resume_comparison): the finished steps are kept.

It trains, so it takes the training slot: its supervisor holds the flock on <runs>/.gpu.lock (the lock training
jobs' supervisors take), in its turn among them (first come, first served), so it waits for a training run to end
and training runs wait for it. One comparison at a time;
sizes and minutes are bounded (experiments/plan.py's ComparisonPlan) and the experiment runs under a time limit (MAX_JOB_S), so even the
owner token cannot start a job that runs for days. Stop signals the whole process group.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import asdict
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.contracts.process import log_tail
from grpo_playground.contracts.states import JobState
from grpo_playground.experiments.plan import ComparisonPlan
from grpo_playground.jobs.kinds import COMPARE
from grpo_playground.jobs.record import step, stop_job
from grpo_playground.contracts.layout import (
    COMPARISON_JOB, COMPARISON_RESULT, COMPARISON_WORK, GPU_LOCK, PROGRESS_FILE, RECIPE_FILE, STATUS_FILE,
)
from grpo_playground.contracts.process import read_json
from grpo_playground.run_layout import RUN_ID_RE, comparisons_dir, new_run_id, runs_dir

MAX_JOB_S = 4 * 3600  # the whole chain: SFT rounds, three arms of at most MAX_MINUTES, four evaluations
LOG_TAIL_LINES = 40
LOG_TAIL_BYTES = 16_000


def comparison_path(comparison_id: str) -> Path:
    """The folder of an existing comparison; the id is checked so that no one points outside the folder."""
    if not isinstance(comparison_id, str) or not RUN_ID_RE.match(comparison_id):
        raise ValueError(f"comparison id {comparison_id!r} is not valid: pick one from the list")
    path = comparisons_dir() / comparison_id
    if not (path / COMPARISON_JOB).is_file():
        raise FileNotFoundError(f"no comparison {comparison_id!r}: pick one from the list")
    return path


def experiment_command(folder: Path, plan: ComparisonPlan) -> list[str]:
    """The CLI the job runs (and the panel shows, to rerun it by hand or with larger sizes)."""
    return plan.args(folder / RECIPE_FILE, folder / COMPARISON_WORK, folder / COMPARISON_RESULT).command()


def comparison_state(comparison_id: str) -> dict:
    """{"id", "state": waiting|running|finished|stopped|failed, "plan", "recipe_name", "command", "resumes", "order" and
    "steps" (progress.json's), "current" (the running step's training status, if any), "result" (when finished),
    "log"}."""
    folder = comparison_path(comparison_id)
    job = COMPARE.status(folder)
    meta = job.record.get("meta", {})
    log = log_tail(folder / COMPARE.log_file, LOG_TAIL_BYTES, lines=LOG_TAIL_LINES)
    progress_file = read_json(folder / COMPARISON_WORK / PROGRESS_FILE)
    progress = progress_file.get("steps", {})
    if job.running:  # queued: its supervisor waits for the training slot
        state = "waiting" if job.state == JobState.QUEUED else "running"
    else:
        state = job.state
    running = [step for step, s in progress.items() if s.get("state") == "running"]
    current = {}
    if state == "running" and running and progress[running[-1]].get("run_dir"):
        current = read_json(Path(progress[running[-1]]["run_dir"]) / STATUS_FILE)
    return {"id": comparison_id, "state": state, "plan": meta.get("plan", {}), "recipe_name": meta.get("recipe_name"),
            "command": meta.get("command", ""), "started": job.record.get("started"), "resumes": meta.get("resumes", 0),
            "order": progress_file.get("order", []), "steps": progress,
            "current": current, "result": job.result or None, "reason": job.reason, "log": log}


def list_comparisons() -> list[str]:
    """Ids of every comparison, newest first (ids start with their creation time)."""
    return sorted((p.name for p in comparisons_dir().iterdir() if (p / COMPARISON_JOB).is_file()), reverse=True)


def running_comparison() -> str | None:
    for comparison_id in list_comparisons():
        if COMPARE.status(comparisons_dir() / comparison_id).running:
            return comparison_id
    return None


def _refuse_while_one_runs() -> None:
    busy = running_comparison()
    if busy:
        raise RuntimeError(f"comparison {busy} is still running: wait for it or press Stop")


def _launch(folder: Path, plan: ComparisonPlan, meta: dict, log_mode: str) -> dict:
    """Start the experiment job of `folder` (its recipe copied in) with `plan`; `meta` beside its record."""
    command = experiment_command(folder, plan)
    env = job_env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    # the supervisor holds the training slot (the lock training jobs take) for the whole experiment; past the time
    # limit it stops the experiment and kills what is left of its group (a training child)
    with open(folder / COMPARE.log_file, log_mode) as log:
        COMPARE.start(folder, [step("experiment", command, MAX_JOB_S)], log, env,
                      slot=runs_dir() / GPU_LOCK, result=folder / f"{COMPARISON_RESULT}.json",
                      meta={**meta, "plan": asdict(plan),
                            "command": "OMP_NUM_THREADS=1 " + shlex.join(["grpo-playground", "compare", *command[3:]])})
    return comparison_state(folder.name)


def start_comparison(recipe: Path, recipe_name: str, plan: ComparisonPlan) -> dict:
    """Start the experiment on `recipe` (already checked; `recipe_name` says where it came from) with `plan`;
    refuses while another comparison runs."""
    _refuse_while_one_runs()
    folder = comparisons_dir() / new_run_id("compare")
    folder.mkdir()
    shutil.copyfile(recipe, folder / RECIPE_FILE)
    return _launch(folder, plan, {"recipe_name": recipe_name}, "wb")


def resume_comparison(comparison_id: str) -> dict:
    """Run a stopped or cut (failed: its supervisor was killed, the machine restarted) comparison again in its own
    folder, with its own recipe copy and plan: the experiment skips the steps it finished (their run folders and
    evaluations stay as they are) and starts the interrupted one over. The log continues."""
    folder = comparison_path(comparison_id)
    state = comparison_state(comparison_id)["state"]
    if state in ("waiting", "running"):
        raise RuntimeError(f"comparison {comparison_id} is still running: nothing to resume")
    if state == "finished":
        raise RuntimeError(f"comparison {comparison_id} has finished: start a new one to run it again")
    _refuse_while_one_runs()
    meta = COMPARE.status(folder).record.get("meta", {})
    return _launch(folder, ComparisonPlan(**meta.get("plan", {})),
                   {**meta, "resumes": meta.get("resumes", 0) + 1}, "ab")


def stop_comparison(comparison_id: str) -> str:
    pid = stop_job(COMPARE.record(comparison_path(comparison_id)))
    return f"Comparison {comparison_id} is not running." if pid is None else \
        f"Stopped comparison {comparison_id} (pid {pid})."
