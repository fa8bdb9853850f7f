"""Evaluation panel: pick checkpoints and a data source, evaluate each in a child process, compare the results.

Each checkpoint runs `python -m pipelines.eval ... --out <runs>/evals/...json` as a child process (the UI never
imports torch); its log streams into the panel while it runs. Results are files, so they survive a closed browser,
and the table lists every saved evaluation. One evaluation runs at a time per app (it takes the CPU/GPU); starting
needs the owner token when GRPO_PLAYGROUND_OWNER_TOKEN is set.

API (gradio_client): /eval_results -> saved results (summary JSON, newest first).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import gradio as gr
import pandas as pd

from grpo_playground.data.spec import parse_spec
from grpo_playground.eval import results as store
from grpo_playground.jobs import check_owner, owner_token_required
from grpo_playground.jobs.control import ROOT

MAX_N = 2000
MAX_CHECKPOINTS = 6
MAX_EVAL_S = 3 * 3600  # a child running longer than this is stopped (a hung model server, a huge n on CPU)
POLL_S = 1.0

# The one running evaluation of this app (a machine resource, shared on purpose across sessions).
_running: dict[str, subprocess.Popen] = {}
_lock = threading.Lock()


def _frame(results: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(store.results_table(results), columns=store.TABLE_COLUMNS)


def _chart(results: list[dict], data: str | None) -> pd.DataFrame:
    rows = store.chart_rows(store.latest_per_checkpoint(results, data))
    return pd.DataFrame(rows, columns=["bar", "metric", "checkpoint", "value"])


def _log_tail(path, max_bytes: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _start(command: list[str], log_path) -> subprocess.Popen:
    with _lock:
        busy = _running.get("eval")
        if busy is not None and busy.poll() is None:
            raise RuntimeError(f"an evaluation is already running (pid {busy.pid}): wait for it or press Stop")
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        _running["eval"] = proc
        return proc


def stop_eval(token: str | None = None) -> str:
    try:
        check_owner(token)
    except PermissionError as error:
        raise gr.Error(str(error), print_exception=False) from None
    proc = _running.get("eval")
    if proc is None or proc.poll() is not None:
        return "No evaluation is running."
    os.killpg(proc.pid, signal.SIGTERM)  # its own session: the whole child tree, nothing else
    return f"Stopped the evaluation (pid {proc.pid})."


def run_evals(checkpoints, data, n, batch_size, max_new_tokens, token):
    """Evaluate each checkpoint in turn (child processes); yields (status, log, table, chart)."""
    try:
        check_owner(token)
        if not checkpoints:
            raise ValueError("pick at least one checkpoint")
        if len(checkpoints) > MAX_CHECKPOINTS:
            raise ValueError(f"{len(checkpoints)} checkpoints: compare at most {MAX_CHECKPOINTS} at once")
        models = [store.check_checkpoint(c) for c in checkpoints]
        data = str(parse_spec(data))
        n, batch_size, max_new_tokens = int(n), int(batch_size), int(max_new_tokens)
        if not 1 <= n <= MAX_N:
            raise ValueError(f"n={n}: evaluate between 1 and {MAX_N} examples here (the CLI takes more)")
    except (ValueError, PermissionError, FileNotFoundError) as error:
        raise gr.Error(str(error), print_exception=False) from None

    done: list[str] = []
    for model in models:
        out = store.result_path(model)
        log_path = out.with_suffix(".log")
        command = store.eval_command(model, data, n, batch_size, max_new_tokens, out)
        try:
            proc = _start(command, log_path)
        except RuntimeError as error:
            raise gr.Error(str(error), print_exception=False) from None
        started = time.monotonic()
        while proc.poll() is None:
            if time.monotonic() - started > MAX_EVAL_S:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            status = f"Evaluating **{store.checkpoint_label(model)}** ({len(done) + 1}/{len(models)}), {time.monotonic() - started:.0f} s"
            yield status, _log_tail(log_path), gr.skip(), gr.skip()
            time.sleep(POLL_S)
        label = store.checkpoint_label(model)
        if proc.returncode == 0 and out.is_file():
            done.append(f"{label}: done")
        else:
            done.append(f"{label}: FAILED (exit {proc.returncode}), see the log")
        results = store.load_results()
        yield "  \n".join(done), _log_tail(log_path), _frame(results), _chart(results, data)


def saved_results() -> list[dict]:
    """Every saved evaluation's summary, newest first (API /eval_results)."""
    return store.load_results()


def create_eval_panel() -> dict:
    results = store.load_results()
    choices = store.list_checkpoints()
    gr.Markdown(
        "Accuracy of each checkpoint on held-out problems: **format rate** (strict recipe format), **accuracy** "
        "(in format and correct), **lenient accuracy** (last number correct), mean completion tokens, and the share "
        "of completions that re-check their work. Greedy decoding; each evaluation runs as its own process."
    )
    with gr.Row():
        checkpoints = gr.Dropdown(choices=choices, value=[choices[0][1]] if choices else None, multiselect=True,
                                  label="Checkpoints", info="registry models and each run's sft / grpo adapters", scale=3)
        refresh = gr.Button("Refresh list", scale=0)
    with gr.Row():
        data = gr.Textbox(value="generator:test", label="Data source",
                          info="generator:test, gsm8k:PATH.jsonl, hub:openai/gsm8k, file:PATH?question=..&answer=..")
        n = gr.Slider(1, MAX_N, value=100, step=1, label="Examples (n)")
        batch_size = gr.Slider(1, 128, value=16, step=1, label="Batch size")
        max_new_tokens = gr.Slider(16, 2048, value=256, step=16, label="Max new tokens")
    token = gr.Textbox(label="Owner token", type="password", visible=owner_token_required())
    with gr.Row():
        run = gr.Button("Evaluate", variant="primary")
        stop = gr.Button("Stop")
    status = gr.Markdown()
    log = gr.Textbox(label="Log (tail)", lines=6, max_lines=12, autoscroll=True)
    chart = gr.BarPlot(_chart(results, None), x="bar", y="value", color="checkpoint", y_lim=[0, 1],
                       title="Newest result per checkpoint", x_label_angle=-30, label="Comparison")
    table = gr.Dataframe(_frame(results), label="Saved evaluations (newest first)", interactive=False)

    gr.api(saved_results, api_name="eval_results")
    ui = dict(api_visibility="private")
    refresh.click(lambda: gr.Dropdown(choices=store.list_checkpoints()), None, checkpoints, **ui)
    run.click(run_evals, [checkpoints, data, n, batch_size, max_new_tokens, token], [status, log, table, chart],
              concurrency_limit=1, concurrency_id="eval", **ui)
    stop.click(stop_eval, token, status, **ui)
    return {"checkpoints": checkpoints, "data": data, "n": n, "batch_size": batch_size,
            "max_new_tokens": max_new_tokens, "token": token, "run": run, "stop": stop, "status": status,
            "log": log, "table": table, "chart": chart}
