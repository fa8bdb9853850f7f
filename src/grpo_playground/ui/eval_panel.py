"""Evaluation panel: pick checkpoints and a data source, evaluate them in a background job, compare the results.

The job is `python -m pipelines.eval ... --out <runs>/evals/...json` per checkpoint, chained in one child process
(grpo_playground.jobs.evals; the UI never imports torch). Like a training job it outlives the browser: the panel
reads its state and log back from disk every few seconds, and the table, chart and checkpoint list follow the disk
(saved evaluations, new runs and stages) on page load and as they change, with no reload. One evaluation job runs
at a time per app (it takes the CPU/GPU); starting and stopping need the owner token when
GRPO_PLAYGROUND_OWNER_TOKEN is set.

API (gradio_client): /eval_checkpoints -> [(label, value)] the checkpoints it can evaluate; /eval_start
(checkpoint values, data, n, batch size, max new tokens, backend, token) starts the job; /eval_status -> its state
(each checkpoint done, running, pending or failed) without the log; /eval_results -> saved results (summary JSON,
newest first).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import gradio as gr
import pandas as pd

from grpo_playground.data.spec import parse_spec
from grpo_playground.jobs import eval_results as store
from grpo_playground.jobs.evals import eval_job_state, start_eval_job, stop_eval_job
from grpo_playground.owner import check_owner, owner_token_required
from grpo_playground.serving import vllm_unavailable_reason
from grpo_playground.ui import eval_chart
from grpo_playground.ui.public_paths import public_api
from grpo_playground.ui.handlers import handler

MAX_N = 2000
MAX_BATCH_SIZE, MIN_NEW_TOKENS, MAX_NEW_TOKENS = 128, 16, 2048
MAX_CHECKPOINTS = 6
POLL_S = 2.0
PERCENT_COLUMNS = ["format_rate", "accuracy", "±", "lenient_accuracy", "recheck_rate"]


def _frame(results: list[dict]) -> pd.DataFrame:
    """The saved results, rates in percent with one decimal (0.873 reads worse than 87.3)."""
    frame = pd.DataFrame(store.results_table(results), columns=store.TABLE_COLUMNS)
    for column in PERCENT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").mul(100).round(1)
    frame["seconds"] = pd.to_numeric(frame["seconds"], errors="coerce").round(0)
    frame["mean_completion_tokens"] = pd.to_numeric(frame["mean_completion_tokens"], errors="coerce").round(1)
    return frame.rename(columns={c: f"{c} %" for c in PERCENT_COLUMNS})


def job_status(state: dict) -> str:
    """The evaluation job in words: what is done, running, failed or waiting."""
    if state["state"] == "none":
        return "No evaluation has run from this app yet."
    marks = {"done": "done", "failed": "FAILED (see the log)", "running": "running...", "pending": "waiting",
             "stopped": "stopped"}
    head = {"running": "**Evaluating** (a background job: closing the browser does not stop it)",
            "finished": "**Last evaluation finished**", "stopped": "**Last evaluation was stopped**",
            "failed": "**Last evaluation failed** (its process died: see the log)"}[state["state"]]
    return head + "  \n" + "  \n".join(
        f"{item['label']}: " + (f"FAILED ({item['reason']})" if item["state"] == "failed" and item.get("reason")
                                else marks[item["state"]]) for item in state["items"])


def readable_log(text: str) -> str:
    """The job's log with each evaluation's summary line (pipelines.eval prints its result as one JSON object)
    said in words; the full numbers are in the table below and in the saved file."""
    lines = []
    for line in text.splitlines():
        try:
            summary = json.loads(line) if line.startswith("{") else None
        except ValueError:
            summary = None
        if isinstance(summary, dict) and "accuracy" in summary:
            line = (f"[eval] result: accuracy {100 * float(summary['accuracy']):.1f}%, format rate "
                    f"{100 * float(summary.get('format_rate', 0)):.1f}% on {summary.get('n')} problems "
                    f"({float(summary.get('seconds') or 0):.0f} s); saved in the table below")
        lines.append(line)
    return "\n".join(lines)


@dataclass
class RefreshRequest:
    data: str | None  # the data source box: the chart and verdict are for its results
    shown: dict | None  # what the page shows (RefreshAnswer.shown of the last refresh); None: nothing yet


@dataclass
class RefreshAnswer:
    status: str
    log: str
    table: object = field(default_factory=gr.skip)
    chart: object = field(default_factory=gr.skip)
    verdict: object = field(default_factory=gr.skip)
    checkpoints: object = field(default_factory=gr.skip)  # the picker's choices
    shown: dict | None = None


@handler(RefreshRequest)
def refresh(req: RefreshRequest) -> RefreshAnswer:
    """Status, log, table, chart, verdict and the checkpoint list from disk; each of table, chart and list is
    re-sent only when it changed (a new result, a new run or stage on disk), so a page open since before a run
    was made still lists it, and a finished evaluation redraws the chart without a reload."""
    state = eval_job_state()
    results = store.load_results()
    checkpoints = store.list_checkpoints()
    data = req.data
    answer = RefreshAnswer(job_status(state), readable_log(state["log"]),
                           shown={"results": [r["file"] for r in results], "data": data, "checkpoints": checkpoints})
    shown = req.shown or {}
    if shown.get("results") != answer.shown["results"] or shown.get("data") != data:
        latest = store.latest_per_checkpoint(results, _data_or_none(data))
        answer.table = _frame(results)
        answer.chart = gr.update(value=eval_chart.chart_plot(latest), visible=True) if latest else \
            gr.update(value=None, visible=False)
        answer.verdict = (eval_chart.verdict(latest) if latest else
                          "No saved evaluation yet: pick checkpoints and press Evaluate.")
    if shown.get("checkpoints") != checkpoints:
        answer.checkpoints = gr.update(choices=checkpoints)
    return answer


def _data_or_none(data: str | None) -> str | None:
    try:
        return str(parse_spec(data)) if data else None
    except ValueError:
        return None


def backend_choices() -> list[str]:
    """The generation backends this machine can run for adapters: vLLM (base + LoRA in one engine) on a GPU."""
    return ["transformers"] + (["vllm"] if vllm_unavailable_reason() is None else [])


@dataclass
class EvalRequest:
    """What to evaluate: the Evaluate button's inputs and /eval_start's parameters, in this order."""
    checkpoints: list[str]  # checkpoint values (from /eval_checkpoints)
    data: str = "generator:test"
    n: int = 100
    batch_size: int = 16
    max_new_tokens: int = 256
    backend: str = "transformers"
    token: str = ""


def start_evals(req: EvalRequest) -> str:
    """Start the evaluation job (returns at once; the timer shows its progress in the status); what started."""
    check_owner(req.token)
    backend, checkpoints = req.backend, req.checkpoints
    if backend not in backend_choices():
        raise ValueError(f"backend {backend!r} cannot run here: use one of {', '.join(backend_choices())}")
    if not checkpoints:
        raise ValueError("pick at least one checkpoint")
    if len(checkpoints) > MAX_CHECKPOINTS:
        raise ValueError(f"{len(checkpoints)} checkpoints: compare at most {MAX_CHECKPOINTS} at once")
    models = [store.check_checkpoint(c) for c in checkpoints]
    data = str(parse_spec(req.data))
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
           for v in (req.n, req.batch_size, req.max_new_tokens)):
        raise ValueError("n, batch size and max new tokens must be numbers")
    n, batch_size, max_new_tokens = int(req.n), int(req.batch_size), int(req.max_new_tokens)
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n={n}: evaluate between 1 and {MAX_N} examples here (the CLI takes more)")
    # the API passes values as sent (the sliders' bounds hold in the page only)
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"batch size {batch_size}: use 1 to {MAX_BATCH_SIZE}")
    if not MIN_NEW_TOKENS <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max new tokens {max_new_tokens}: use {MIN_NEW_TOKENS} to {MAX_NEW_TOKENS}")
    state = start_eval_job(models, data, n, batch_size, max_new_tokens, backend)
    return (f"Started evaluating {len(state['items'])} checkpoint(s) on {n} examples of `{data}` with "
            f"{backend}: each one's progress shows below.")


@handler(EvalRequest)
def run_evals(req: EvalRequest) -> str:
    """The Evaluate button: what started, in the message."""
    return start_evals(req)


@dataclass
class StopRequest:
    token: str | None = None


@handler(StopRequest, errors=PermissionError)
def stop_eval(req: StopRequest) -> str:
    check_owner(req.token)
    return stop_eval_job()


@handler(EvalRequest)
def api_start(req: EvalRequest) -> dict:
    """Start evaluating checkpoint values (from /eval_checkpoints); the job's state, without the log."""
    start_evals(req)
    return api_status()


