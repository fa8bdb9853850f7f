"""One supervisor for the app's background jobs (evaluation, export, comparison): it runs a job record's steps in
turn and writes every change of state into the record, so the app reads a job's state from its record, never from
its log.

    python -m grpo_playground.jobs.supervisor RECORD.json

The record (grpo_playground.jobs.record) lists the steps, each an argv with an optional time limit. The supervisor
is started in its own session (its pid is the job's process group), writes its pid and start ticks into the record,
takes the training slot first when the record asks (`slot`: the flock on <runs>/.gpu.lock that training jobs take;
state "queued" while it waits), then runs each step with its output appended to the record's log. A step that
exits 0 is "done", else "failed"; one past its limit is stopped and "failed"; the next step runs either way.
SIGTERM (Stop) ends the running step and marks it and the rest "stopped"; after GRACE_S whatever is left in the
group is killed. Standard library and contracts only.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from grpo_playground.contracts.process import kill_group, process_start_ticks
from grpo_playground.contracts.states import JobState, StepState
from grpo_playground.jobs.record import read_record, write_record

POLL_S = 0.2
GRACE_S = 10.0  # a stopped or timed-out step's time to exit on SIGTERM before its group is killed

_stop = False


def _on_sigterm(signum, frame) -> None:
    global _stop
    _stop = True


def _say(message: str) -> None:
    print(f"[job] {time.strftime('%H:%M:%S')} {message}", flush=True)


def _take_slot(lock: Path) -> int | None:
    """The locked fd of the training slot, once free; None when stopped while waiting."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    while not _stop:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            time.sleep(POLL_S)
    os.close(fd)
    return None


def _run_step(step: dict, lock_fd: int | None) -> tuple[str, str]:
    """Run one step to its end: (its state, a reason when it did not finish cleanly)."""
    child = subprocess.Popen(step["argv"], stdin=subprocess.DEVNULL, pass_fds=() if lock_fd is None else (lock_fd,))
    limit = step.get("timeout_s")
    started, terminated_at = time.monotonic(), None
    while child.poll() is None:
        if terminated_at is None and (_stop or (limit and time.monotonic() - started > limit)):
            terminated_at = time.monotonic()
            child.terminate()
        elif terminated_at and time.monotonic() - terminated_at > GRACE_S:
            kill_group(os.getpgid(0), spare=os.getpid())
        time.sleep(POLL_S)
    if _stop:  # Stop signals the whole group: the step may have ended on that SIGTERM before we saw it
        return StepState.STOPPED, "stopped on request"
    if terminated_at:
        return StepState.FAILED, f"over its {limit / 3600:g} h limit: stopped"
    return (StepState.DONE, "") if child.returncode == 0 else (StepState.FAILED, f"exit {child.returncode}")


def supervise(path: Path) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    record = read_record(path)
    record.update(pid=os.getpid(), start_ticks=process_start_ticks(os.getpid()), state=JobState.QUEUED)
    write_record(path, record)
    lock_fd = None
    if record.get("slot"):
        _say("waiting for the training slot")
        lock_fd = _take_slot(Path(record["slot"]))
        if lock_fd is not None:
            _say("got the training slot")
    for step in record["steps"]:
        if _stop:
            step["state"] = StepState.STOPPED
            continue
        record["state"], step["state"] = JobState.RUNNING, StepState.RUNNING
        write_record(path, record)
        _say(f"{step['label']}: {' '.join(step['argv'])}")
        step["state"], step["reason"] = _run_step(step, lock_fd)
        _say(f"{step['label']}: {step['state']}{' (' + step['reason'] + ')' if step['reason'] else ''}")
    kill_group(os.getpgid(0), spare=os.getpid())  # nothing of the job outlives it
    failed = [s for s in record["steps"] if s["state"] == StepState.FAILED]
    record["state"] = JobState.STOPPED if _stop else JobState.FAILED if failed else JobState.FINISHED
    record.update(ended=time.time(), reason=failed[0]["reason"] if failed else "")
    write_record(path, record)
    return 0


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1])))
