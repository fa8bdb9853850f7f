"""Start, stop and resume training jobs from the UI (each behind the owner token: grpo_playground.owner).

The UI never trains: it writes the run folder and starts the job's supervisor (grpo_playground.jobs.record and
.supervisor, as for every kind of job) with the run's job.json as its record, stdout/stderr appended to log.txt (a
file, never a pipe, so a closed browser cannot block the job); from then on it only reads files and sends
signals. Nothing here imports torch.
"""

from __future__ import annotations

import os
import shlex
import signal
import threading
import time
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.config import RunConfig, save_recipe
from grpo_playground.contracts.process import is_alive, kill_group
from grpo_playground.jobs.kinds import TRAIN
from grpo_playground.jobs.record import step
from grpo_playground.jobs.runs import RunInfo, compact_metrics, load_run, queue_line, reconcile, stop_grace_s
from grpo_playground.models.registry import unavailable_reason
from grpo_playground.owner import check_owner
from grpo_playground.contracts.layout import GPU_LOCK, JOB_FILE, LOG_FILE, RECIPE_FILE, RESUMES_KEY, STOP_FILE
from grpo_playground.contracts.states import ACTIVE_STATES, JOB_STAGES
from grpo_playground.run_layout import new_run_id, run_path, runs_dir, write_status

MAX_QUEUED = 8  # waiting jobs; more is a runaway script, not a plan


def train_command(run_dir: Path, stage: str = "all", resume: bool = False) -> list[str]:
    """The CLI that runs a run folder's recipe, as the job runs it."""
    if stage not in JOB_STAGES:
        raise ValueError(f"stage {stage!r} is unknown: use one of {', '.join(JOB_STAGES)}")
    return TRAIN.args(Path(run_dir) / RECIPE_FILE, run_dir=Path(run_dir), stage=stage, resume=resume).command()


def shell_command(command: list[str]) -> str:
    return " ".join(shlex.quote(part) for part in ["python", *command[1:]])


def create_run(config: RunConfig, name: str | None = None) -> Path:
    """A new run folder holding recipe.yaml (the RunConfig the job will run) and a status 'created'."""
    run_dir = runs_dir() / new_run_id(name or config.name)
    run_dir.mkdir()
    save_recipe(config, run_dir / RECIPE_FILE)
    write_status(run_dir, state="created", created=time.time(), step=0, reason="")
    return run_dir


def spawn_job(run_dir: Path, command: list[str], stage: str = "all") -> RunInfo:
    """Queue `command` as the job of `run_dir`: its supervisor runs it when the training slot is free and it is
    first in line. start_run and resume_run use this with the training CLI."""
    run_dir = Path(run_dir).resolve()
    for stale in (STOP_FILE, JOB_FILE):  # the previous attempt's (its traceback: TRAIN.start)
        (run_dir / stale).unlink(missing_ok=True)
    # pid None: the previous attempt's pid must not make this fresh entry look dead before job.json exists
    write_status(run_dir, state="queued", pid=None, reason="waiting for the training slot")
    with open(run_dir / LOG_FILE, "ab") as log:
        log.write(f"\n[ui] {time.strftime('%Y-%m-%d %H:%M:%S')} queued: {shell_command(command)}\n".encode())
        log.flush()
        TRAIN.start(run_dir, [step("train", command)], log, job_env(), slot=runs_dir() / GPU_LOCK,
                    meta={"stage": stage, "command": command}, grace_s=stop_grace_s())
    return load_run(run_dir)


def _check_queue_room() -> None:
    waiting = queue_line()
    if len(waiting) >= MAX_QUEUED:
        raise RuntimeError(f"{len(waiting)} jobs are already waiting for the training slot: stop one of them "
                           f"({', '.join(waiting[:3])}, ...) or wait")


def start_run(config: RunConfig, stage: str = "all", token: str | None = None, name: str | None = None) -> RunInfo:
    """Owner only: create a run from a RunConfig and queue it; returns at once (the job runs on its own)."""
    check_owner(token)
    train_command(Path("."), stage)  # validate the stage before creating anything
    check_model_loads(config)
    _check_queue_room()
    run_dir = create_run(config, name)
    return spawn_job(run_dir, train_command(run_dir, stage), stage)


