"""The Training tab's live-run screen: the picked run's progress, charts, doctor, pre-flight, samples, log and
export, refreshed by a 2 s timer that reads only what the job appended to the run folder.

`poll` is one timer tick as a `Tick` of named values; `tick_updates` turns it into the {component: value}
Gradio expects, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from grpo_playground.contracts.states import ACTIVE_STATES
from grpo_playground.jobs.control import shell_command
from grpo_playground.jobs.feed import RunFeed, read_log_tail
from grpo_playground.jobs.runs import RunInfo, list_runs, queue_line
from grpo_playground.run_layout import run_path
from grpo_playground.contracts.layout import GGUF_TYPES
from grpo_playground.contracts.states import JobState
from grpo_playground.jobs.comparisons import comparison_state, running_comparison
from grpo_playground.jobs.exports import export_state
from grpo_playground.jobs.scale_outs import scale_out_state
from grpo_playground.jobs import eval_results
from grpo_playground.contracts.layout import LOG_FILE, PREFLIGHT_FILE
from grpo_playground.contracts.process import read_json
from grpo_playground.contracts.states import TRAINED_STAGES
from grpo_playground.run_layout import evals_dir, saved_progress, stage_done
from grpo_playground.ui import run_summary, run_views
from grpo_playground.ui.handlers import handler
from grpo_playground.ui.run_downloads import offer
from grpo_playground.ui.training_api import api_export, api_resume, api_scale_out, api_stop
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
    summary: gr.Markdown  # a finished run's card
    next_steps: gr.Row  # its buttons, shown with the card
    next_export: gr.Button
    next_chat: gr.Button
    next_eval: gr.Button
    chart_stage: gr.Radio  # which stage the per-stage charts show
    charts: list[gr.Plot]  # one per run_views.CHARTS
    preflight_verdict: gr.Markdown
    findings_caption: gr.Markdown
    findings: gr.HTML
    samples: SamplesPart
    preflight: gr.JSON
    log: gr.Code
    export_stage: gr.Radio
    gguf_types: gr.Dropdown
    export: gr.Button
    export_status: gr.Markdown
    export_files: gr.File
    export_chat: gr.Button
    scale_out: gr.Button
    scale_out_status: gr.Markdown
    scale_out_file: gr.File


def build_run_view() -> RunViewPart:
    """The key items (picker, Stop, progress, first charts, pre-flight verdict, doctor) fit one 1280x800 screen;
    the sample group, full reports, log and export follow below them."""
    with gr.Row():
        run_pick = gr.Dropdown([], label="Run", scale=3, elem_id="training-run")
        # enabled by the tick only when they can act (a bright red Stop with nothing to stop misled)
        stop = gr.Button("Stop (saves, then exits)", variant="stop", scale=1, interactive=False,
                         elem_id="training-stop")
        resume = gr.Button("Resume", scale=1, interactive=False, elem_id="training-resume")
    message = gr.Markdown(elem_id="training-run-msg")
    progress = gr.Markdown(elem_id="training-progress")
    with gr.Row(visible=False) as next_steps:  # a finished run: its card and what to do next
        with gr.Column(scale=3):
            summary = gr.Markdown(elem_id="training-summary")
        with gr.Column(scale=2, min_width=300), gr.Row():  # small buttons beside the card, not below it
            next_export = gr.Button("Export it (GGUF)", variant="primary", size="sm", elem_id="training-next-export")
            next_chat = gr.Button("Chat with it", size="sm", elem_id="training-next-chat")
            next_eval = gr.Button("Evaluate it", size="sm", elem_id="training-next-eval")
    with gr.Row(equal_height=True):
        queue = gr.Markdown(elem_id="training-queue")
        chart_stage = gr.Radio([("loss, learning rate, step time: the current stage", run_views.CURRENT_STAGE),
                                *[(s, s) for s in TRAINED_STAGES]],
                               value=run_views.CURRENT_STAGE, label="Stage the per-stage charts show",
                               container=False, scale=2, elem_id="training-chart-stage")
    with gr.Row():
        with gr.Column(scale=2, min_width=480):  # the charts get two thirds: GRPO's ticks and legends need it
            charts = build_charts()
        with gr.Column(scale=1, min_width=300):
            preflight_verdict = gr.Markdown(elem_id="training-preflight")
            findings_caption = gr.Markdown(run_views.findings_caption([]), elem_id="training-findings-caption")
            findings = gr.HTML("", elem_id="training-findings", padding=False)
    samples = build_samples()
    with gr.Accordion("Pre-flight report in full: tag tokens, rendered prompt, sampled groups", open=False):
        preflight = gr.JSON(label=PREFLIGHT_FILE)
    with gr.Accordion("Log (tail)", open=False):
        log = gr.Code(label=LOG_FILE, language=None, lines=20)
    gr.Markdown("### Export", elem_id="training-export-heading")
    with gr.Row():
        export_stage = gr.Radio(list(TRAINED_STAGES), value=TRAINED_STAGES[-1], label="Stage to export",
                                info="grpo: the trained run; sft: the format-only starting point", scale=1,
                                elem_id="training-export-stage")
        gguf_types = gr.Dropdown(list(GGUF_TYPES), value=["q4_k_m"], multiselect=True, label="GGUF types",
                                 info="f16 is always written; q4_k_m is the seed's choice for llama.cpp / Ollama",
                                 scale=2)
        # enabled by the tick once a stage is trained (a run that failed on load has nothing to export)
        export = gr.Button("Export GGUF", scale=1, interactive=False, elem_id="training-export-button")
    export_status = gr.Markdown(elem_id="training-export")
    with gr.Row():
        export_files = gr.File(label="Download", file_count="multiple", interactive=False, visible=False, scale=3,
                               elem_id="training-export-files")
        export_chat = gr.Button("Chat with it", visible=False, scale=1, elem_id="training-export-chat")
    with gr.Accordion("When one GPU is not enough: this run as a verl / OpenRLHF job", open=False,
                      elem_id="training-scale-out-panel"):
        with gr.Row():
            scale_out_status = gr.Markdown(elem_id="training-scale-out")
            scale_out = gr.Button("Write the job", scale=0, elem_id="training-scale-out-button")
        scale_out_file = gr.File(label="Download", interactive=False, visible=False, elem_id="training-scale-out-file")
    return RunViewPart(gr.State(None), gr.State(None), run_pick, stop, resume, message, progress, queue, summary,
                       next_steps, next_export, next_chat, next_eval, chart_stage, charts, preflight_verdict,
                       findings_caption, findings, samples, preflight, log, export_stage, gguf_types, export,
                       export_status, export_files, export_chat, scale_out, scale_out_status, scale_out_file)


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
    export_files: object = field(default_factory=gr.skip)
    export_chat: object = field(default_factory=gr.skip)
    export_stage: object = field(default_factory=gr.skip)
    export: object = field(default_factory=gr.skip)
    to_sandbox: object = field(default_factory=gr.skip)
    scale_out_status: object = field(default_factory=gr.skip)
    scale_out_file: object = field(default_factory=gr.skip)
    message: object = field(default_factory=gr.skip)
    message_for: object = field(default_factory=gr.skip)
    stop: object = field(default_factory=gr.skip)
    resume: object = field(default_factory=gr.skip)
    summary: object = field(default_factory=gr.skip)
    next_steps: object = field(default_factory=gr.skip)
    findings_caption: object = field(default_factory=gr.skip)


def tick_updates(tick: Tick, run: RunViewPart, history: HistoryPart) -> dict:
    """The one place a Tick meets the components."""
    return {run.view: tick.view, run.run_pick: tick.run_pick, run.progress: tick.progress, run.queue: tick.queue,
            **dict(zip(run.charts, tick.charts, strict=True)), run.samples.caption: tick.caption,
            run.samples.table: tick.samples, run.findings: tick.findings, run.findings_caption: tick.findings_caption,
            run.preflight_verdict: tick.preflight_verdict, run.preflight: tick.preflight, run.log: tick.log,
            history.table: tick.history, history.compare_plot: tick.compare, run.export_status: tick.export_status,
            run.export_files: tick.export_files, run.export_chat: tick.export_chat,
            run.export_stage: tick.export_stage, run.export: tick.export,
            run.samples.to_sandbox: tick.to_sandbox, run.scale_out_status: tick.scale_out_status,
            run.scale_out_file: tick.scale_out_file, run.message: tick.message, run.message_for: tick.message_for,
            run.stop: tick.stop,
            run.resume: tick.resume, run.summary: tick.summary, run.next_steps: tick.next_steps}


NO_RUN = "no run"  # view["status"] once the empty view (no run yet) has been sent


def _new_view(run_id: str | None) -> dict:
    return {"run_id": run_id, "feed": RunFeed(run_path(run_id)) if run_id else None,
            "log": None, "history": None, "status": None, "preflight_mtime": UNREAD, "export": None, "scale_out": None,
            "later_stages": None, "chart_stage": None, "evals_mtime": UNREAD, "stages_done": None, "queue": None}


def pick_default(infos: list[RunInfo]) -> str | None:
    """The newest active run, else the newest run."""
    pool = [i for i in infos if i.state in ACTIVE_STATES] or infos
    return pool[0].run_id if pool else None


def poll(run_id: str | None, view: dict | None, compare_id: str | None, compare_key: str | None,
         message_for: list | None = None, chart_stage: str | None = None) -> Tick:
    """One timer tick: refresh what changed, gr.skip() the rest (a tick must stay cheap on 2 cores).

    message_for is [run id, state] of the last button message: once that run's state moves on, the message
    is stale and is cleared (the progress line says the current state). chart_stage: the stage the per-stage
    charts show (run_views.CURRENT_STAGE or None: the stage logged last)."""
    infos = list_runs()
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
    # overwrite a run the user (or Start) has just chosen; new runs only extend the choices. (No run at all: the
    # empty picker is sent once.)
    if not picked and (run_id is not None or ids_changed):
        tick.run_pick = gr.update(choices=ids, value=run_id)
    elif ids_changed:
        tick.run_pick = gr.update(choices=ids)
    if history_changed:
        tick.history = run_views.history_table(infos)
    queue = queue_line()  # comparisons waiting for the slot too, in the order the slot is taken
    queue_text = ("Queue (one training job at a time): " + ", ".join(queue)) if queue else "Queue: empty"
    comparison = running_comparison()
    if comparison and comparison_state(comparison)["state"] == "running":  # its arms train in the same slot
        queue_text += f" · the training slot is held by the comparison **{comparison}** (Evaluate tab)"
    if queue_text != view["queue"]:
        tick.queue = view["queue"] = queue_text
    if run_id is None:
        if view["status"] != NO_RUN:  # the empty view, sent once
            view["status"] = NO_RUN
            tick.progress = "No runs yet: pick a recipe in **1. Set up a run** and press Start."
            tick.charts = [chart_update(None, chart) for chart in run_views.CHARTS]
            tick.stop, tick.resume = control_updates(None)
            tick.export = tick.to_sandbox = gr.update(interactive=False)
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
        tick.stop, tick.resume = control_updates(info)
    shown_stage = None if chart_stage in (None, run_views.CURRENT_STAGE) else chart_stage
    if changed or shown_stage != view["chart_stage"]:
        view["chart_stage"] = shown_stage
        tick.charts = chart_updates(feed.metrics, shown_stage)
    if changed:
        sample = feed.samples[-1] if feed.samples else None
        tick.caption = run_views.sample_caption(sample)
        tick.samples = run_views.sample_table(sample)
        tick.to_sandbox = gr.update(interactive=sample is not None)
        findings = run_views.doctor_findings(feed.findings, feed.metrics)
        tick.findings, tick.findings_caption = run_views.findings_html(findings), run_views.findings_caption(findings)
        tick.compare = compare_metrics(run_id, feed.metrics, compare_id, compare_key)
    preflight_changed = _read_preflight(tick, info.path)
    _summary(tick, info, changed or status_changed or preflight_changed)
    log = read_log_tail(info.path)
    if log != view["log"]:
        tick.log = view["log"] = log
    _export_panel(tick, info)
    _scale_out_panel(tick, info)
    if message_for and (message_for[0] != run_id or message_for[1] != info.state):
        # stale: that run's state has moved on. Its mark goes too, so that only this tick clears: ticks sent with a
        # stale mark kept clearing, and one answered after a Stop wiped "Stop requested" as it arrived
        tick.message, tick.message_for = "", None
    return tick


def control_updates(info: RunInfo | None) -> tuple[dict, dict]:
    """Stop and Resume, each enabled only when it can act on the run on screen: Resume a stopped run, or a
    failed one that saved something to resume from (one that failed on load would fail again)."""
    state = info.state if info else None
    resumable = state == "stopped" or (state == "failed" and saved_progress(info.path))
    # a run already stopping (saving at its next step) has nothing more to stop: a red Stop then misled
    stoppable = state in ACTIVE_STATES and state != JobState.STOPPING
    return gr.update(interactive=stoppable), gr.update(interactive=resumable)


def _summary(tick: Tick, info: RunInfo, changed: bool) -> None:
    """A finished run's card and its next-step buttons, re-read when the run or the saved evaluations change."""
    folder = evals_dir()
    evals_mtime = folder.stat().st_mtime if folder.is_dir() else None
    if not changed and evals_mtime == tick.view["evals_mtime"]:
        return
    tick.view["evals_mtime"] = evals_mtime
    feed = tick.view["feed"]
    sample = feed.samples[-1] if feed.samples else None
    results = eval_results.load_results() if info.state == "finished" else []
    text = run_summary.summary_markdown(info, feed.metrics, sample, read_json(info.path / PREFLIGHT_FILE), results)
    tick.summary, tick.next_steps = text, gr.update(visible=bool(text))


