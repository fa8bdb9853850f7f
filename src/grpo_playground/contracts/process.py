"""What the app needs to know of a process it started and to end it: start ticks, liveness, process-group kills,
the tail of its log, JSON files written so that a reader never sees half of one, and the traceback file a job
leaves when it dies of an exception. Linux /proc, stdlib only."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path


def process_start_ticks(pid) -> int | None:
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


def log_tail(path: str | Path, max_bytes: int = 12_000, lines: int | None = None) -> str:
    """The end of a log file: its last `max_bytes` from a line boundary (the whole file when shorter), then only
    its last `lines` lines when given; "" when it cannot be read."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(0, end - max_bytes))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    if end > max_bytes:
        text = text[text.find("\n") + 1 :]
    return text if lines is None else "\n".join(text.splitlines()[-lines:])


def read_json(path: str | Path) -> dict:
    """A JSON object from a file; {} when missing or caught half-written (writers replace files atomically,
    but a foreign writer might not)."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def write_text_atomic(path: str | Path, text: str | bytes) -> None:
    """Write `text` (UTF-8) or bytes to a temporary file beside `path`, then rename it over `path`: a reader sees
    the old file or the new one, never half of one. The temporary name holds the process and the thread, so two
    writers of the same file never write into each other's temporary file (the last rename wins, whole)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # only left when the write or the rename failed


def write_json_atomic(path: str | Path, value: dict, indent: int | None = 1) -> None:
    """`value` as JSON, written with write_text_atomic."""
    write_text_atomic(path, json.dumps(value, indent=indent, ensure_ascii=False))


TRACEBACK_ENV = "GRPO_PLAYGROUND_TRACEBACK_FILE"  # set by a job's supervisor: where its step says why it failed
_traceback_file: Path | None = None  # this process's, once keep_traceback named it (fail writes there too)


def keep_traceback(path: str | Path | None = None) -> None:
    """From now on an uncaught exception of this process is written to `path` (default: the file its job's
    supervisor named in TRACEBACK_ENV; none outside a job), then printed as usual, so that whoever supervises it
    reads why it died from that file, not from its log. Its own children do not inherit TRACEBACK_ENV: a child's
    error is not the job's reason."""
    global _traceback_file
    inherited = os.environ.pop(TRACEBACK_ENV, None)  # its own children report to it, not to its supervisor
    path = path or inherited
    if not path:
        return
    _traceback_file = Path(path)

    def hook(kind, exc, tb) -> None:
        try:
            Path(path).write_text("".join(traceback.format_exception(kind, exc, tb)), encoding="utf-8")
        except OSError:
            pass  # the folder is gone: the log still gets the traceback
        sys.__excepthook__(kind, exc, tb)

    sys.excepthook = hook


def fail(message: str, code: int = 2, prefix: str = "error") -> int:
    """A CLI's handled error: `prefix: message` on stderr and, after keep_traceback, `message` in its traceback file,
    where the app reads why the step failed. Returns `code`, the exit status."""
    print(f"{prefix}: {message}", file=sys.stderr, flush=True)
    if _traceback_file:
        try:
            _traceback_file.write_text(message.replace("\n", " ") + "\n", encoding="utf-8")  # last_error reads one line
        except OSError:
            pass  # the stderr line stays
    return code


def last_error(path: str | Path) -> str:
    """The last line of a traceback file (the exception that ended the process: "ValueError: ..."), "" if none."""
    lines = log_tail(path, 4000).strip().splitlines()
    return lines[-1].strip() if lines else ""
