"""Supervises one training job: waits its turn, runs the command, cleans up, records how it ended.

    python -m grpo_playground.jobs.launcher --run-dir runs/ID [--grace 300] -- python -m grpo_playground.cli.train ...

Started by `grpo_playground.jobs.start_run` in a new session, so its pid is the process-group id of the
whole job, with stdout/stderr already appended to the run's log.txt. Pure Python, no torch.

Queue: one training job at a time (one GPU). Waiting jobs show state "queued"; the first in line (oldest
`queued_at` among live queued runs) takes an exclusive flock on <runs>/.gpu.lock. Why a lock held by the job
and not a queue served by the UI: the queue then survives an app restart (it is the set of waiting launcher
processes plus their status files), and the kernel releases the slot when the job dies, however it dies.
The lock fd is passed to the training process too, so the slot stays taken while any part of it lives.

Stop: SIGTERM (sent by the UI, which also writes stop.request) is forwarded to the training process, which
saves at its next step boundary and exits; after --grace seconds everything left in the group is SIGKILLed.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from grpo_playground.contracts.process import kill_group, log_tail
from grpo_playground.jobs.runs import compact_metrics, queue_order, stop_grace_s
from grpo_playground.run_layout import FINAL_STATES, GPU_LOCK, LOG_FILE, STOP_FILE, read_status, write_status
from grpo_playground.doctor import diagnose_crash  # pure Python, like this module

POLL_S = 0.5
LOG_TAIL_BYTES = 64_000
ERROR_LINE_RE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Interrupt)|Killed|Traceback)\b.*")

_stop_requested_at: float | None = None


def crash_reason(log_path: Path, returncode: int, oom_kills_before: int | None = None) -> str:
    """One line saying why the job died (when the job could not say it itself, e.g. killed or crashed before
    its own handler): the doctor's diagnosis of the last error line (OOM, NaN logits), else that line. A
    signal is blamed on the out-of-memory killer only when the kernel's OOM count rose during the job."""
    tail = log_tail(log_path, LOG_TAIL_BYTES)
    errors = [m.group(0).strip() for m in map(ERROR_LINE_RE.match, tail.splitlines()) if m]
    errors = [e for e in errors if not e.startswith("Traceback")]
    if errors:
        finding = diagnose_crash(errors[-1], stage=read_status(log_path.parent).get("stage") or "grpo")
        return f"{finding.message}. Try: {finding.knob} ({errors[-1][:200]})" if finding else errors[-1][:500]
    if returncode < 0:
        name = signal.Signals(-returncode).name
        oom = None if oom_kills_before is None else (oom_kill_count() or 0) - oom_kills_before
        if oom and name == "SIGKILL":
            return ("killed by the kernel's out-of-memory killer (SIGKILL; the kernel counted an OOM kill while "
                    "the job ran): lower the batch size, num_generations or max_completion_length")
        if oom == 0:
            return f"killed by {name}, sent by another process (the kernel counted no out-of-memory kill)"
        return f"killed by {name}"
    return f"exited with code {returncode}: see log.txt"


def oom_kill_count() -> int | None:
    """The kernel's count of out-of-memory kills (/proc/vmstat oom_kill, Linux >= 4.13), None if unreadable."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def kill_group_leftovers() -> None:
    """SIGKILL every process of our group but us: no orphan keeps GPU memory after the job ends."""
    kill_group(os.getpgid(0), spare=os.getpid())


def _on_sigterm(signum, frame) -> None:
    global _stop_requested_at
    if _stop_requested_at is None:
        _stop_requested_at = time.time()


def wait_for_slot(run_dir: Path) -> int | None:
    """Block until this run is first in line and holds the lock; returns the lock fd, None if stopped."""
    fd = os.open(run_dir.parent / GPU_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    while _stop_requested_at is None:
        line = queue_order()
        if not any(i.path == run_dir for i in line) or line[0].path == run_dir:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                pass
        time.sleep(POLL_S)
    os.close(fd)
    return None


def supervise(run_dir: Path, command: list[str], grace_s: float) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    lock_fd = wait_for_slot(run_dir)
    if lock_fd is None:
        write_status(run_dir, state="stopped", reason="stopped while queued")
        return 0
    print(f"[launcher] {time.strftime('%H:%M:%S')} got the training slot, running: {' '.join(command)}", flush=True)
    oom_kills_before = oom_kill_count()
    child = subprocess.Popen(command, pass_fds=(lock_fd,), stdin=subprocess.DEVNULL)
    write_status(run_dir, state="running", pid=child.pid, started=time.time(), reason="")
    forwarded = killed = False
    while child.poll() is None:
        if _stop_requested_at is not None:
            if not forwarded:
                child.send_signal(signal.SIGTERM)
                forwarded = True
            elif time.time() - _stop_requested_at > grace_s:
                print(f"[launcher] no clean stop after {grace_s:.0f} s: killing the process group", flush=True)
                kill_group_leftovers()
                killed = True
        time.sleep(POLL_S / 5)
    kill_group_leftovers()
    compact_metrics(run_dir)
    rc = child.returncode
    stop_asked = _stop_requested_at is not None or (run_dir / STOP_FILE).exists()
    state = read_status(run_dir).get("state")
    if state not in FINAL_STATES or (state != "failed" and rc != 0 and not stop_asked):
        if stop_asked:
            reason = f"killed {grace_s:.0f} s after the stop request" if killed else "stopped on request"
            write_status(run_dir, state="stopped", reason=reason)
        elif rc == 0:
            write_status(run_dir, state="finished", reason="")
        else:
            write_status(run_dir, state="failed", reason=crash_reason(run_dir / LOG_FILE, rc, oom_kills_before))
    print(f"[launcher] {time.strftime('%H:%M:%S')} job exited with code {rc}: {read_status(run_dir).get('state')}",
          flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one training job in its turn (used by the UI).")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--grace", type=float, default=stop_grace_s())
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the training command after --")
    return supervise(args.run_dir.resolve(), command, args.grace)


if __name__ == "__main__":
    sys.exit(main())
