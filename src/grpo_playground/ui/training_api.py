"""The Training tab's API: the same operations its buttons use, for gradio_client and scripts.

api_name: /start (recipe YAML, stage, token), /preview_data (recipe YAML, stage, token: its first rows as the model
sees them), /stop and /resume (run id, token), /export (run id, GGUF types,
token, stage), /scale_out (run id, token: the run as a verl / OpenRLHF job), /status (run id), /runs, /metrics (run
id: every metrics row, what the charts draw) and /samples (run id: the latest sample group, what the samples table
shows). Starting, stopping, resuming, exporting and scaling out need the owner token when GRPO_PLAYGROUND_OWNER_TOKEN
is set; watching does not.
"""

from __future__ import annotations

import functools
import inspect

from grpo_playground import jobs
from grpo_playground.jobs.data_preview import run_preview
from grpo_playground.jobs.exports import export_state, start_export
from grpo_playground.jobs.scale_outs import scale_out_state, start_scale_out
from grpo_playground.owner import check_owner
from grpo_playground.ui.config_form import config_from_yaml_text
from grpo_playground.ui.user_errors import as_user_error, user_error

# what a script may send for each annotated parameter (the API passes values as sent: a null reached int(None))
KINDS = {"str": (lambda v: isinstance(v, str), "text"),
         "list[str]": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of texts")}


def _api(fn):
    """An API endpoint: a user's mistake (bad recipe, wrong token, unknown run, a value of the wrong kind) comes
    back as a plain message."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)  # gradio reads the wrapped signature for the API's parameters
    def endpoint(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            parameter = signature.parameters[name]
            if value is None and parameter.default is not inspect.Parameter.empty:
                bound.arguments[name] = parameter.default  # a null for an optional value: its default
                continue
            accepts, kind = KINDS.get(parameter.annotation, (None, None))
            if accepts and not accepts(value):
                raise user_error(ValueError(f"{name} must be {kind}, not {type(value).__name__}"))
        with as_user_error():
            return fn(*bound.args, **bound.kwargs)
    return endpoint


def run_summary(run_id: str) -> dict:
    """Status of one run as JSON: its status.json, job pids, metric count, last step, queue position."""
    info = jobs.reconcile(jobs.load_run(jobs.run_path(run_id)))
    feed = jobs.RunFeed(info.path)
    feed.poll()
    queue = jobs.queue_line()
    return {"run_id": info.run_id, "state": info.state, "status": info.status, "pgid": info.job.get("pid"),
            "command": info.job.get("meta", {}).get("command"), "metrics": len(feed.metrics),
            "last_metrics": feed.metrics[-1] if feed.metrics else None,
            "queue_position": queue.index(info.run_id) + 1 if info.run_id in queue else None,
            "export": {k: v for k, v in export_state(info.path).items() if k != "log"},
            "scale_out": scale_out_state(info.path)}


@_api
def api_start(recipe_yaml: str, stage: str = "all", token: str = "") -> dict:
    """Start a run from recipe YAML text (keys = RunConfig fields); returns its summary at once."""
    check_owner(token)  # before the YAML is even read: a stranger's text costs nothing
    info = jobs.start_run(config_from_yaml_text(recipe_yaml), stage, token)
    return run_summary(info.run_id)


@_api
def api_preview_data(recipe_yaml: str, stage: str = "grpo", token: str = "") -> dict:
    """The first rows of a recipe's `stage` data (sft or grpo) as its model will see them: rendered prompt, gold
    answer, SFT target; with the rows read and skipped by reason. Owner only (a source names server files)."""
    check_owner(token, "previewing data")  # before the YAML is read
    return run_preview(config_from_yaml_text(recipe_yaml), stage, token)


@_api
def api_stop(run_id: str, token: str = "") -> dict:
    """Ask a run to save and stop (the whole process group is killed after the grace period)."""
    jobs.stop_run(run_id, token)
    return run_summary(run_id)


@_api
def api_resume(run_id: str, token: str = "") -> dict:
    """Resume a stopped or failed run from its last checkpoint (the step count continues)."""
    jobs.resume_run(run_id, token)
    return run_summary(run_id)


@_api
def api_export(run_id: str, gguf: list[str], token: str = "", stage: str = "") -> dict:
    """Export a stopped or finished run to GGUF (e.g. ["q4_k_m"]) in a child process; returns at once. `stage`:
    sft or grpo (empty: the latest trained)."""
    start_export(run_id, gguf, token, stage or None)
    return run_summary(run_id)


@_api
def api_scale_out(run_id: str, token: str = "") -> dict:
    """Write a stopped or finished run as a verl / OpenRLHF GRPO job (GRPO from its SFT adapter) in a child process;
    returns at once. Its state and the zip to download: the run's status, under "scale_out"."""
    start_scale_out(run_id, token)
    return run_summary(run_id)


@_api
def api_status(run_id: str) -> dict:
    return run_summary(run_id)


@_api
def api_metrics(run_id: str) -> list[dict]:
    """Every metrics row of a run (SFT and GRPO steps, with each reward's mean, KL, lengths, timings)."""
    feed = jobs.RunFeed(jobs.load_run(jobs.run_path(run_id)).path)
    feed.poll()
    return feed.metrics


@_api
def api_samples(run_id: str) -> dict:
    """The latest GRPO sample group of a run (prompt, completions, each reward's scores, advantages); {} before any."""
    feed = jobs.RunFeed(jobs.load_run(jobs.run_path(run_id)).path)
    feed.poll()
    return feed.samples[-1] if feed.samples else {}


def api_runs() -> list[dict]:
    return [{"run_id": i.run_id, "state": i.state, "stage": i.status.get("stage"), "step": i.status.get("step")}
            for i in jobs.list_runs()]


# (function, api_name): registered by the Training tab before its own listeners, so these keep the plain names
ENDPOINTS = ((api_start, "start"), (api_stop, "stop"), (api_resume, "resume"), (api_status, "status"),
             (api_runs, "runs"), (api_export, "export"), (api_scale_out, "scale_out"), (api_metrics, "metrics"),
             (api_samples, "samples"), (api_preview_data, "preview_data"))
