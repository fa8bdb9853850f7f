"""Export a run to GGUF from the UI: the export CLI as a one-step background job (grpo_playground.jobs.record).

Its state is read back from disk like every job's (grpo_playground.jobs.kinds.EXPORT): its job record,
<run>/export_job.json, says whether it still runs, and the export's own export.json (in <run>/export/<stage>/,
written by export_run) says how it ended: finished with its files and failed checks, or failed with the error; an
export that wrote none failed for the reason its record holds (its exit and the CLI's error or traceback line),
never for what its log says. Its output goes to <run>/export.log (appended, one "[ui] export" marker per attempt),
shown while it runs. It does not take the training slot: merge, conversion and quantization run on the CPU.
"""

from __future__ import annotations

import time
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.contracts.process import log_tail
from grpo_playground.contracts.states import JobState
from grpo_playground.jobs.kinds import EXPORT
from grpo_playground.jobs.record import step
from grpo_playground.jobs.runs import load_run, reconcile
from grpo_playground.owner import check_owner
from grpo_playground.contracts.layout import EXPORT_LOG, EXPORT_RESULT, GGUF_TYPES
from grpo_playground.contracts.states import ACTIVE_STATES, TRAINED_STAGES
from grpo_playground.run_layout import export_dir, latest_stage, run_path, stage_done

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
    command = EXPORT.args(run=str(info.path), stage=stage, gguf=tuple(gguf)).command()
    with open(info.path / EXPORT_LOG, "ab") as log:
        log.write(f"\n{MARKER} {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(command[1:])}\n".encode())
        log.flush()
        EXPORT.start(info.path, [step("export", command)], log, job_env(),
                     result=export_dir(info.path, stage) / EXPORT_RESULT)
    return export_state(info.path)


def export_state(run_dir: Path) -> dict:
    """{"state": none|running|finished|failed, "files": [paths], "problems": [...], "checks": {name: check},
    "stage", "reason", "log"} of the run's latest export attempt (kinds.EXPORT: its record, then its export.json)."""
    run_dir = Path(run_dir)
    job = EXPORT.status(run_dir)
    state = {"state": "none", "files": [], "problems": [], "checks": {}, "stage": None, "reason": "", "log": ""}
    if job.state == "none":
        return state  # the common case on every UI tick: no file read beyond this one
    state["log"] = _last_attempt(run_dir / EXPORT_LOG)[-4000:]
    if job.running:
        return {**state, "state": "running"}
    if job.state != JobState.FINISHED:
        return {**state, "state": "failed", "reason": job.reason}
    result = job.result
    return {**state, "state": "finished", "files": [path for path in result.get("files", {}).values()
                                                     if Path(path).is_file()],
            "problems": list(result.get("errors", [])), "checks": dict(result.get("checks") or {}),
            "stage": result.get("stage")}


def _last_attempt(path: Path) -> str:
    text = log_tail(path, LOG_TAIL_BYTES)
    start = text.rfind(MARKER)
    return text[start:] if start >= 0 else text
