"""The Training tab's live-run screen: the picked run's progress, charts, doctor, pre-flight, samples, log and
export, refreshed by a 2 s timer that reads only what the job appended to the run folder.

`poll` is one timer tick as a `Tick` of named values; `tick_updates` turns it into the {component: value}
Gradio expects, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from grpo_playground import jobs
from grpo_playground.contracts.layout import GGUF_TYPES
from grpo_playground.jobs.exports import export_state
from grpo_playground.run_layout import LOG_FILE, PREFLIGHT_FILE, read_json
from grpo_playground.ui import run_views
from grpo_playground.ui.training_api import api_export, api_resume, api_stop
from grpo_playground.ui.training_charts import build_charts, chart_update, chart_updates
from grpo_playground.ui.training_history import HistoryPart, compare_metrics
from grpo_playground.ui.training_samples import SamplesPart, build_samples

POLL_S = 2.0
LIVE_SCREEN = "live"  # the Training tab's id for this screen: Start and the history open it
UNREAD = "unread"  # a view that has shown nothing yet: even "no file" differs from it


@dataclass
class RunViewPart:
    view: gr.State  # per-user: which run is watched, its incremental reader, what was last shown
    message_for: gr.State  # [run id, state] the run message was written for (poll clears it when stale)
    run_pick: gr.Dropdown
    stop: gr.Button
    resume: gr.Button
    message: gr.Markdown
    progress: gr.Markdown
    queue: gr.Markdown
    charts: list[gr.Plot]  # one per run_views.CHARTS
    preflight_verdict: gr.Markdown
    findings: gr.Dataframe
    samples: SamplesPart
    preflight: gr.JSON
    log: gr.Code
    gguf_types: gr.Dropdown
    export: gr.Button
    export_status: gr.Markdown


def build_run_view() -> RunViewPart:
    """The key items (picker, Stop, progress, first charts, pre-flight verdict, doctor) fit one 1280x800 screen;
    the sample group, full reports, log and export follow below them."""
    with gr.Row():
        run_pick = gr.Dropdown([], label="Run", scale=3, elem_id="training-run")
        stop = gr.Button("Stop (saves, then exits)", variant="stop", scale=1)
        resume = gr.Button("Resume", scale=1)
    message = gr.Markdown(elem_id="training-run-msg")
    progress = gr.Markdown(elem_id="training-progress")
    queue = gr.Markdown(elem_id="training-queue")
    with gr.Row():
        with gr.Column(scale=3, min_width=480):
            charts = build_charts()
        with gr.Column(scale=2, min_width=320):
            preflight_verdict = gr.Markdown(elem_id="training-preflight")
            findings = gr.Dataframe(run_views.findings_table([]), wrap=True, interactive=False, max_height=320,
                                    label="Doctor: what the metrics say, and the knob to turn (empty: no collapse seen)",
                                    elem_id="training-findings")
    samples = build_samples()
    with gr.Accordion("Pre-flight report in full: tag tokens, rendered prompt, sampled groups", open=False):
        preflight = gr.JSON(label=PREFLIGHT_FILE)
    with gr.Accordion("Log (tail)", open=False):
        log = gr.Code(label=LOG_FILE, language=None, lines=20)
    with gr.Row():
        gguf_types = gr.Dropdown(list(GGUF_TYPES), value=["q4_k_m"], multiselect=True, label="GGUF types",
                                 info="f16 is always written; q4_k_m is the seed's choice for llama.cpp / Ollama",
                                 scale=3)
        export = gr.Button("Export GGUF", scale=1, elem_id="training-export-button")
    export_status = gr.Markdown(elem_id="training-export")
    return RunViewPart(gr.State(None), gr.State(None), run_pick, stop, resume, message, progress, queue, charts,
                       preflight_verdict, findings, samples, preflight, log, gguf_types, export, export_status)


# --- one timer tick ---------------------------------------------------------------------------------------

def _skips(n: int) -> list:
    return [gr.skip() for _ in range(n)]


@dataclass
class Tick:
    """What one tick sends: a value per shown component, gr.skip() where nothing changed."""
    view: dict
    run_pick: dict = field(default_factory=gr.skip)
    progress: object = field(default_factory=gr.skip)
    queue: object = field(default_factory=gr.skip)
    charts: list = field(default_factory=lambda: _skips(len(run_views.CHARTS)))
    caption: object = field(default_factory=gr.skip)
    samples: object = field(default_factory=gr.skip)
    findings: object = field(default_factory=gr.skip)
    preflight_verdict: object = field(default_factory=gr.skip)
    preflight: object = field(default_factory=gr.skip)
    log: object = field(default_factory=gr.skip)
    history: object = field(default_factory=gr.skip)
    compare: object = field(default_factory=gr.skip)
    export_status: object = field(default_factory=gr.skip)
    message: object = field(default_factory=gr.skip)


def tick_updates(tick: Tick, run: RunViewPart, history: HistoryPart) -> dict:
    """The one place a Tick meets the components."""
    return {run.view: tick.view, run.run_pick: tick.run_pick, run.progress: tick.progress, run.queue: tick.queue,
            **dict(zip(run.charts, tick.charts, strict=True)), run.samples.caption: tick.caption,
            run.samples.table: tick.samples, run.findings: tick.findings,
            run.preflight_verdict: tick.preflight_verdict, run.preflight: tick.preflight, run.log: tick.log,
            history.table: tick.history, history.compare_plot: tick.compare, run.export_status: tick.export_status,
            run.message: tick.message}


def _new_view(run_id: str | None) -> dict:
    return {"run_id": run_id, "feed": jobs.RunFeed(jobs.run_path(run_id)) if run_id else None,
            "log": None, "history": None, "status": None, "preflight_mtime": UNREAD, "export": None,
            "later_stages": None}


def pick_default(infos: list[jobs.RunInfo]) -> str | None:
    """The newest active run, else the newest run."""
    pool = [i for i in infos if i.state in jobs.ACTIVE_STATES] or infos
    return pool[0].run_id if pool else None


def poll(run_id: str | None, view: dict | None, compare_id: str | None, compare_key: str | None,
         message_for: list | None = None) -> Tick:
    """One timer tick: refresh what changed, gr.skip() the rest (a tick must stay cheap on 2 cores).

    message_for is [run id, state] of the last button message: once that run's state moves on, the message
    is stale and is cleared (the progress line says the current state)."""
    infos = jobs.list_runs()
    ids = [i.run_id for i in infos]
    picked = run_id in ids
    if not picked:
        run_id = pick_default(infos)
    if view is None or view["run_id"] != run_id:
        view = _new_view(run_id)
    history_sig = [(i.run_id, i.state, i.status.get("step")) for i in infos]
    history_changed = history_sig != view["history"]
    ids_changed = view["history"] is None or ids != [h[0] for h in view["history"]]
    view["history"] = history_sig
    tick = Tick(view)
    # The value is sent only when the pick was empty or gone: a tick computed from the old pick must never
    # overwrite a run the user (or Start) has just chosen; new runs only extend the choices.
    if not picked:
        tick.run_pick = gr.update(choices=ids, value=run_id)
    elif ids_changed:
        tick.run_pick = gr.update(choices=ids)
    if history_changed:
        tick.history = run_views.history_table(infos)
    queue = [i.run_id for i in jobs.queue_order(infos)]
    tick.queue = ("Queue (one training job at a time): " + ", ".join(queue)) if queue else "Queue: empty"
    if run_id is None:
        tick.progress = "No runs yet: pick a recipe in **1. Set up a run** and press Start."
        tick.charts = [chart_update(None, chart) for chart in run_views.CHARTS]
        return tick
    feed = view["feed"]
    changed = feed.poll() or view["status"] is None
    info = next(i for i in infos if i.run_id == run_id)
    status_changed = info.status != view["status"]
    view["status"] = info.status
    if not view["later_stages"]:  # [] until the job has written its recipe
        view["later_stages"] = run_views.later_stage_budgets(info)
    if changed or status_changed:
        tick.progress = run_views.progress_markdown(info, feed.metrics, view["later_stages"])
    if changed:
        sample = feed.samples[-1] if feed.samples else None
        tick.charts = chart_updates(feed.metrics)
        tick.caption = run_views.sample_caption(sample)
        tick.samples = run_views.sample_table(sample)
        tick.findings = run_views.findings_table(run_views.doctor_findings(feed.findings, feed.metrics))
        tick.compare = compare_metrics(run_id, feed.metrics, compare_id, compare_key)
    _read_preflight(tick, info.path)
    log = jobs.read_log_tail(info.path)
    if log != view["log"]:
        tick.log = view["log"] = log
    exported = export_state(info.path)
    if exported != view["export"]:
        tick.export_status = run_views.export_markdown(exported)
        view["export"] = exported
    if message_for and (message_for[0] != run_id or message_for[1] != info.state):
        tick.message = ""  # stale: that run's state has moved on
    return tick


def _read_preflight(tick: Tick, run_dir: Path) -> None:
    """The verdict in words and the full report, read again only when preflight.json changes."""
    path = run_dir / PREFLIGHT_FILE
    mtime = path.stat().st_mtime if path.exists() else None
    if mtime == tick.view["preflight_mtime"]:
        return
    tick.view["preflight_mtime"] = mtime
    report = read_json(path) if mtime else None
    tick.preflight_verdict, tick.preflight = run_views.preflight_markdown(report), report


# --- listeners --------------------------------------------------------------------------------------------

def started_updates(run: RunViewPart, screens: gr.Tabs, info: jobs.RunInfo) -> dict:
    """After Start: the picker follows the new run, its message is shown, and the live screen opens."""
    return {run.run_pick: gr.Dropdown(choices=[i.run_id for i in jobs.list_runs()], value=info.run_id),
            run.message: f"Started **{info.run_id}** ({info.state}): `{jobs.shell_command(info.job['command'])}`",
            run.message_for: [info.run_id, info.state], screens: gr.Tabs(selected=LIVE_SCREEN)}


def wire_run_view(run: RunViewPart, history: HistoryPart, timer: gr.Timer, token: gr.Textbox) -> None:
    """The run view's listeners; `token` is the owner token box (on the setup screen) that Stop, Resume and
    Export send."""
    def shown_run(run_id, view):
        """The picked run, else the one the live view shows, else the one it is about to show (a Stop pressed
        right after page load, before the picker was filled, means the run on screen)."""
        run_id = run_id or (view or {}).get("run_id") or pick_default(jobs.list_runs())
        if not run_id:
            raise gr.Error("no run yet: start one first", print_exception=False)
        return run_id

    def stop_selected(run_id, view, token_value):
        run_id = shown_run(run_id, view)
        state = api_stop(run_id, token_value)["state"]
        return f"Stop requested for **{run_id}** ({state}): it saves a checkpoint, then exits.", [run_id, state]

    def resume_selected(run_id, view, token_value):
        run_id = shown_run(run_id, view)
        state = api_resume(run_id, token_value)["state"]
        return f"Resuming **{run_id}** ({state}) from its last checkpoint.", [run_id, state]

    def export_selected(run_id, view, types, token_value):
        run_id = shown_run(run_id, view)
        api_export(run_id, types, token_value)
        return run_views.export_markdown(export_state(jobs.run_path(run_id)))

    def initial_pick():
        """On page load: the run the tab will show, so the picker is never empty while a run is on screen."""
        infos = jobs.list_runs()
        return gr.Dropdown(choices=[i.run_id for i in infos], value=pick_default(infos))

    def tick(run_id, view, compare_id, compare_key, message_for):
        return tick_updates(poll(run_id, view, compare_id, compare_key, message_for), run, history)

    ui = dict(api_visibility="private")
    message_outputs = [run.message, run.message_for]
    run.stop.click(stop_selected, [run.run_pick, run.view, token], message_outputs, **ui)
    run.resume.click(resume_selected, [run.run_pick, run.view, token], message_outputs, **ui)
    run.export.click(export_selected, [run.run_pick, run.view, run.gguf_types, token], run.export_status, **ui)
    gr.on(None, initial_pick, None, run.run_pick, **ui)  # no triggers: runs on page load
    # a user picking a run sees it at once; otherwise the timer refreshes every POLL_S
    outputs = list(tick_updates(Tick(None), run, history))
    gr.on([timer.tick, run.run_pick.input], tick,
          [run.run_pick, run.view, history.compare_run, history.compare_key, run.message_for], outputs,
          show_progress="hidden", **ui)