def _export_panel(tick: Tick, info: RunInfo) -> None:
    """The export's state in words, its files to download, and the stages that can be exported."""
    view = tick.view
    done = [s for s in TRAINED_STAGES if stage_done(info.path, s)]
    if done != view["stages_done"]:
        view["stages_done"] = done
        tick.export = gr.update(interactive=bool(done))
        tick.export_stage = gr.update(choices=done or list(TRAINED_STAGES),
                                      value=done[-1] if done else TRAINED_STAGES[-1])
    exported = export_state(info.path)
    if exported == view["export"]:
        return
    view["export"] = exported
    tick.export_status = run_views.export_markdown(exported)
    files = exported["files"] if exported["state"] == "finished" else []
    offer(files)
    tick.export_files = gr.update(value=files or None, visible=bool(files))
    tick.export_chat = gr.update(visible=any(f.endswith(".gguf") for f in files))


def _scale_out_panel(tick: Tick, info: RunInfo) -> None:
    """The run written as a verl / OpenRLHF job: its state in words and the zip to download."""
    state = scale_out_state(info.path)
    if state == tick.view["scale_out"]:
        return
    tick.view["scale_out"] = state
    tick.scale_out_status = run_views.scale_out_markdown(state)
    offer([state["zip"]] if state["zip"] else [])
    tick.scale_out_file = gr.update(value=state["zip"], visible=bool(state["zip"]))


