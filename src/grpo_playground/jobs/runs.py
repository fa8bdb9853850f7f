"""Run folders on disk: where they live, their status file, and whether their processes are alive.

Everything here reads or writes small files, so the UI can re-attach to any run after a closed browser
or an app restart: the disk, not the UI process, is the source of truth.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

RUNS_DIR_ENV = "GRPO_PLAYGROUND_RUNS_DIR"
ACTIVE_STATES = ("queued", "running", "stopping")
FINAL_STATES = ("stopped", "finished", "failed")
STATUS_FILE = "status.json"
JOB_FILE = "job.json"
STOP_FILE = "stop.request"
LOG_FILE = "log.txt"
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def runs_dir() -> Path:
    """The runs directory (env GRPO_PLAYGROUND_RUNS_DIR, default ./runs), created on first use."""
    path = Path(os.environ.get(RUNS_DIR_ENV) or "runs").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_path(run_id: str) -> Path:
    """The folder of an existing run; the id is checked so that a user cannot point outside the runs dir."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise ValueError(f"run id {run_id!r} is not valid: pick one from the run list (letters, digits, . _ -)")
    path = runs_dir() / run_id
    if not path.is_dir():
        raise FileNotFoundError(f"no run {run_id!r} in {runs_dir()}: pick one from the run list")
    return path


def new_run_id(name: str = "run") -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:40] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def read_json(path: Path) -> dict:
    """A JSON object from a file; {} when missing or caught half-written (writers replace files atomically,
    but a foreign writer might not)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def write_json_atomic(path: Path, value: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def read_status(run_dir: Path) -> dict:
    return read_json(Path(run_dir) / STATUS_FILE)


def write_status(run_dir: Path, **updates) -> dict:
    """Merge `updates` into status.json (atomically), stamping `updated`; returns the new status."""
    status = read_status(run_dir)
    status.update(updates)
    status["updated"] = time.time()
    write_json_atomic(Path(run_dir) / STATUS_FILE, status)
    return status


def process_start_ticks(pid: int) -> int | None:
    """Start time of a live, non-zombie process (clock ticks since boot), None when it is gone.
    Stored next to a pid so that a recycled pid is not mistaken for our job."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError, TypeError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def is_alive(pid, start_ticks: int | None = None) -> bool:
    ticks = process_start_ticks(pid) if pid else None
    return ticks is not None and (start_ticks is None or ticks == start_ticks)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def kill_group(pgid: int, spare: int | None = None) -> None:
    """SIGKILL every live process of group `pgid` but `spare`; one that ended meanwhile is skipped."""
    for pid in group_members(pgid):
        if pid != spare:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass
class RunInfo:
    run_id: str
    path: Path
    status: dict
    job: dict

    @property
    def state(self) -> str:
        return self.status.get("state", "unknown")

    def processes_alive(self) -> bool:
        """The launcher or anything left in its process group; for a run started from the CLI (no job.json)
        the pid the job wrote. A bare pid can be recycled after a reboot, so it is the last resort."""
        if self.job:
            if is_alive(self.job.get("launcher_pid"), self.job.get("start_ticks")):
                return True
            return bool(self.job.get("pgid") and group_members(int(self.job["pgid"])))
        return is_alive(self.status.get("pid"))


def load_run(run_dir: Path) -> RunInfo:
    run_dir = Path(run_dir)
    return RunInfo(run_dir.name, run_dir, read_status(run_dir), read_json(run_dir / JOB_FILE))


def reconcile(info: RunInfo) -> RunInfo:
    """A status that says queued/running/stopping while none of the job's processes live is stale (the job
    was SIGKILLed, the machine rebooted): rewrite it as failed, or stopped when a stop was asked for."""
    # Without job.json or a pid we only know the UI wrote "queued" just before spawning: give it a minute.
    has_trace = bool(info.job or info.status.get("pid")) or time.time() - info.status.get("updated", 0) > 60
    if info.state in ACTIVE_STATES and has_trace and not info.processes_alive():
        if (info.path / STOP_FILE).exists():
            info.status = write_status(info.path, state="stopped", reason="stopped (the process was killed)")
        else:
            info.status = write_status(info.path, state="failed", reason="process died")
    return info


def list_runs() -> list[RunInfo]:
    """Every run in the runs directory, newest first, with stale states fixed on the way."""
    infos = []
    for path in runs_dir().iterdir():
        if path.is_dir() and RUN_ID_RE.match(path.name) and (path / STATUS_FILE).exists():
            infos.append(reconcile(load_run(path)))
    return sorted(infos, key=lambda i: i.run_id, reverse=True)  # ids start with their creation time


def queue_order(infos: list[RunInfo] | None = None) -> list[RunInfo]:
    """Runs waiting for the training slot, first in line first (survives app restarts: it is on disk).
    `infos`: a fresh list_runs() the caller already has."""
    waiting = [i for i in (list_runs() if infos is None else infos) if i.state == "queued" and i.processes_alive()]
    return sorted(waiting, key=lambda i: (i.job.get("queued_at", 0), i.run_id))
