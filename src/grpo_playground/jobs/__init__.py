"""UI side of training jobs: run folders, child processes (start / stop / resume), the queue, live files.

No torch here: the UI imports this package. The job itself is `python -m grpo_playground.cli.train` run by
`python -m grpo_playground.jobs.supervisor RUN/job.json` in its own session, as every kind of job is (see
docs/ARCHITECTURE.md, "Background jobs").
"""

from grpo_playground.jobs.control import (
    OWNER_TOKEN_ENV,
    check_model_loads,
    check_owner,
    create_run,
    owner_token_required,
    resume_run,
    shell_command,
    spawn_job,
    start_run,
    stop_run,
    train_command,
    weak_owner_token,
)
from grpo_playground.jobs.exports import export_state, start_export
from grpo_playground.jobs.feed import JsonlTail, RunFeed, read_log_tail
from grpo_playground.contracts.process import group_members, kill_group
from grpo_playground.jobs.runs import RunInfo, list_runs, load_run, queue_line, reconcile
from grpo_playground.run_layout import ACTIVE_STATES, FINAL_STATES, run_path, runs_dir
from grpo_playground.run_layout import JOB_STAGES as STAGES  # the stages a job runs, as the tab offers them

__all__ = [
    "ACTIVE_STATES", "FINAL_STATES", "OWNER_TOKEN_ENV", "STAGES", "JsonlTail", "RunFeed", "RunInfo",
    "check_model_loads", "check_owner", "create_run", "export_state", "group_members", "kill_group", "list_runs",
    "load_run", "owner_token_required",
    "queue_line", "read_log_tail", "reconcile", "resume_run", "run_path", "runs_dir", "shell_command",
    "spawn_job", "start_export", "start_run", "stop_run", "train_command", "weak_owner_token",
]
