"""UI side of evaluation: which checkpoints exist, the eval command, and the saved results (torch-free).

Each evaluation runs as `grpo-playground eval ... --out <runs>/evals/<stamp>-<name>.json` (a job: jobs/evals.py);
the folder on disk is the record, so results survive a closed browser or an app restart and the panel can compare
any of them.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from grpo_playground.cli.args import EvalArgs
from grpo_playground.contracts.layout import ADAPTER_CONFIG, EVALS_DIR
from grpo_playground.contracts.process import read_json
from grpo_playground.contracts.states import TRAINED_STAGES
from grpo_playground.run_layout import adapter_dir, evals_dir, runs_dir

CHART_METRICS = ("accuracy", "lenient_accuracy", "format_rate", "recheck_rate")
TABLE_COLUMNS = ["checkpoint", "data", "n", "format_rate", "accuracy", "±", "lenient_accuracy", "mean_completion_tokens",
                 "recheck_rate", "seconds", "file"]
MAX_RESULTS = 100


def list_checkpoints() -> list[tuple[str, str]]:
    """(label, value) pairs: registry models that can load here, then each run's saved stage adapters, newest run
    first. Where the hub cannot be reached, a hub model is listed only when it is in the local cache (the others
    fail on load)."""
    from grpo_playground.models import MODELS
    from grpo_playground.models.registry import hub_unusable

    choices = [(name, name) for name, spec in MODELS.items() if not hub_unusable(spec)]
    runs = sorted((p for p in runs_dir().iterdir() if p.is_dir() and p.name != EVALS_DIR), reverse=True)
    for run in runs:
        for stage in TRAINED_STAGES:
            if _is_checkpoint(adapter_dir(run, stage)):
                choices.append((f"{run.name}/{stage}",) * 2)  # run-relative: the page names no server path
    return choices


def _is_checkpoint(path: Path) -> bool:
    return (path / ADAPTER_CONFIG).is_file() or (path / "config.json").is_file()


def check_checkpoint(value: str) -> str:
    """A checkpoint value from the browser (`<run id>/<stage>`, or an absolute path), accepted only when it is a
    registry name this machine can load (a hub model with no internet failed in the job, "FAILED (see the log)") or a
    model folder inside the runs directory (a visitor must not make the server load arbitrary paths); returns what the
    eval CLI loads."""
    from grpo_playground.models import MODELS
    from grpo_playground.models.registry import unavailable_reason

    if value in MODELS:
        reason = unavailable_reason(value)
        if reason:
            raise ValueError(reason)
        return value
    path = (runs_dir() / value).resolve()  # an absolute value stays itself
    if not path.is_relative_to(runs_dir()) or not _is_checkpoint(path):
        raise ValueError(f"checkpoint {value!r} is neither a registry model ({', '.join(MODELS)}) nor a saved stage of a run: refresh the list and pick one")
    return str(path)


def checkpoint_label(model: str) -> str:
    path = Path(model)
    return f"{path.parent.name}/{path.name}" if path.is_absolute() else model


def eval_command(models: list[str], data: str, n: int, batch_size: int, max_new_tokens: int, outs: list[Path],
                 backend: str = "transformers") -> list[str]:
    """One `pipelines.eval` process for `models` in turn, each written to its `outs` file."""
    return EvalArgs(tuple(models), data, n, batch_size, max_new_tokens, backend=backend,
                    out=tuple(Path(o) for o in outs)).command()


def result_path(model: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", checkpoint_label(model)).strip("-")[:60] or "model"
    return evals_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}.json"


# path -> ((inode, mtime_ns, size), summary or None): every open page's timer asks for the results every few
# seconds, and a file holds every completion of its evaluation (megabytes for a GSM8K test set): each is parsed once
# per change
_summaries: dict[Path, tuple[tuple[int, int, int], dict | None]] = {}


def load_results(limit: int = MAX_RESULTS) -> list[dict]:
    """Saved results, newest first, each with its file name; unreadable files are left out."""
    results, seen = [], set()
    for path in sorted(evals_dir().glob("*.json"), reverse=True)[:limit]:
        try:
            stat = path.stat()
        except OSError:
            continue  # deleted meanwhile
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # the inode: a file replaced by a rename
        seen.add(path)
        cached = _summaries.get(path)
        if cached is None or cached[0] != key:
            result = read_json(path)
            result.pop("completions", None)  # the table needs the summary only
            cached = _summaries[path] = (key, result if "accuracy" in result else None)
        if cached[1] is not None:
            results.append({**cached[1], "file": path.name})
    for gone in _summaries.keys() - seen:
        _summaries.pop(gone, None)
    return results


def results_table(results: list[dict]) -> list[list]:
    return [
        [checkpoint_label(r["model"]), r["data"], r["n"], r["format_rate"], r["accuracy"], r.get("accuracy_se"),
         r["lenient_accuracy"], r["mean_completion_tokens"], r["recheck_rate"], r.get("seconds"), r["file"]]
        for r in results
    ]


def latest_per_checkpoint(results: list[dict], data: str | None = None) -> list[dict]:
    """The newest result of each checkpoint (on `data` when given): what the comparison chart shows."""
    latest: dict[str, dict] = {}
    for r in results:  # newest first
        if data is None or r["data"] == data:
            latest.setdefault(r["model"], r)
    return list(latest.values())
