"""Export a run to GGUF from the UI: the export CLI as a one-step background job (grpo_playground.jobs.record).

Its state is read back from disk like a training job's: its job record, <run>/export_job.json, says whether it
still runs, and the export's own export.json (in <run>/export/<stage>/, written by export_run) says how it ended:
finished with its files and failed checks, or failed with the error. Its output goes to <run>/export.log (appended, one
"[ui] export" marker per attempt), shown while it runs. It does not take the training slot: merge, conversion and
quantization run on the CPU.
"""

from __future__ import annotations

import time
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.cli.args import ExportArgs
from grpo_playground.contracts.process import log_tail
from grpo_playground.jobs.control import check_owner
from grpo_playground.jobs.record import job_running, start_job, step
from grpo_playground.jobs.runs import load_run, reconcile
from grpo_playground.run_layout import (
    ACTIVE_STATES,
    EXPORT_JOB,
    EXPORT_LOG,
    EXPORT_RESULT,
    GGUF_TYPES,
    TRAINED_STAGES,
    export_dir,
    latest_stage,
    read_json,
    run_path,
    stage_done,
    write_json_atomic,
)

MARKER = "[ui] export"
LOG_TAIL_BYTES = 64_000


def start_export(run_id: str, gguf: list[str] | tuple[str, ...] = ("q4_k_m",), token: str | None = None,
                 stage: str | None = None) -> dict:
    """Owner only: export a stopped or finished run's adapter of `stage` (default: the latest, grpo else sft) to
    these GGUF types."""
    check_owner(token)
    info = reconcile(load_run(run_path(run_id)))
    if info.state in ACTIVE_STATES:
        raise RuntimeError(f"run {run_id} is {info.state}: export it once it has stopped or finished")
    if stage and (stage not in TRAINED_STAGES or not stage_done(info.path, stage)):
        raise RuntimeError(f"run {run_id} has no {stage} adapter: export one of its trained stages "
                           f"({', '.join(s for s in TRAINED_STAGES if stage_done(info.path, s)) or 'none yet'})")
    stage = stage or latest_stage(info.path)
    if stage is None:
        raise RuntimeError(f"run {run_id} has no trained adapter yet (no sft/ or grpo/ folder): train a stage first")
    unknown = [g for g in gguf if g not in GGUF_TYPES]
    if not gguf or unknown:
        raise ValueError(f"GGUF types {unknown or list(gguf)} are not valid: choose from {', '.join(GGUF_TYPES)}")
    if export_state(info.path)["state"] == "running":
        raise RuntimeError(f"run {run_id} is already being exported: wait for it to finish")
    command = ExportArgs(run=str(info.path), stage=stage, gguf=tuple(gguf)).command()
    with open(info.path / EXPORT_LOG, "ab") as log:
        log.write(f"\n{MARKER} {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(command[1:])}\n".encode())
        log.flush()
        start_job(info.path / EXPORT_JOB, "export", [step("export", command)], log, job_env(),
                  result=export_dir(info.path, stage) / EXPORT_RESULT)
    return export_state(info.path)


def export_state(run_dir: Path) -> dict:
    """{"state": none|running|finished|failed, "files": [paths], "problems": [...], "checks": {name: check},
    "stage", "reason", "log"} of the run's latest export attempt."""
    run_dir = Path(run_dir)
    job = read_json(run_dir / EXPORT_JOB)
    state = {"state": "none", "files": [], "problems": [], "checks": {}, "stage": None, "reason": "", "log": ""}
    if not job:
        return state  # the common case on every UI tick: no file read beyond this one
    state["log"] = _last_attempt(run_dir / EXPORT_LOG)[-4000:]
    if job_running(job):
        return {**state, "state": "running"}
    result = read_json(Path(job.get("result") or ""))
    if result.get("started", 0) < job.get("started", 0):  # an earlier attempt's file: this one wrote none
        result = {}
    if result.get("state") == "finished":
        files = [path for path in result.get("files", {}).values() if Path(path).is_file()]
        return {**state, "state": "finished", "files": files, "problems": list(result.get("errors", [])),
                "checks": dict(result.get("checks") or {}), "stage": result.get("stage")}
    return {**state, "state": "failed", "reason": (result.get("error") or _no_result(job, state["log"]))[:500]}


def _no_result(job: dict, log: str) -> str:
    """Why an attempt that wrote no result ended: its exit (a signal is a kill: out of memory, a crash in native
    code) and its log's last line (a traceback's error, raised before export.json was written)."""
    exit_reason = job.get("reason") or "no exit status recorded"
    lines = [line.strip() for line in log.splitlines() if line.strip() and not line.startswith(("[job]", MARKER))]
    last = f"; its log ends with: {lines[-1][:300]}" if lines else ""
    return f"the export process ended without a result ({exit_reason}){last}"  # the panel points to the log


def _last_attempt(path: Path) -> str:
    text = log_tail(path, LOG_TAIL_BYTES)
    start = text.rfind(MARKER)
    return text[start:] if start >= 0 else text