def _read_preflight(tick: Tick, run_dir: Path) -> bool:
    """The verdict in words and the full report, read again only when preflight.json changes (True then)."""
    path = run_dir / PREFLIGHT_FILE
    mtime = path.stat().st_mtime if path.exists() else None
    if mtime == tick.view["preflight_mtime"]:
        return False
    tick.view["preflight_mtime"] = mtime
    report = read_json(path) if mtime else None
    tick.preflight_verdict, tick.preflight = run_views.preflight_markdown(report), report
    return True


# --- listeners --------------------------------------------------------------------------------------------

def started_updates(run: RunViewPart, screens: gr.Tabs, info: RunInfo) -> dict:
    """After Start: the picker follows the new run, its message is shown, and the live screen opens."""
    return {run.run_pick: gr.Dropdown(choices=[i.run_id for i in list_runs()], value=info.run_id),
            run.message: f"Started **{info.run_id}** ({info.state}): `{shell_command(info.job['meta']['command'])}`",
            run.message_for: [info.run_id, info.state], screens: gr.Tabs(selected=LIVE_SCREEN)}


@dataclass
class ControlRequest:
    """Stop, Resume and scale-out: the run on screen and the owner token."""
    run_pick: str | None
    view: dict | None
    token: str | None


@dataclass
class ExportRequest:
    run_pick: str | None
    view: dict | None
    export_stage: str | None
    gguf_types: list | None
    token: str | None


