"""The job record: one schema for the app's background jobs (training, evaluation, export, scale-out, comparison),
and the one way to start one, read its state and stop it (what differs by kind: grpo_playground.jobs.kinds).

A record is a JSON file (written atomically, by the supervisor once it runs):
    {"kind": train|eval|export|scale-out|compare, "steps": [{"label", "argv", "timeout_s", "state", "reason"}],
     "log": path, "slot": path of the training slot's lock or null, "result": path of the job's result file or null,
     "traceback": path of the file a failing step writes why (contracts.process.TRACEBACK_ENV) or null,
     "grace_s": seconds a stopped step may take to exit before its group is killed, "pid" and "start_ticks" (the
     supervisor: the job's process group), "state" (JobState), "reason", "started" (when it was queued: the
     training slot's queue is first come, first served by it), "ended", "meta": what the job's kind keeps beside
     (the plan, the checkpoints, a training run's stage and command...)}
Step states: StepState. A record whose supervisor is gone but whose state is still active reads as failed.
A training run's record is its run folder's job.json; the supervisor keeps that folder's status.json too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from grpo_playground.child_process import CHECKOUT
from grpo_playground.contracts.process import (
    group_members,
    is_alive,
    kill_group,
    log_tail,
    read_json,
    write_json_atomic,
)
from grpo_playground.contracts.layout import COMPARISON_JOB, COMPARISONS_DIR, JOB_FILE
from grpo_playground.contracts.states import ACTIVE_STATES, JobState, StepState

START_TIMEOUT_S = 20.0  # the supervisor writes its pid within this (a Python start and two small imports)
GRACE_S = 10.0  # a stopped or timed-out step's time to exit on SIGTERM before its group is killed
# where, under the runs directory, the records of the kinds that train live (they wait for the training slot)
SLOT_RECORDS = (f"*/{JOB_FILE}", f"{COMPARISONS_DIR}/*/{COMPARISON_JOB}")


def step(label: str, argv: list[str], timeout_s: float | None = None) -> dict:
    return {"label": label, "argv": list(argv), "timeout_s": timeout_s, "state": StepState.PENDING, "reason": ""}


def read_record(path: Path) -> dict:
    return read_json(path)


def write_record(path: Path, record: dict) -> None:
    write_json_atomic(path, record)


def start_job(path: Path, kind: str, steps: list[dict], log: BinaryIO, env: dict[str, str], *,
              slot: Path | None = None, result: Path | None = None, traceback: Path | None = None,
              meta: dict | None = None, grace_s: float = GRACE_S) -> dict:
    """Write the record and start its supervisor (output to the open `log`); returns the record once the
    supervisor has written its pid into it."""
    log_path = Path(log.name)
    if traceback:
        Path(traceback).unlink(missing_ok=True)  # an earlier attempt's
    write_record(path, {"kind": kind, "steps": steps, "log": str(log_path), "slot": str(slot) if slot else None,
                        "result": str(result) if result else None, "traceback": str(traceback) if traceback else None,
                        "grace_s": grace_s, "pid": None, "start_ticks": None,
                        "state": JobState.CREATED, "reason": "", "started": time.time(), "meta": meta or {}})
    # its own session (so its pid is the group Stop signals), output to the log file: never a pipe
    proc = subprocess.Popen([sys.executable, "-m", "grpo_playground.jobs.supervisor", str(path)], cwd=CHECKOUT,
                            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    threading.Thread(target=proc.wait, daemon=True).start()  # collect its exit status: no zombie
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.returncode is None:  # set by the thread that waits for it
        record = read_record(path)
        if record.get("pid") == proc.pid:
            return record
        time.sleep(0.05)
    raise RuntimeError(f"the {kind} job's supervisor did not start: {log_tail(log_path, 2000)}")


def supervisor_starting(record: dict) -> bool:
    """start_job wrote the record and waits for its supervisor's pid (START_TIMEOUT_S at most)."""
    return record.get("pid") is None and time.time() - float(record.get("started") or 0) < START_TIMEOUT_S


def job_state(record: dict) -> str:
    """The record's state, "failed" when it says active but its supervisor is gone (killed, a reboot), or when it
    is still "created" (start_job's own write, before the supervisor's pid) long after start_job gave up on it."""
    state = record.get("state")
    if state == JobState.CREATED and not supervisor_starting(record):
        return JobState.FAILED.value
    if state in ACTIVE_STATES and not is_alive(record.get("pid"), record.get("start_ticks")):
        return JobState.FAILED.value
    return str(state) if state else "none"


def job_running(record: dict) -> bool:
    """Starting or active: a UI tick that reads the record while the supervisor starts must not take the job for
    ended (an export read 'failed: no result' in the second before its supervisor wrote its pid)."""
    return bool(record) and job_state(record) in (JobState.CREATED, *ACTIVE_STATES)


def slot_queue(runs: Path) -> list[Path]:
    """The records under `runs` waiting for the training slot, first come first (training runs and comparisons
    alike): a supervisor takes the slot only when it is first in line."""
    waiting = []
    for pattern in SLOT_RECORDS:
        for path in runs.glob(pattern):
            record = read_record(path)
            if record.get("slot") and record.get("state") == JobState.QUEUED and job_running(record):
                waiting.append((record.get("started") or 0.0, str(path)))
    return [Path(path) for _, path in sorted(waiting)]


def stop_job(path: Path) -> int | None:
    """SIGTERM the job's process group (the supervisor records the stop); its pid, or None when not running. A
    group whose supervisor was killed on its own is SIGKILLed: nothing is left to record or save. (A training run
    is stopped through its supervisor alone, which passes the stop to the trainer: jobs.control.stop_run.)"""
    record = read_record(path)
    if record.get("state") == JobState.CREATED:
        return None  # its supervisor is starting: nothing to signal yet
    if not job_running(record):
        # a supervisor still alive has recorded its end and killed its group: it is exiting, nothing is left
        supervisor_gone = not is_alive(record.get("pid"), record.get("start_ticks"))
        if record.get("pid") and supervisor_gone and group_members(record["pid"]):
            kill_group(record["pid"])
            return record["pid"]
        return None
    try:
        os.killpg(record["pid"], signal.SIGTERM)
    except ProcessLookupError:
        return None
    return record["pid"]