def check_model_loads(config: RunConfig) -> None:
    """Refuse a recipe whose model this machine cannot load (a hub id with no internet, a missing package),
    with the reason and what loads instead, before a job is made that would fail on load seconds later."""
    reason = unavailable_reason(config.model.name_or_path)
    if reason:
        raise ValueError(f"model.name_or_path: {reason}")


def resume_run(run_id: str, token: str | None = None) -> RunInfo:
    """Owner only: run a stopped or failed run again with --resume (its step count continues)."""
    check_owner(token)
    info = reconcile(load_run(run_path(run_id)))
    if info.state in ACTIVE_STATES:
        raise RuntimeError(f"run {run_id} is {info.state}: resume it once it has stopped (press Stop first if "
                           "it is running or queued)")
    if info.state == "finished":
        raise RuntimeError(f"run {run_id} finished: start a new run (e.g. load its recipe and raise max_steps)")
    _check_queue_room()
    compact_metrics(info.path)  # a job killed with its supervisor left its replayed rows: drop them first
    write_status(info.path, **{RESUMES_KEY: int(info.status.get(RESUMES_KEY) or 0) + 1})  # the history marks it
    return spawn_job(info.path, train_command(info.path, info.stage, resume=True), info.stage)


def stop_run(run_id: str, token: str | None = None) -> RunInfo:
    """Owner only: ask the job to save and exit (stop.request + SIGTERM to its supervisor, which passes it on);
    the supervisor kills the whole process group after its grace period. If the supervisor itself is gone, ask
    the trainer directly, or kill what is left right away."""
    check_owner(token)
    info = reconcile(load_run(run_path(run_id)))
    if info.state not in ACTIVE_STATES:
        raise RuntimeError(f"run {run_id} is {info.state}, not running: nothing to stop")
    if info.state == "running":  # before the request: a job that saves at once writes "stopped" after it, not under it
        write_status(info.path, state="stopping", reason="stop requested: saving at the next step")
    (info.path / STOP_FILE).write_text(f"{time.time()}\n")
    pgid = info.job.get("pid")  # the supervisor's: its session is the job's process group
    trainer = _live_trainer(info)
    if is_alive(pgid, info.job.get("start_ticks")):
        _signal(pgid, signal.SIGTERM)  # the supervisor alone: it passes the stop to the trainer, which saves first
    elif trainer is not None:
        # The supervisor is gone (killed on its own) but training goes on: ask the trainer itself, which
        # saves a checkpoint at its next step boundary, and kill what is left only after the grace period.
        if pgid:
            threading.Thread(target=_end_orphaned_job, args=(info.path, trainer, int(pgid)), daemon=True).start()
        _signal(trainer, signal.SIGTERM)
    else:
        if pgid:
            kill_group(int(pgid))
        compact_metrics(info.path)  # what the supervisor does when a job ends
        write_status(info.path, state="stopped", reason="stopped (supervisor gone: processes killed)")
    return load_run(info.path)


def _live_trainer(info: RunInfo) -> int | None:
    """The training process of a run, if alive: a CLI run's pid, or a job's pid that is still in the job's
    process group (so a recycled pid of a stranger is never signalled)."""
    pid = info.status.get("pid")
    if not pid or not is_alive(pid):
        return None
    if not info.job:
        return pid
    try:
        return pid if os.getpgid(pid) == info.job.get("pid") else None
    except ProcessLookupError:
        return None


def _end_orphaned_job(run_dir: Path, trainer: int, pgid: int) -> None:
    """What the dead supervisor would have done once the trainer stopped: kill what is left after the grace period,
    and drop the metric rows a resumed job replayed."""
    deadline = time.time() + stop_grace_s()
    while time.time() < deadline and is_alive(trainer):
        time.sleep(0.5)
    kill_group(pgid)  # leftovers (e.g. generation workers), or the trainer itself past the grace period
    compact_metrics(run_dir)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass  # it ended on its own meanwhile
