"""Export a run to GGUF from the UI: `python -m pipelines.export` as a child process in its own session.

The export's output goes to <run>/export.log (appended, one "[ui] export" marker per attempt) and its pid
to <run>/export_job.json, so its state is read back from disk like a training job's: running while the
pid lives, then finished (the CLI's "done" line and the paths it printed last) or failed (its error line).
It does not take the training slot: merge, conversion and quantization run on the CPU.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from grpo_playground.jobs.control import check_owner
from grpo_playground.jobs.runs import (
    ACTIVE_STATES,
    is_alive,
    load_run,
    process_start_ticks,
    read_json,
    reconcile,
    run_path,
    write_json_atomic,
)

EXPORT_LOG = "export.log"
EXPORT_JOB = "export_job.json"
MARKER = "[ui] export"
LOG_TAIL_BYTES = 64_000


def start_export(run_id: str, gguf: list[str] | tuple[str, ...] = ("q4_k_m",), token: str | None = None) -> dict:
    """Owner only: export a stopped or finished run's latest adapter (grpo, else sft) to these GGUF types."""
    from grpo_playground.export import GGUF_TYPES, export_command
    from grpo_playground.export import start_export as spawn_export

    check_owner(token)
    info = reconcile(load_run(run_path(run_id)))
    if info.state in ACTIVE_STATES:
        raise RuntimeError(f"run {run_id} is {info.state}: export it once it has stopped or finished")
    if not any((info.path / stage / "adapter_config.json").is_file() for stage in ("grpo", "sft")):
        raise RuntimeError(f"run {run_id} has no trained adapter yet (no sft/ or grpo/ folder): train a stage first")
    unknown = [g for g in gguf if g not in GGUF_TYPES]
    if not gguf or unknown:
        raise ValueError(f"GGUF types {unknown or list(gguf)} are not valid: choose from {', '.join(GGUF_TYPES)}")
    if export_state(info.path)["state"] == "running":
        raise RuntimeError(f"run {run_id} is already being exported: wait for it to finish")
    command = export_command(info.path, gguf=list(gguf))
    with open(info.path / EXPORT_LOG, "ab") as log:
        log.write(f"\n{MARKER} {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(command[1:])}\n".encode())
    proc = spawn_export(info.path / EXPORT_LOG, run_dir=info.path, gguf=list(gguf))
    threading.Thread(target=proc.wait, daemon=True).start()  # collect its exit status: no zombie
    write_json_atomic(info.path / EXPORT_JOB, {"pid": proc.pid, "start_ticks": process_start_ticks(proc.pid),
                                              "command": command, "started": time.time()})
    return export_state(info.path)


def export_state(run_dir: Path) -> dict:
    """{"state": none|running|finished|failed, "files": [paths], "problems": [...], "reason", "log"} of the
    run's latest export attempt."""
    run_dir = Path(run_dir)
    job = read_json(run_dir / EXPORT_JOB)
    state = {"state": "none", "files": [], "problems": [], "reason": "", "log": ""}
    if not job:
        return state  # the common case on every UI tick: no file read beyond this one
    log = _last_attempt(run_dir / EXPORT_LOG)
    state["log"] = log[-4000:]
    if is_alive(job.get("pid"), job.get("start_ticks")):
        return {**state, "state": "running"}
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    done = [i for i, line in enumerate(lines) if line.startswith("[export] done in")]
    if done:
        files = [line for line in lines[done[-1] + 1 :] if Path(line).is_file()]
        problems = [line.split("PROBLEM:", 1)[1].strip() for line in lines if "PROBLEM:" in line]
        return {**state, "state": "finished", "files": files, "problems": problems}
    failed = [line for line in lines if line.startswith("export failed:")]
    errors = [line for line in lines if "Error" in line.split(":", 1)[0]]
    reason = (failed or errors or ["the export process ended without a result: see export.log"])[-1]
    return {**state, "state": "failed", "reason": reason[:500]}


def _last_attempt(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            end = f.seek(0, 2)
            f.seek(max(0, end - LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    start = text.rfind(MARKER)
    return text[start:] if start >= 0 else text
