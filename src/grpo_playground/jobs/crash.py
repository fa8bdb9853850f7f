"""Why a training job died when it could not say it itself (killed, or crashed before its own handler wrote
status.json): the supervisor of a training run writes this one line as the run's reason. It reads the traceback
file the training CLI leaves (contracts.process.keep_traceback) and the exit code, never the log. Pure Python, no
torch."""

from __future__ import annotations

import signal
from pathlib import Path

from grpo_playground.contracts.process import last_error, log_tail
from grpo_playground.doctor import diagnose_crash  # pure Python, like this module
from grpo_playground.contracts.layout import TRACEBACK_FILE
from grpo_playground.run_layout import read_status


def crash_reason(run_dir: Path, returncode: int, oom_kills_before: int | None = None) -> str:
    """The doctor's diagnosis of the exception in the run's traceback file (OOM, NaN logits, a token id past the
    embedding: its last frames tell those apart), else that exception; without one, what the exit code says. A
    signal is blamed on the out-of-memory killer only when the kernel's OOM count rose during the job."""
    error = last_error(run_dir / TRACEBACK_FILE)
    if error:
        finding = diagnose_crash(error, stage=read_status(run_dir).get("stage") or "grpo",
                                 frames=log_tail(run_dir / TRACEBACK_FILE, 2000))
        return f"{finding.message}. Try: {finding.knob} ({error[:200]})" if finding else error[:500]
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
