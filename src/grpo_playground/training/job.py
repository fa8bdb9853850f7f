"""One training job inside its own process: the stages in order, the status file, stop, resume and crashes.

    run_job(cfg, run_dir, stage="all", resume=False) -> final state ("finished" | "stopped" | "failed")

stage: all (SFT then GRPO, each when enabled), sft, grpo (from the run's SFT adapter when it has one), or
preflight (only the pre-flight report). A crash never escapes as a bare traceback: the traceback goes to the
log, status.json gets state "failed" and a one-line reason, and the doctor turns OOM and NaN into a diagnosis.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

from grpo_playground.config import RunConfig, config_to_dict, save_recipe
from grpo_playground.contracts.layout import DOCTOR_FILE, METRICS_FILE, RECIPE_FILE, SWANLAB_DIR
from grpo_playground.contracts.states import JOB_STAGES, TRAINED_STAGES
from grpo_playground.doctor import diagnose_crash
from grpo_playground.training.budget import keep_budget
from grpo_playground.training.run_folder import RunFolder
# status.json key set while a run waits after a pre-flight ERROR (grpo.on_preflight_error: pause): resuming such
# a run is the user's answer "run GRPO anyway", so the next start skips the pre-flight and the pause.
PAUSED_KEY = "paused_at_preflight"


def _prepare_process(cfg: RunConfig) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", str(cfg.hardware.cpu_threads))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # progress bars flood log.txt
    from grpo_playground.training.backend import choose_backend

    if choose_backend(cfg) == "unsloth":
        import unsloth  # noqa: F401  -- must come before trl/transformers so its patches apply

    import torch

    torch.set_num_threads(cfg.hardware.cpu_threads)


def _stages_to_run(cfg: RunConfig, stage: str) -> list[str]:
    if stage == "all":
        return [s for s in TRAINED_STAGES if getattr(cfg, s).enabled]
    return [stage]


def run_job(cfg: RunConfig, run_dir: str | Path, stage: str = "all", resume: bool = False,
            recipe_saved: bool = False) -> str:
    """recipe_saved: `cfg` is the run folder's own recipe.yaml (the app wrote it): it is not written again."""
    if stage not in JOB_STAGES:
        raise ValueError(f"stage {stage!r} is unknown: use one of {', '.join(JOB_STAGES)}")
    folder = RunFolder(run_dir)
    if folder.writer and not recipe_saved and (not (folder.path / RECIPE_FILE).is_file() or not resume):  # DDP: one writer
        save_recipe(cfg, folder.path / RECIPE_FILE)
    folder.watch_sigterm()
    previous = folder.read_status()
    folder.status(state="running", pid=os.getpid(), stage=stage, reason="",
                  started=previous.get("started") if resume and previous.get("started") else time.time())
    folder.log(f"run {folder.path.name}: stage {stage}{' (resume)' if resume else ''}, pid {os.getpid()}")
    current = stage
    try:
        _prepare_process(cfg)
        cfg = keep_budget(cfg, _stages_to_run(cfg, stage), folder.log)  # refused here, before any weight loads
        from grpo_playground.training.tracking import Tracker

        tracker = Tracker(cfg.tracking.project, folder.path.name, cfg.tracking.swanlab, folder.path / SWANLAB_DIR,
                          config_to_dict(cfg), folder.log)
        try:
            history = folder.read_jsonl(METRICS_FILE) if resume else []
            for current in _stages_to_run(cfg, stage):
                outcome = _run_stage(cfg, folder, current, tracker, history, resume)
                if outcome == "paused":  # pre-flight or doctor: the reason, saying what to do, is in status.json
                    folder.status(state="stopped", stage=current)
                    return "stopped"
                if outcome == "stopped":
                    folder.status(state="stopped", stage=current, reason="stopped on request; resume to continue")
                    folder.log(f"stopped during {current}: checkpoint saved, resume with --resume")
                    return "stopped"
        finally:
            tracker.finish()
    except BaseException as exc:  # includes KeyboardInterrupt: the status must never stay "running"
        traceback.print_exc()
        step = folder.read_status().get("step", 0) or 0
        finding = diagnose_crash(f"{type(exc).__name__}: {exc}", step, current,
                                 frames="".join(traceback.format_tb(exc.__traceback__)[-3:]))
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        if finding:
            folder.append(DOCTOR_FILE, finding.to_dict())
            reason = f"{finding.message}. Try: {finding.knob} ({reason})"[:500]
        folder.status(state="failed", stage=current, reason=reason)
        folder.log(f"failed: {reason}")
        return "failed"
    folder.status(state="finished", stage=stage, reason="", eta_s=0)
    folder.log("finished")
    return "finished"


def _run_stage(cfg: RunConfig, folder: RunFolder, stage: str, tracker, history: list[dict], resume: bool) -> str:
    from grpo_playground.training.backend import load_policy
    from grpo_playground.training.preflight import run_preflight
    from grpo_playground.training.stages import run_grpo, run_sft

    if resume and folder.stage_done(stage):
        folder.log(f"{stage}: already finished in this run, skipped")
        return "done"
    folder.status(stage=stage, step=0 if not resume else folder.read_status().get("step", 0))
    if stage == "sft":
        policy = load_policy(cfg, "sft")
        _log_notes(folder, policy)
        result = run_sft(cfg, folder, policy, tracker, history, resume and folder.last_checkpoint("sft") is not None)
    else:
        policy = load_policy(cfg, "grpo", folder.adapter("sft") if folder.stage_done("sft") else None)
        _log_notes(folder, policy)
        if policy.start_adapter is None:
            folder.log("grpo: no SFT adapter, starting from the base model")
        if resume and folder.read_status().get(PAUSED_KEY):
            folder.status(**{PAUSED_KEY: False})
            folder.log("grpo: resumed after the pre-flight ERROR: running GRPO anyway")
        elif not (resume and folder.last_checkpoint("grpo")):
            report = run_preflight(cfg, policy, folder, sft_done=policy.start_adapter is not None)
            if stage != "preflight" and report["level"] == "error" and cfg.grpo.on_preflight_error == "pause":
                reason = (f"Paused before GRPO: the pre-flight says ERROR: {report['why']}. What to do: "
                          f"{report['what_to_do']}. Or press Resume (CLI: --resume) to run GRPO anyway.")
                folder.status(reason=reason, **{PAUSED_KEY: True})
                folder.log(reason)
                _free(policy)
                return "paused"
        if stage == "preflight":
            return "done"
        result = run_grpo(cfg, folder, policy, tracker, history, resume and folder.last_checkpoint("grpo") is not None)
    seconds = dict(folder.read_status().get("stage_seconds") or {})
    seconds[stage] = seconds.get(stage, 0.0) + result.seconds  # a resumed stage adds its new time
    folder.status(stage_seconds=seconds)
    folder.log(f"{stage}: {result.steps} steps in {result.seconds:.0f} s"
               + (f" (time budget of {getattr(cfg, stage).max_minutes} min reached)" if result.stopped_by == "time" else ""))
    _free(policy)
    return {"stop": "stopped", "doctor": "paused"}.get(result.stopped_by, "done")


def _log_notes(folder: RunFolder, policy) -> None:
    folder.log(f"backend {policy.backend} on {policy.device}")
    for note in policy.notes:
        folder.log(note)


def _free(policy) -> None:
    import gc

    import torch

    del policy.model
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
