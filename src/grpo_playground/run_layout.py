"""The run folder's paths and status: where runs live, a run's stage and export folders, status.json read and
written atomically.

A run folder (runs/<run_id>/, docs/ARCHITECTURE.md "Run folder") is the contract between the app (UI, jobs), the
training job, eval, export and chat: the job writes it, the others read it. Its file and folder names are
grpo_playground.contracts.layout's and its stages contracts.states' (import them from there), so a file is renamed
in one line (tests/test_run_layout.py greps that no other module types one).
Torch-free and light: the UI imports it.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from grpo_playground.contracts.layout import (ADAPTER_CONFIG, CHECKPOINTS_DIR, COMPARISONS_DIR, EVALS_DIR, EXPORT_DIR,
                                             RECIPE_FILE, STATUS_FILE)
from grpo_playground.contracts.process import read_json, write_json_atomic
from grpo_playground.contracts.states import TRAINED_STAGES

RUNS_DIR_ENV = "GRPO_PLAYGROUND_RUNS_DIR"
EXPORTS_DIR_ENV = "GRPO_PLAYGROUND_EXPORTS_DIR"

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
APP_FOLDERS = (EVALS_DIR, COMPARISONS_DIR)  # the app's own folders in the runs dir: never a run


# --- where runs live --------------------------------------------------------------------------------------------
def runs_dir() -> Path:
    """The runs directory (env GRPO_PLAYGROUND_RUNS_DIR, default ./runs), created on first use."""
    path = Path(os.environ.get(RUNS_DIR_ENV) or "runs").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def exports_dir() -> Path:
    """Where plain-model exports go (env GRPO_PLAYGROUND_EXPORTS_DIR, default ./exports)."""
    return Path(os.environ.get(EXPORTS_DIR_ENV) or "exports").resolve()


def evals_dir() -> Path:
    path = runs_dir() / EVALS_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def comparisons_dir() -> Path:
    path = runs_dir() / COMPARISONS_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_path(run_id: str) -> Path:
    """The folder of an existing run; the id is checked so that a user cannot point outside the runs dir."""
    if not is_run_name(run_id):
        raise ValueError(f"run id {run_id!r} is not valid: pick one from the run list (letters, digits, . _ -)")
    path = runs_dir() / run_id
    if not path.is_dir():
        raise FileNotFoundError(f"no run {run_id!r} in the runs folder: pick one from the run list")
    return path


def is_run_name(name) -> bool:
    """A run id may name a run folder: checked characters, and none of the app's own folders (a resume of
    `evals` launched a training job there, which was then listed as a run)."""
    return isinstance(name, str) and bool(RUN_ID_RE.match(name)) and name not in APP_FOLDERS


def new_run_id(name: str = "run") -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:40] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


# --- paths inside a run -----------------------------------------------------------------------------------------
def adapter_dir(run_dir: str | Path, stage: str) -> Path:
    return Path(run_dir) / stage


def checkpoints_dir(run_dir: str | Path, stage: str) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / stage


def export_dir(run_dir: str | Path, stage: str) -> Path:
    return Path(run_dir) / EXPORT_DIR / stage


def stage_done(run_dir: str | Path, stage: str) -> bool:
    """The stage finished: its LoRA folder holds an adapter."""
    return (adapter_dir(run_dir, stage) / ADAPTER_CONFIG).is_file()


def latest_stage(run_dir: str | Path) -> str | None:
    """The last trained stage whose adapter exists (grpo, else sft), None before any finished."""
    return next((s for s in reversed(TRAINED_STAGES) if stage_done(run_dir, s)), None)


def saved_progress(run_dir: str | Path) -> bool:
    """Something a resume starts from: a finished stage's adapter or a stage's checkpoint. A run that failed
    without one (on load, say) would only fail the same way again: it is started anew, with a fixed recipe."""
    folder = Path(run_dir)
    return latest_stage(folder) is not None or any((folder / CHECKPOINTS_DIR).glob("*/checkpoint-*"))


# --- status -----------------------------------------------------------------------------------------------------
def read_status(run_dir: Path) -> dict:
    return read_json(Path(run_dir) / STATUS_FILE)


def write_status(run_dir: Path, **updates) -> dict:
    """Merge `updates` into status.json (atomically), stamping `updated`; returns the new status."""
    status = read_status(run_dir)
    status.update(updates)
    status["updated"] = time.time()
    write_json_atomic(Path(run_dir) / STATUS_FILE, status)
    return status


def recipe_of(model: str | Path) -> Path | None:
    """The recipe of the run a folder belongs to: the run folder itself or one of its stage folders; None for
    anything else (a registry name, a plain model folder, a file)."""
    path = Path(model)
    if not path.is_dir():
        return None
    return next((p / RECIPE_FILE for p in (path, path.parent) if (p / RECIPE_FILE).is_file()), None)


def run_of(checkpoint: str | Path) -> Path | None:
    """The run folder a checkpoint comes from: the run itself, one of its stage folders, or a file of one of its
    exports (export/<stage>/NAME.gguf, what chat serves); None for anything else."""
    path = Path(checkpoint)
    if path.is_file() and path.parent.parent.name == EXPORT_DIR:
        path = path.parent.parent.parent
    recipe = recipe_of(path)
    return recipe.parent if recipe else None
