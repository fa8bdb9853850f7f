"""Why a training job died when it could not say it itself (killed, or crashed before its own handler wrote
status.json): the supervisor of a training run writes this one line as the run's reason. Pure Python, no torch."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from grpo_playground.contracts.process import log_tail
from grpo_playground.doctor import diagnose_crash  # pure Python, like this module
from grpo_playground.run_layout import read_status

LOG_TAIL_BYTES = 64_000
ERROR_LINE_RE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Interrupt)|Killed|Traceback)\b.*")


def crash_reason(log_path: Path, returncode: int, oom_kills_before: int | None = None) -> str:
    """The doctor's diagnosis of the last error line of the job's traceback (OOM, NaN logits), else that line;
    without one, what the exit code says. A signal is blamed on the out-of-memory killer only when the kernel's
    OOM count rose during the job."""
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
