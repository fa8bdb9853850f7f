"""UI side of training jobs: run folders, child processes (start / stop / resume), the queue, live files.

No torch here: the UI imports this package. The job itself is `python -m grpo_playground.cli.train` run by
`python -m grpo_playground.jobs.supervisor RUN/job.json` in its own session, as every kind of job is (see
docs/ARCHITECTURE.md, "Background jobs").
"""

from grpo_playground.jobs.control import (
    check_model_loads,
    create_run,
    resume_run,
    shell_command,
    spawn_job,
    start_run,
    stop_run,
    train_command,
)
from grpo_playground.jobs.exports import export_state, start_export
from grpo_playground.jobs.feed import JsonlTail, RunFeed, read_log_tail
from grpo_playground.contracts.process import group_members, kill_group
from grpo_playground.jobs.runs import RunInfo, list_runs, load_run, queue_line, reconcile
from grpo_playground.contracts.states import ACTIVE_STATES, FINAL_STATES
from grpo_playground.run_layout import run_path, runs_dir
from grpo_playground.contracts.states import JOB_STAGES as STAGES  # the stages a job runs, as the tab offers them

__all__ = [
    "ACTIVE_STATES", "FINAL_STATES", "STAGES", "JsonlTail", "RunFeed", "RunInfo",
    "check_model_loads", "create_run", "export_state", "group_members", "kill_group", "list_runs",
    "load_run",
    "queue_line", "read_log_tail", "reconcile", "resume_run", "run_path", "runs_dir", "shell_command",
    "spawn_job", "start_export", "start_run", "stop_run", "train_command",
]
