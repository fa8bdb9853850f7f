"""Chat servers recorded on disk like jobs, so that a restarted app stops the ones a killed app left behind.

Each server runs in its own session (so stopping it stops what it spawned), which is also why it outlives an app
killed by SIGKILL or the out-of-memory killer: atexit never runs, and the old llama.cpp or vLLM server keeps its
memory, its port and (vLLM) its share of the GPU while the new app knows nothing of it (issue 38, item 5). So the
app writes one JSON file per server it launches, `<cache>/chat_servers/<pid>.json`, and removes it when it stops
the server; at start-up, `stop_orphans()` stops every recorded server whose app is gone. A record names the
process by pid and start time (a recycled pid is not ours) and the app the same way; servers of another app that
still runs (two apps sharing one cache folder) are left alone.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from grpo_playground.contracts.process import (
    is_alive,
    kill_group,
    process_start_ticks,
    read_json,
    write_json_atomic,
)

STOP_GRACE_S = 5.0  # SIGTERM first: vLLM frees the GPU cleanly; SIGKILL to what is left after this


def records_dir() -> Path:
    from grpo_playground.models.loading import cache_dir

    return cache_dir() / "chat_servers"


def this_app() -> dict:
    return {"pid": os.getpid(), "start_ticks": process_start_ticks(os.getpid())}


def record_server(pid: int, backend: str, model: str, port: int, log_file: Path) -> None:
    """Write the record of a server this app just launched (its own process group: pgid = pid)."""
    folder = records_dir()
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / f"{pid}.json", {
        "pid": pid, "start_ticks": process_start_ticks(pid), "backend": backend, "model": model, "port": port,
        "started": time.time(), "log": log_file.name, "app": this_app(),
    })


def forget_server(pid: int) -> None:
    (records_dir() / f"{pid}.json").unlink(missing_ok=True)


def stop_orphans() -> list[dict]:
    """Stop every recorded server whose app is gone and delete its record; return the records of those stopped."""
    stopped = []
    for path in sorted(records_dir().glob("*.json")):
        record = read_json(path)
        app = record.get("app") or {}
        if is_alive(app.get("pid"), app.get("start_ticks")):
            continue  # this app's, or another running app's
        pid, ticks = record.get("pid"), record.get("start_ticks")
        if isinstance(pid, int) and isinstance(ticks, int) and is_alive(pid, ticks):  # never a recycled pid
            _stop_group(pid)
            stopped.append(record)
        path.unlink(missing_ok=True)
    if stopped:
        from grpo_playground import gpu_share

        for record in stopped:
            gpu_share.forget(gpu_share.CHAT, record["pid"])
    return stopped


def _stop_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and is_alive(pgid):
        time.sleep(0.1)
    kill_group(pgid)
