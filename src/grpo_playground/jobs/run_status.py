"""What the supervisor of a training job (kind "train") writes into its run folder's status.json, which the job
itself keeps while it runs: running (with the trainer's pid) when it starts, and how it ended when the job could
not say it itself (stopped while queued or on request, killed after the grace period, finished, or failed with
the crash's reason). Pure Python, no torch."""

from __future__ import annotations

import time
from pathlib import Path

from grpo_playground.jobs.crash import crash_reason
from grpo_playground.jobs.runs import compact_metrics
from grpo_playground.contracts.layout import STOP_FILE
from grpo_playground.contracts.states import FINAL_STATES
from grpo_playground.run_layout import read_status, write_status

STOPPED_WHILE_QUEUED = {"state": "stopped", "reason": "stopped while queued"}


def started(run_dir: Path, trainer_pid: int) -> None:
    write_status(run_dir, state="running", pid=trainer_pid, started=time.time(), reason="")


def ending(run_dir: Path, returncode: int, stop_asked: bool, stop_reason: str, oom_kills_before: int | None) -> dict:
    """The status.json update that records how the job ended, {} when the job already did (a failed job's own
    diagnosis wins; a job that says it finished or stopped but exits non-zero unasked crashed on its way out).
    The supervisor writes it last: once status.json says the run ended, the app may start it again."""
    compact_metrics(run_dir)  # the rows a resumed job replayed
    stop_asked = stop_asked or (run_dir / STOP_FILE).exists()
    state = read_status(run_dir).get("state")
    if state in FINAL_STATES and (state == "failed" or returncode == 0 or stop_asked):
        return {}
    if stop_asked:
        return {"state": "stopped", "reason": stop_reason}
    if returncode == 0:
        return {"state": "finished", "reason": ""}
    return {"state": "failed", "reason": crash_reason(run_dir, returncode, oom_kills_before)}


def final_state(run_dir: Path, update: dict) -> str:
    return str(update.get("state") or read_status(run_dir).get("state"))


def record_end(run_dir: Path, update: dict) -> None:
    if update:
        write_status(run_dir, **update)