@dataclass
class Requested:
    """A button's answer in the run message, and what the tick clears it by (message_for)."""
    message: str
    message_for: list  # [run id, its state when the message was written]


@dataclass
class TickRequest:
    run_pick: str | None
    view: dict | None
    compare_run: str | None
    compare_key: str | None
    message_for: list | None
    chart_stage: str | None


def shown_run(run_id: str | None, view: dict | None) -> str:
    """The picked run, else the one the live view shows, else the one it is about to show (a Stop pressed right
    after page load, before the picker was filled, means the run on screen)."""
    run_id = run_id or (view or {}).get("run_id") or pick_default(list_runs())
    if not run_id:
        raise ValueError("no run yet: start one first")
    return run_id


@handler(ControlRequest)
def stop_selected(req: ControlRequest) -> Requested:
    run_id = shown_run(req.run_pick, req.view)
    state = api_stop(run_id, req.token)["state"]
    return Requested(f"Stop requested for **{run_id}** ({state}): it saves a checkpoint, then exits.", [run_id, state])


@handler(ControlRequest)
def resume_selected(req: ControlRequest) -> Requested:
    run_id = shown_run(req.run_pick, req.view)
    state = api_resume(run_id, req.token)["state"]
    return Requested(f"Resuming **{run_id}** ({state}) from its last checkpoint.", [run_id, state])


