"""Runs on disk as the app sees them: whether their processes are alive, the list, the queue (names and status
files: grpo_playground.run_layout).

Everything here reads or writes small files, so the UI can re-attach to any run after a closed browser
or an app restart: the disk, not the UI process, is the source of truth.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from grpo_playground.contracts.metrics import decode_record
from grpo_playground.contracts.process import group_members, is_alive
from grpo_playground.contracts.layout import COMPARISON_JOB
from grpo_playground.jobs.record import read_record, slot_queue, supervisor_starting
from grpo_playground.contracts.layout import JOB_FILE, METRICS_FILE, STATUS_FILE, STOP_FILE
from grpo_playground.contracts.process import write_text_atomic
from grpo_playground.contracts.states import ACTIVE_STATES
from grpo_playground.run_layout import is_run_name, read_status, runs_dir, write_status

STOP_GRACE_ENV = "GRPO_PLAYGROUND_STOP_GRACE_S"  # seconds a stopping job may take to save before it is killed


def stop_grace_s() -> float:
    return float(os.environ.get(STOP_GRACE_ENV, 300))  # a GRPO step of an 8B model plus its save: minutes


@dataclass
class RunInfo:
    run_id: str
    path: Path
    status: dict
    job: dict

    @property
    def state(self) -> str:
        return self.status.get("state", "unknown")

    @property
    def stage(self) -> str:
        """The stage the app started the job with (a CLI run: all)."""
        return self.job.get("meta", {}).get("stage") or "all"

    def processes_alive(self) -> bool:
        """The supervisor or anything left in its process group; for a run started from the CLI (no job.json)
        the pid the job wrote. A bare pid can be recycled after a reboot, so it is the last resort."""
        if self.job:
            if self.job.get("pid") is None:
                return supervisor_starting(self.job)
            if is_alive(self.job.get("pid"), self.job.get("start_ticks")):
                return True
            return bool(self.job.get("pid") and group_members(int(self.job["pid"])))
        return is_alive(self.status.get("pid"))


def read_job(run_dir: Path) -> dict:
    """The run's job record (grpo_playground.jobs.record), {} for a run started from the CLI. A job.json of an
    earlier version (its own launcher's: launcher_pid, pgid, start_ticks, queued_at, stage, command) is read as
    a record of that job, so its run is still listed, stopped and resumed."""
    job = read_record(run_dir / JOB_FILE)
    if "launcher_pid" in job:
        job = {"kind": "train", "pid": job["launcher_pid"], "start_ticks": job.get("start_ticks"),
               "started": job.get("queued_at"), "state": None,
               "meta": {"stage": job.get("stage"), "command": job.get("command")}}
    return job


def load_run(run_dir: Path) -> RunInfo:
    run_dir = Path(run_dir)
    return RunInfo(run_dir.name, run_dir, read_status(run_dir), read_job(run_dir))


def compact_metrics(run_dir: Path) -> int:
    """Drop the rows a resumed job wrote again: of rows with the same stage, step and keys (the replay of a
    step after its checkpoint, a per-step timing row...), keep the last write, in the place it was written.
    Called when a job ends and before a resume, never while a job writes. Returns the rows dropped."""
    path = run_dir / METRICS_FILE
    try:
        lines = path.read_bytes().splitlines(keepends=True)
    except OSError:
        return 0
    rows = [decode_record(line) for line in lines]  # None: a half-written line, which stays as it is
    last: dict[tuple, int] = {}
    for index, row in enumerate(rows):
        if _keyed(row):
            last[(str(row["stage"]), str(row["step"]), tuple(sorted(row)))] = index
    keep = set(last.values())
    kept = [line for index, (line, row) in enumerate(zip(lines, rows)) if index in keep or not _keyed(row)]
    if len(kept) == len(lines):
        return 0
    write_text_atomic(path, b"".join(kept))  # a reader sees the file shrink and reads it again from the start (feed.JsonlTail)
    return len(lines) - len(kept)


def _keyed(row: dict | None) -> bool:
    return row is not None and "stage" in row and "step" in row


def reconcile(info: RunInfo) -> RunInfo:
    """A status that says queued/running/stopping while none of the job's processes live is stale (the job
    was SIGKILLed, the machine rebooted): rewrite it as failed, or stopped when a stop was asked for."""
    # Without job.json or a pid we only know the UI wrote "queued" just before spawning: give it a minute.
    has_trace = bool(info.job or info.status.get("pid")) or time.time() - info.status.get("updated", 0) > 60
    if info.state in ACTIVE_STATES and has_trace and not info.processes_alive():
        compact_metrics(info.path)  # the supervisor died with the job: do its cleanup
        if (info.path / STOP_FILE).exists():
            info.status = write_status(info.path, state="stopped", reason="stopped (the process was killed)")
        else:
            info.status = write_status(info.path, state="failed", reason="process died")
    return info


def list_runs() -> list[RunInfo]:
    """Every run in the runs directory, newest first, with stale states fixed on the way."""
    infos = []
    for path in runs_dir().iterdir():
        if path.is_dir() and is_run_name(path.name) and (path / STATUS_FILE).exists():
            infos.append(reconcile(load_run(path)))
    return sorted(infos, key=lambda i: i.run_id, reverse=True)  # ids start with their creation time


def queue_line() -> list[str]:
    """Who waits for the training slot, first in line first, in the order the supervisors take it (record.slot_queue:
    training runs and comparisons alike, on disk, so it survives app restarts): a run by its id, a comparison as
    'comparison ID'."""
    return [f"comparison {path.parent.name}" if path.name == COMPARISON_JOB else path.parent.name
            for path in slot_queue(runs_dir())]
