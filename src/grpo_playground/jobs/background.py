"""A detached child of the app (an evaluation chain, a comparison, a GGUF export): its own session, output to a log
file (never a pipe), and a job record of its pid with the process start time (against pid reuse) that the app reads
back from disk. Stop signals the whole session."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import BinaryIO

from grpo_playground.child_process import CHECKOUT
from grpo_playground.contracts.process import is_alive, process_start_ticks, read_json, write_json_atomic


def start_detached(command: list[str], log: BinaryIO, env: dict[str, str]) -> dict:
    """Start `command` in the checkout, in its own session; the job record's {"pid", "start_ticks"}."""
    proc = subprocess.Popen(command, cwd=CHECKOUT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    threading.Thread(target=proc.wait, daemon=True).start()  # collect its exit status: no zombie
    return {"pid": proc.pid, "start_ticks": process_start_ticks(proc.pid)}


def stop_detached(job_file: Path) -> int | None:
    """Mark the job in `job_file` stopped and SIGTERM its session; its pid, or None when it was not running."""
    job = read_json(job_file)
    if not job or not is_alive(job.get("pid"), job.get("start_ticks")):
        return None
    write_json_atomic(job_file, {**job, "stopped": True})
    try:
        os.killpg(job["pid"], signal.SIGTERM)  # its own session: the whole chain, nothing else
    except ProcessLookupError:
        pass
    return job["pid"]