# Export and scale-out answer in the run message; their panels have one writer, the tick (ticks and clicks run
# concurrently, so a click's "Exporting..." reached the page after the tick's "Exported the ..." in CI).
@handler(ExportRequest)
def export_selected(req: ExportRequest) -> Requested:
    run_id = shown_run(req.run_pick, req.view)
    state = api_export(run_id, req.gguf_types, req.token, req.export_stage)["state"]
    return Requested(f"Exporting **{run_id}**'s {req.export_stage or 'latest'} stage to {', '.join(req.gguf_types)}: "
                     "its progress shows under Export.", [run_id, state])


@handler(ControlRequest)
def scale_out_selected(req: ControlRequest) -> Requested:
    run_id = shown_run(req.run_pick, req.view)
    state = api_scale_out(run_id, req.token)["state"]
    return Requested(f"Writing **{run_id}** as a verl / OpenRLHF job: the zip shows in its panel when it is written.",
                     [run_id, state])


@dataclass
class InitialPick:
    run_pick: object
    screens: object
    stop: object
    resume: object


@handler(None)
def initial_pick() -> InitialPick:
    """On page load: the run the tab will show, so the picker is never empty while a run is on screen; while
    a job runs, its live screen (a reopened browser landed on "Set up a run", saying nothing of it)."""
    infos = list_runs()
    shown = next((i for i in infos if i.run_id == pick_default(infos)), None)
    active = any(i.state in ACTIVE_STATES for i in infos)
    return InitialPick(gr.Dropdown(choices=[i.run_id for i in infos], value=shown and shown.run_id),
                       gr.Tabs(selected=LIVE_SCREEN) if active else gr.skip(), *control_updates(shown))


def wire_run_view(run: RunViewPart, history: HistoryPart, timer: gr.Timer, token: gr.Textbox, screens: gr.Tabs) -> None:
    """The run view's listeners; `token` is the owner token box (on the setup screen) that Stop, Resume and
    Export send; `screens` holds this screen (LIVE_SCREEN), opened on page load while a job runs."""
    @handler(TickRequest)
    def tick(req: TickRequest) -> dict:
        return tick_updates(poll(req.run_pick, req.view, req.compare_run, req.compare_key, req.message_for,
                                 req.chart_stage), run, history)

    ui = dict(api_visibility="private")
    message_outputs = [run.message, run.message_for]
    run.stop.click(stop_selected, [run.run_pick, run.view, token], message_outputs, **ui)
    # and off at once, outside the queue (it stayed red and clickable ~1 s, until the request's answer and a tick);
    # the tick turns it back on if the request was refused
    run.stop.click(lambda: gr.update(interactive=False), None, run.stop, queue=False, show_progress="hidden", **ui)
    run.resume.click(resume_selected, [run.run_pick, run.view, token], message_outputs, **ui)
    export_inputs = [run.run_pick, run.view, run.export_stage, run.gguf_types, token]
    run.export.click(export_selected, export_inputs, message_outputs, **ui)
    # the card's button sits at the top; the export's progress shows in the Export panel far below: go there
    run.next_export.click(export_selected, export_inputs, message_outputs, **ui).then(
        None, js="() => document.getElementById('training-export-heading')?.scrollIntoView({block: 'start'})", **ui)
    run.scale_out.click(scale_out_selected, [run.run_pick, run.view, token], message_outputs, **ui)
    gr.on(None, initial_pick, None, [run.run_pick, screens, run.stop, run.resume], **ui)  # on page load
    # a user picking a run (or a chart stage) sees it at once; otherwise the timer refreshes every POLL_S
    outputs = list(tick_updates(Tick(None), run, history))
    gr.on([timer.tick, run.run_pick.input, run.chart_stage.input], tick,
          [run.run_pick, run.view, history.compare_run, history.compare_key, run.message_for, run.chart_stage],
          outputs, show_progress="hidden", **ui)