def api_status() -> dict:
    """The latest evaluation job: state (none, running, finished, stopped) and each checkpoint's state."""
    return {k: v for k, v in eval_job_state().items() if k != "log"}


def saved_results() -> list[dict]:
    """Every saved evaluation's summary, newest first (API /eval_results)."""
    return store.load_results()


def create_eval_panel() -> dict:
    choices = store.list_checkpoints()
    gr.Markdown(
        "Accuracy of each checkpoint on held-out problems: **format rate** (strict recipe format), **accuracy** "
        "(in format and correct), **lenient accuracy** (last number correct), mean completion tokens, and the share "
        "of completions that re-check their work, in percent. Greedy decoding; the evaluation runs as a background "
        "job: close the browser and come back, its results are saved."
    )
    with gr.Row():
        checkpoints = gr.Dropdown(choices=choices, value=[choices[0][1]] if choices else None, multiselect=True,
                                  label="Checkpoints", info="registry models and each run's sft / grpo adapters", scale=3,
                                  elem_id="eval-checkpoints")
        refresh_btn = gr.Button("Refresh list", scale=0, elem_id="eval-refresh")
    with gr.Row():
        data = gr.Textbox(value="generator:test", label="Data source",
                          info="generator:test, gsm8k:PATH.jsonl, hub:openai/gsm8k, file:PATH?question=..&answer=..")
        n = gr.Slider(1, MAX_N, value=100, step=1, label="Examples (n)")
        batch_size = gr.Slider(1, MAX_BATCH_SIZE, value=16, step=1, label="Batch size")
        max_new_tokens = gr.Slider(MIN_NEW_TOKENS, MAX_NEW_TOKENS, value=256, step=16, label="Max new tokens")
        backend = gr.Radio(backend_choices(), value="transformers", label="Backend",
                           info="vLLM (GPU only) generates far faster but first starts its engine (about a minute)")
    token = gr.Textbox(label="Owner token", type="password", visible=owner_token_required())
    with gr.Row():
        run = gr.Button("Evaluate", variant="primary", elem_id="eval-run")
        stop = gr.Button("Stop")
    # a click answers here; the status has one writer, the timer (ticks and clicks run concurrently, so a click's
    # answer could land after a newer tick and show a finished job as running until the next tick)
    message = gr.Markdown(elem_id="eval-message")
    status = gr.Markdown(elem_id="eval-status")
    log = gr.Textbox(label="Log (tail)", lines=6, max_lines=12, autoscroll=True, elem_id="eval-log")
    verdict = gr.Markdown(elem_id="eval-verdict")
    # checkpoint names sit in the legend (colour), not under the bars, where long run names were cut off
    chart = gr.Plot(label="Comparison", show_label=False, visible=False, elem_id="eval-chart")
    table = gr.Dataframe(None, label="Saved evaluations (newest first)", interactive=False, elem_id="eval-table")
    shown = gr.State(None)
    timer = gr.Timer(POLL_S, active=False)  # ticks while the Evaluate tab is shown (ui.app.poll_the_shown_tab)

    public_api(store.list_checkpoints, api_name="eval_checkpoints")
    public_api(api_start, api_name="eval_start")
    public_api(api_status, api_name="eval_status")
    public_api(saved_results, api_name="eval_results")
    ui = dict(api_visibility="private")
    views = [status, log, table, chart, verdict, checkpoints, shown]
    # no triggers: on page load, so saved results and runs made since the app started show without pressing anything
    gr.on(None, refresh, [data, gr.State(None)], views, **ui)
    gr.on([timer.tick, data.submit], refresh, [data, shown], views, show_progress="hidden", **ui)
    refresh_btn.click(refresh, [data, gr.State(None)], views, **ui)
    run.click(run_evals, [checkpoints, data, n, batch_size, max_new_tokens, backend, token], message,
              concurrency_limit=1, concurrency_id="eval", **ui)
    stop.click(stop_eval, token, message, **ui)
    return {"timer": timer, "checkpoints": checkpoints, "data": data, "n": n, "batch_size": batch_size,
            "max_new_tokens": max_new_tokens, "backend": backend, "token": token, "run": run, "stop": stop,
            "message": message, "status": status, "log": log, "table": table, "chart": chart, "verdict": verdict}
