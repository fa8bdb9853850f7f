"""The Training tab's API: the same operations its buttons use, for gradio_client and scripts.

api_name: /start (recipe YAML, stage, token), /preview_data (recipe YAML, stage, token: its first rows as the model
sees them), /stop and /resume (run id, token), /export (run id, GGUF types,
token, stage), /scale_out (run id, token: the run as a verl / OpenRLHF job), /status (run id), /runs, /metrics (run
id: every metrics row, what the charts draw) and /samples (run id: the latest sample group, what the samples table
shows). Starting, stopping, resuming, exporting and scaling out need the owner token when GRPO_PLAYGROUND_OWNER_TOKEN
is set; watching does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_playground.jobs.control import resume_run, start_run, stop_run
from grpo_playground.jobs.feed import RunFeed
from grpo_playground.jobs.runs import list_runs, load_run, queue_line, reconcile
from grpo_playground.run_layout import run_path
from grpo_playground.jobs.data_preview import run_preview
from grpo_playground.jobs.exports import export_state, start_export
from grpo_playground.jobs.scale_outs import scale_out_state, start_scale_out
from grpo_playground.owner import check_owner
from grpo_playground.ui.config_form import config_from_yaml_text
from grpo_playground.ui.handlers import handler


def run_summary(run_id: str) -> dict:
    """Status of one run as JSON: its status.json, job pids, metric count, last step, queue position."""
    info = reconcile(load_run(run_path(run_id)))
    feed = RunFeed(info.path)
    feed.poll()
    queue = queue_line()
    return {"run_id": info.run_id, "state": info.state, "status": info.status, "pgid": info.job.get("pid"),
            "command": info.job.get("meta", {}).get("command"), "metrics": len(feed.metrics),
            "last_metrics": feed.metrics[-1] if feed.metrics else None,
            "queue_position": queue.index(info.run_id) + 1 if info.run_id in queue else None,
            "export": {k: v for k, v in export_state(info.path).items() if k != "log"},
            "scale_out": scale_out_state(info.path)}


# Each endpoint's parameters, as gradio_client callers pass them (ui.handlers checks the texts, and gives a null its
# default); a user's mistake (bad recipe, wrong token, unknown run) comes back as a plain message.

@dataclass
class RecipeRequest:
    recipe_yaml: str  # recipe YAML text (keys = RunConfig fields)
    stage: str = "all"
    token: str = ""


@dataclass
class PreviewRequest:
    recipe_yaml: str
    stage: str = "grpo"  # sft or grpo: whose data
    token: str = ""


@dataclass
class RunRequest:
    run_id: str
    token: str = ""


@dataclass
class ExportRequest:
    run_id: str
    gguf: list[str]  # GGUF types, e.g. ["q4_k_m"]
    token: str = ""
    stage: str = ""  # sft or grpo; empty: the latest trained


@dataclass
class RunIdRequest:
    run_id: str


@handler(RecipeRequest)
def api_start(req: RecipeRequest) -> dict:
    """Start a run from recipe YAML text (keys = RunConfig fields); returns its summary at once."""
    check_owner(req.token)  # before the YAML is even read: a stranger's text costs nothing
    info = start_run(config_from_yaml_text(req.recipe_yaml), req.stage, req.token)
    return run_summary(info.run_id)


@handler(PreviewRequest)
def api_preview_data(req: PreviewRequest) -> dict:
    """The first rows of a recipe's `stage` data (sft or grpo) as its model will see them: rendered prompt, gold
    answer, SFT target; with the rows read and skipped by reason. Owner only (a source names server files)."""
    check_owner(req.token, "previewing data")  # before the YAML is read
    return run_preview(config_from_yaml_text(req.recipe_yaml), req.stage, req.token)


@handler(RunRequest)
def api_stop(req: RunRequest) -> dict:
    """Ask a run to save and stop (the whole process group is killed after the grace period)."""
    stop_run(req.run_id, req.token)
    return run_summary(req.run_id)


@handler(RunRequest)
def api_resume(req: RunRequest) -> dict:
    """Resume a stopped or failed run from its last checkpoint (the step count continues)."""
    resume_run(req.run_id, req.token)
    return run_summary(req.run_id)


@handler(ExportRequest)
def api_export(req: ExportRequest) -> dict:
    """Export a stopped or finished run to GGUF (e.g. ["q4_k_m"]) in a child process; returns at once. `stage`:
    sft or grpo (empty: the latest trained)."""
    start_export(req.run_id, req.gguf, req.token, req.stage or None)
    return run_summary(req.run_id)


@handler(RunRequest)
def api_scale_out(req: RunRequest) -> dict:
    """Write a stopped or finished run as a verl / OpenRLHF GRPO job (GRPO from its SFT adapter) in a child process;
    returns at once. Its state and the zip to download: the run's status, under "scale_out"."""
    start_scale_out(req.run_id, req.token)
    return run_summary(req.run_id)


@handler(RunIdRequest)
def api_status(req: RunIdRequest) -> dict:
    return run_summary(req.run_id)


def _feed(run_id: str) -> RunFeed:
    feed = RunFeed(load_run(run_path(run_id)).path)
    feed.poll()
    return feed


@handler(RunIdRequest)
def api_metrics(req: RunIdRequest) -> list[dict]:
    """Every metrics row of a run (SFT and GRPO steps, with each reward's mean, KL, lengths, timings)."""
    return _feed(req.run_id).metrics


@handler(RunIdRequest)
def api_samples(req: RunIdRequest) -> dict:
    """The latest GRPO sample group of a run (prompt, completions, each reward's scores, advantages); {} before any."""
    feed = _feed(req.run_id)
    return feed.samples[-1] if feed.samples else {}


def api_runs() -> list[dict]:
    return [{"run_id": i.run_id, "state": i.state, "stage": i.status.get("stage"), "step": i.status.get("step")}
            for i in list_runs()]


# (function, api_name): registered by the Training tab before its own listeners, so these keep the plain names
ENDPOINTS = ((api_start, "start"), (api_stop, "stop"), (api_resume, "resume"), (api_status, "status"),
             (api_runs, "runs"), (api_export, "export"), (api_scale_out, "scale_out"), (api_metrics, "metrics"),
             (api_samples, "samples"), (api_preview_data, "preview_data"))
