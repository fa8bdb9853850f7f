"""What the supervisor of a training job (kind "train") writes into its run folder's status.json, which the job
itself keeps while it runs: queued, running (with the trainer's pid), and how it ended when the job could not
say it itself (stopped on request, killed after the grace period, finished, or failed with the crash's reason).
Pure Python, no torch."""

from __future__ import annotations

import time
from pathlib import Path

from grpo_playground.jobs.crash import crash_reason
from grpo_playground.jobs.runs import compact_metrics
from grpo_playground.run_layout import FINAL_STATES, LOG_FILE, STOP_FILE, read_status, write_status


def started(run_dir: Path, trainer_pid: int) -> None:
    write_status(run_dir, state="running", pid=trainer_pid, started=time.time(), reason="")


def stopped_while_queued(run_dir: Path) -> str:
    write_status(run_dir, state="stopped", reason="stopped while queued")
    return "stopped"


def ended(run_dir: Path, returncode: int, stop_asked: bool, stop_reason: str, oom_kills_before: int | None) -> str:
    """Record how the job ended unless the job already did (a failed job's own diagnosis wins; a job that says
    it finished or stopped but exits non-zero unasked crashed on its way out); returns the run's final state."""
    compact_metrics(run_dir)  # the rows a resumed job replayed
    stop_asked = stop_asked or (run_dir / STOP_FILE).exists()
    state = read_status(run_dir).get("state")
    if state not in FINAL_STATES or (state != "failed" and returncode != 0 and not stop_asked):
        if stop_asked:
            write_status(run_dir, state="stopped", reason=stop_reason)
        elif returncode == 0:
            write_status(run_dir, state="finished", reason="")
        else:
            write_status(run_dir, state="failed", reason=crash_reason(run_dir / LOG_FILE, returncode, oom_kills_before))
    return str(read_status(run_dir).get("state"))
