"""One supervisor for the app's background jobs (training, evaluation, export, scale-out, comparison): it runs a job
record's steps in turn and writes every change of state into the record, so the app reads a job's state from its
record, never from its log.

    python -m grpo_playground.jobs.supervisor RECORD.json

The record (grpo_playground.jobs.record) lists the steps, each an argv with an optional time limit. The supervisor
is started in its own session (its pid is the job's process group), writes its pid and start ticks into the record,
takes the training slot first when the record asks (`slot`: an exclusive flock on <runs>/.gpu.lock; state "queued"
while it waits, and it takes the slot only when it is first in line among every record waiting for it: first come,
first served across training runs and comparisons), then runs each step with its output appended to the record's
log, the slot's fd passed on so the slot stays taken while any part of the job lives. Why a lock held by the job
and not a queue served by the app: the queue survives an app restart (it is the waiting supervisors and their
records), and the kernel frees the slot when the job dies, however it dies.

A step that exits 0 is "done", else "failed" with its reason: the exit code and the last line of the record's
traceback file, where the step's CLI writes why it failed (contracts.process.keep_traceback and fail, told the path
by TRACEBACK_ENV); one past its limit is stopped and "failed"; the next step runs either way. SIGTERM (Stop) is
passed to the running step (a trainer saves at its next step boundary) and marks it and the rest "stopped"; after
the record's grace_s whatever is left in the group is killed. A training job's supervisor also keeps its run
folder's status.json (grpo_playground.jobs.run_status).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from grpo_playground.contracts.process import TRACEBACK_ENV, kill_group, last_error, process_start_ticks
from grpo_playground.contracts.states import JobState, StepState
from grpo_playground.jobs import run_status
from grpo_playground.jobs.crash import oom_kill_count
from grpo_playground.jobs.record import GRACE_S, read_record, slot_queue, write_record

POLL_S = 0.2

_stop = False


def _on_sigterm(signum, frame) -> None:
    global _stop
    _stop = True


def _say(message: str) -> None:
    print(f"[job] {time.strftime('%H:%M:%S')} {message}", flush=True)


def _take_slot(path: Path, lock: Path) -> int | None:
    """The locked fd of the training slot, once free and this job is first in line; None when stopped while
    waiting."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    while not _stop:
        line = slot_queue(lock.parent.resolve())
        if path not in line or line[0] == path:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                pass
        time.sleep(POLL_S)
    os.close(fd)
    return None


def _run_step(step: dict, lock_fd: int | None, grace_s: float, traceback: str | None,
              on_start=None) -> tuple[str, str, int]:
    """Run one step to its end: (its state, a reason when it did not finish cleanly, its exit code)."""
    env = {**os.environ, TRACEBACK_ENV: traceback} if traceback else None
    if traceback:
        Path(traceback).unlink(missing_ok=True)  # the step before's: each step's reason is its own
    child = subprocess.Popen(step["argv"], stdin=subprocess.DEVNULL, env=env,
                             pass_fds=() if lock_fd is None else (lock_fd,))
    if on_start:
        on_start(child.pid)
    limit = step.get("timeout_s")
    started, terminated_at, killed = time.monotonic(), None, False
    while child.poll() is None:
        if terminated_at is None and (_stop or (limit and time.monotonic() - started > limit)):
            terminated_at = time.monotonic()
            child.terminate()
        elif terminated_at and not killed and time.monotonic() - terminated_at > grace_s:
            _say(f"no clean stop after {grace_s:g} s: killing the process group")
            kill_group(os.getpgid(0), spare=os.getpid())
            killed = True
        time.sleep(POLL_S)
    if _stop:  # Stop signals the whole group: the step may have ended on that SIGTERM before we saw it
        return StepState.STOPPED, f"killed {grace_s:g} s after the stop request" if killed else "stopped on request", \
            child.returncode
    if terminated_at:
        return StepState.FAILED, f"over its {limit / 3600:g} h limit: stopped", child.returncode
    if child.returncode == 0:
        return StepState.DONE, "", 0
    exit_reason = f"exit {child.returncode}" if child.returncode > 0 else f"killed by {_signal_name(child.returncode)}"
    error = last_error(traceback) if traceback else ""
    return StepState.FAILED, f"{exit_reason}: {error}" if error else exit_reason, child.returncode


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def supervise(path: Path) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    path = path.resolve()
    record = read_record(path)
    run_dir = path.parent if record.get("kind") == "train" else None  # a training run's record is its job.json
    grace_s = float(record.get("grace_s") or GRACE_S)
    record.update(pid=os.getpid(), start_ticks=process_start_ticks(os.getpid()), state=JobState.QUEUED)
    write_record(path, record)
    lock_fd = None
    if record.get("slot"):
        _say("waiting for the training slot")
        lock_fd = _take_slot(path, Path(record["slot"]))
        if lock_fd is not None:
            _say("got the training slot")
    run_end = run_status.STOPPED_WHILE_QUEUED if record.get("slot") and lock_fd is None else {}
    oom_kills_before = oom_kill_count()
    on_start = (lambda pid: run_status.started(run_dir, pid)) if run_dir else None
    for step in record["steps"]:
        if _stop:
            step["state"] = StepState.STOPPED
            continue
        record["state"], step["state"] = JobState.RUNNING, StepState.RUNNING
        write_record(path, record)
        _say(f"{step['label']}: {' '.join(step['argv'])}")
        step["state"], step["reason"], returncode = _run_step(step, lock_fd, grace_s, record.get("traceback"), on_start)
        _say(f"{step['label']}: {step['state']}{' (' + step['reason'] + ')' if step['reason'] else ''}")
        if run_dir:  # no leftover (a generation worker) writes on while the run's end is recorded
            kill_group(os.getpgid(0), spare=os.getpid())
            run_end = run_status.ending(run_dir, returncode, _stop, step["reason"], oom_kills_before)
    kill_group(os.getpgid(0), spare=os.getpid())  # nothing of the job outlives it
    failed = [s for s in record["steps"] if s["state"] == StepState.FAILED]
    record["state"] = JobState.STOPPED if _stop else JobState.FAILED if failed else JobState.FINISHED
    if run_dir:  # the run's own word (a trainer that stopped at a stop.request exits 0)
        record["state"] = run_status.final_state(run_dir, run_end)
    record.update(ended=time.time(), reason=failed[0]["reason"] if failed else "")
    # a trainer that wrote its own end into status.json may already have been started again, with a new record
    if read_record(path).get("pid") == os.getpid():
        write_record(path, record)
    if run_dir:  # last: once status.json says the run ended, the app may start it again (a new record)
        run_status.record_end(run_dir, run_end)
    return 0


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1])))
