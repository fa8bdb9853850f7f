"""The Training tab: edit a recipe, start / stop / resume jobs, watch them live (charts, samples, doctor).

The form is built from the RunConfig dataclasses (ui/config_form.py). Jobs are child processes run by
grpo_playground.jobs; this tab only reads their run folders (a gr.Timer polls every 2 s, reading only
what was appended), so a closed browser or a restarted app loses nothing. Per-user values live in
gr.State; the runs directory on disk is the only thing shared by everyone.

API (gradio_client, api_name): /start (recipe YAML, stage, token), /stop and /resume (run id, token),
/export (run id, GGUF types, token), /status (run id), /runs. Starting, stopping, resuming and exporting
need the owner token when GRPO_PLAYGROUND_OWNER_TOKEN is set; watching does not.
"""

from __future__ import annotations

import functools
from pathlib import Path

import gradio as gr

from grpo_playground import jobs
from grpo_playground.config import ConfigError, RunConfig, dump_recipe, load_recipe
from grpo_playground.export import GGUF_TYPES  # torch-free: the export itself runs as a child process
from grpo_playground.jobs.control import ROOT
from grpo_playground.jobs.exports import export_state, start_export
from grpo_playground.jobs.runs import read_json
from grpo_playground.rewards import REWARDS, one_group_scale
from grpo_playground.ui import run_views
from grpo_playground.ui.config_form import build_form, config_from_values, config_from_yaml_text, values_from_config

RECIPES_DIR = ROOT / "recipes"
DEFAULT_RECIPE = "tiny-cpu"
POLL_S = 2.0
USER_ERRORS = (ConfigError, ValueError, PermissionError, RuntimeError, FileNotFoundError)


def shipped_recipes() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def _initial_config() -> RunConfig:
    path = RECIPES_DIR / f"{DEFAULT_RECIPE}.yaml"
    return load_recipe(path) if path.exists() else RunConfig()


def cli_for_recipe(recipe_file: str, stage: str) -> str:
    return f"OMP_NUM_THREADS=1 python -m pipelines.train --config {recipe_file}" + (
        f" --stage {stage}" if stage != "all" else "")


# --- API: the same operations the buttons use, for gradio_client and scripts ----------------------------

def _user_error(exc: Exception) -> gr.Error:
    return gr.Error(str(exc), print_exception=False)


def _api(fn):
    """An API endpoint: a user's mistake (bad recipe, wrong token, unknown run) comes back as a plain message."""
    @functools.wraps(fn)  # gradio reads the wrapped signature for the API's parameters
    def endpoint(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as exc:
            raise _user_error(exc) from None
    return endpoint


def run_summary(run_id: str) -> dict:
    """Status of one run as JSON: its status.json, job pids, metric count, last step, queue position."""
    info = jobs.reconcile(jobs.load_run(jobs.run_path(run_id)))
    feed = jobs.RunFeed(info.path)
    feed.poll()
    queue = [i.run_id for i in jobs.queue_order()]
    return {"run_id": info.run_id, "state": info.state, "status": info.status, "pgid": info.job.get("pgid"),
            "command": info.job.get("command"), "metrics": len(feed.metrics),
            "last_metrics": feed.metrics[-1] if feed.metrics else None,
            "queue_position": queue.index(info.run_id) + 1 if info.run_id in queue else None,
            "export": {k: v for k, v in export_state(info.path).items() if k != "log"}}


@_api
def api_start(recipe_yaml: str, stage: str = "all", token: str = "") -> dict:
    """Start a run from recipe YAML text (keys = RunConfig fields); returns its summary at once."""
    info = jobs.start_run(config_from_yaml_text(recipe_yaml), stage, token)
    return run_summary(info.run_id)


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
def api_export(run_id: str, gguf: list[str], token: str = "") -> dict:
    """Export a stopped or finished run to GGUF (e.g. ["q4_k_m"]) in a child process; returns at once."""
    start_export(run_id, gguf, token)
    return run_summary(run_id)


@_api
def api_status(run_id: str) -> dict:
    return run_summary(run_id)


def api_runs() -> list[dict]:
    return [{"run_id": i.run_id, "state": i.state, "stage": i.status.get("stage"), "step": i.status.get("step")}
            for i in jobs.list_runs()]


# --- live view --------------------------------------------------------------------------------------------

def _new_view(run_id: str | None) -> dict:
    """Per-user live state: which run is watched, its incremental reader, what was last shown."""
    return {"run_id": run_id, "feed": jobs.RunFeed(jobs.run_path(run_id)) if run_id else None,
            "log": None, "history": None, "status": None, "preflight_mtime": None, "export": None}


def _pick_default(infos: list[jobs.RunInfo]) -> str | None:
    """The newest active run, else the newest run."""
    pool = [i for i in infos if i.state in jobs.ACTIVE_STATES] or infos
    return pool[0].run_id if pool else None


def poll(run_id: str | None, view: dict | None, compare_id: str | None, compare_key: str | None):
    """One timer tick: refresh what changed, gr.skip() the rest (a tick must stay cheap on 2 cores)."""
    infos = jobs.list_runs()
    ids = [i.run_id for i in infos]
    if run_id not in ids:
        run_id = _pick_default(infos)
    if view is None or view["run_id"] != run_id:
        view = _new_view(run_id)
    skip = gr.skip()
    history_sig = [(i.run_id, i.state, i.status.get("step")) for i in infos]
    history_changed = history_sig != view["history"]
    # the picker is re-sent only when runs come or go, so a tick never fights a user's pick
    ids_changed = view["history"] is None or ids != [h[0] for h in view["history"]]
    view["history"] = history_sig
    run_pick = gr.Dropdown(choices=ids, value=run_id) if ids_changed else skip
    history = run_views.history_table(infos) if history_changed else skip
    queue = [i.run_id for i in jobs.queue_order(infos)]
    queue_md = ("Queue (one training job at a time): " + ", ".join(queue)) if queue else "Queue: empty"
    if run_id is None:
        return (run_pick, "No runs yet: pick a recipe and press Start.", queue_md,
                *[skip] * len(run_views.CHARTS), skip, skip, skip, skip, skip, skip, history, skip, skip, view)
    feed = view["feed"]
    changed = feed.poll() or view["status"] is None
    info = next(i for i in infos if i.run_id == run_id)
    status_changed = info.status != view["status"]
    view["status"] = info.status
    progress = run_views.progress_markdown(info, feed.metrics) if (changed or status_changed) else skip
    charts = [_plot(f) for f in run_views.chart_frames(feed.metrics)] if changed else [skip] * len(run_views.CHARTS)
    sample = feed.samples[-1] if feed.samples else None
    caption = run_views.sample_caption(sample) if changed else skip
    samples = run_views.sample_table(sample) if changed else skip
    findings = (run_views.findings_table(run_views.doctor_findings(feed.findings, feed.metrics))
                if changed else skip)
    preflight_md, preflight = _preflight(view, info.path)
    log = jobs.read_log_tail(info.path)
    log_out = log if log != view["log"] else skip
    view["log"] = log
    compare = _plot(_compare(run_id, feed.metrics, compare_id, compare_key)) if changed else skip
    exported = export_state(info.path)
    export_md = run_views.export_markdown(exported) if exported != view["export"] else skip
    view["export"] = exported
    return (run_pick, progress, queue_md, *charts, caption, samples, findings, preflight_md, preflight, log_out,
            history, compare, export_md, view)


def _plot(frame):
    """None for a chart with no points yet: once sent an empty frame, gradio 6.31's LinePlot draws nothing
    for later data (and no legend)."""
    return frame if len(frame) else None


def _preflight(view: dict, run_dir: Path):
    """(verdict in words, full report), read again only when preflight.json changes."""
    path = run_dir / "preflight.json"
    mtime = path.stat().st_mtime if path.exists() else None
    if mtime == view["preflight_mtime"]:
        return gr.skip(), gr.skip()
    view["preflight_mtime"] = mtime
    report = read_json(path) if mtime else None
    return run_views.preflight_markdown(report), report


def _compare(run_id: str, metrics: list[dict], other_id: str | None, key: str | None):
    if not key:
        return run_views.compare_frame({}, "", None)
    runs = {run_id: metrics}
    if other_id and other_id != run_id:
        try:
            other = jobs.RunFeed(jobs.run_path(other_id))
        except (ValueError, FileNotFoundError):
            other = None  # deleted meanwhile: show the selected run alone
        if other is not None:
            other.poll()
            runs[other_id] = other.metrics
    return run_views.compare_frame(runs, key, None)


# --- the tab ----------------------------------------------------------------------------------------------

def create_training_tab() -> dict:
    cfg = _initial_config()
    gr.Markdown("Edit a recipe, start it as a background job, and watch SFT teach the format and GRPO teach "
                "correctness. Jobs keep running when you close the browser; come back any time.")
    with gr.Row():
        recipe_pick = gr.Dropdown(shipped_recipes(), value=DEFAULT_RECIPE if DEFAULT_RECIPE in shipped_recipes()
                                  else None, label="Shipped recipe", scale=2, elem_id="training-recipe")
        load_btn = gr.Button("Load recipe", scale=1)
        upload = gr.File(label="Upload a recipe (.yaml)", file_types=[".yaml", ".yml"], type="filepath", scale=2)
        save_btn = gr.Button("Save recipe", scale=1)
        saved = gr.File(label="Your recipe", interactive=False, scale=2)
    specs, form = build_form(cfg)
    with gr.Row():
        stage = gr.Dropdown(list(jobs.STAGES), value="all", label="Stage",
                            info="all: SFT then GRPO; preflight: only sample a few groups and score them")
        token = gr.Textbox(label="Owner token", type="password", visible=jobs.owner_token_required(),
                           info="needed to start, stop and resume on a shared app; visitors can watch")
        start_btn = gr.Button("Start", variant="primary")
    form_msg = gr.Markdown(elem_id="training-form-msg")
    cli = gr.Code(cli_for_recipe(f"{cfg.name}.yaml", "all"), label="Equivalent CLI (save the recipe first)",
                  language="shell")

    gr.Markdown("## Runs")
    view = gr.State(None)
    with gr.Row():
        run_pick = gr.Dropdown([], label="Run", scale=3, elem_id="training-run")
        stop_btn = gr.Button("Stop (saves, then exits)", variant="stop", scale=1)
        resume_btn = gr.Button("Resume", scale=1)
    run_msg = gr.Markdown()
    progress = gr.Markdown(elem_id="training-progress")
    queue_md = gr.Markdown()
    plots = []
    for start in range(0, len(run_views.CHARTS), 2):
        with gr.Row():
            for title, _, _ in run_views.CHARTS[start : start + 2]:
                # show_label=False: a shown label takes the height the legend needs (gradio 6.31 clips it)
                plots.append(gr.LinePlot(x="step", y="value", color="series", title=title, label=title,
                                         show_label=False, height=300, elem_id=f"training-plot-{len(plots)}"))
    gr.Markdown("### Latest sample group")
    sample_caption = gr.Markdown()
    samples = gr.Dataframe(run_views.sample_table(None), label="Completions with each reward's score, total and advantage", wrap=True,
                           interactive=False, max_height=400, elem_id="training-samples")
    to_sandbox = gr.Button("Open this group in the Reward sandbox", elem_id="training-to-sandbox")
    findings = gr.Dataframe(run_views.findings_table([]), label="Doctor: what the metrics say, and the knob to turn (empty: no collapse seen)", wrap=True,
                            interactive=False, elem_id="training-findings")
    preflight_md = gr.Markdown(elem_id="training-preflight")
    with gr.Accordion("Pre-flight report in full: tag tokens, rendered prompt, sampled groups", open=False):
        preflight = gr.JSON(label="preflight.json")
    with gr.Accordion("Log (tail)", open=False):
        log = gr.Code(label="log.txt", language=None, lines=20)
    with gr.Row():
        gguf_types = gr.Dropdown(list(GGUF_TYPES), value=["q4_k_m"], multiselect=True, label="GGUF types",
                                 info="f16 is always written; q4_k_m is the seed's choice for llama.cpp / Ollama",
                                 scale=3)
        export_btn = gr.Button("Export GGUF", scale=1, elem_id="training-export-button")
    export_md = gr.Markdown(elem_id="training-export")
    with gr.Accordion("Run history and comparison", open=False):
        history = gr.Dataframe(run_views.history_table([]), label="Runs", interactive=False, wrap=True)
        with gr.Row():
            compare_run = gr.Dropdown([], label="Compare with run")
            compare_key = gr.Dropdown(["reward", "reward_std", "loss", "kl", "completions/mean_length",
                                       "completions/clipped_ratio", "frac_reward_zero_std", "learning_rate"],
                                      value="reward", label="Metric", allow_custom_value=True)
        compare_plot = gr.LinePlot(x="step", y="value", color="series", title="Two runs, one metric", height=300,
                                   label="Two runs, one metric", show_label=False)
    timer = gr.Timer(POLL_S)

    # --- handlers ---
    def load_shipped(name):
        if name not in shipped_recipes():
            raise gr.Error(f"no shipped recipe {name!r}: pick one of {', '.join(shipped_recipes())}")
        return _loaded(load_recipe(RECIPES_DIR / f"{name}.yaml"), f"recipes/{name}.yaml")

    def load_uploaded(path):
        if not path:
            return [gr.skip()] * (len(form) + 2)
        try:
            return _loaded(load_recipe(path), f"{Path(path).name}")
        except USER_ERRORS as exc:
            raise _user_error(exc) from None

    def _loaded(config, source):
        return [*values_from_config(specs, config), f"Loaded {source}.", cli_for_recipe(source, "all")]

    def check_form(stage_value, *values):
        try:
            config = config_from_values(specs, list(values))
        except USER_ERRORS as exc:
            return f"**Fix this before starting:** {exc}", gr.skip()
        return "Recipe is valid.", cli_for_recipe(f"{config.name}.yaml", stage_value)

    def save_form(*values):
        try:
            config = config_from_values(specs, list(values))
        except USER_ERRORS as exc:
            raise _user_error(exc) from None
        import tempfile

        path = Path(tempfile.mkdtemp(prefix="recipe-")) / f"{config.name}.yaml"
        path.write_text(dump_recipe(config), encoding="utf-8")
        return str(path), cli_for_recipe(path.name, "all")

    def start_from_form(stage_value, token_value, *values):
        try:
            info = jobs.start_run(config_from_values(specs, list(values)), stage_value, token_value)
        except USER_ERRORS as exc:
            raise _user_error(exc) from None
        return (gr.Dropdown(choices=[i.run_id for i in jobs.list_runs()], value=info.run_id),
                f"Started **{info.run_id}** ({info.state}): `{jobs.shell_command(info.job['command'])}`")

    def stop_selected(run_id, token_value):
        if not run_id:
            raise gr.Error("pick a run to stop")
        return f"Stop requested: {api_stop(run_id, token_value)['status'].get('reason', '')}"

    def resume_selected(run_id, token_value):
        if not run_id:
            raise gr.Error("pick a run to resume")
        return f"Resuming {run_id}: {api_resume(run_id, token_value)['state']}"

    def export_selected(run_id, types, token_value):
        if not run_id:
            raise gr.Error("pick a run to export")
        api_export(run_id, types, token_value)
        return run_views.export_markdown(export_state(jobs.run_path(run_id)))

    def pick_from_history(table, evt: gr.SelectData):
        return table.iloc[evt.index[0]]["run"]

    def compare_choices(run_id):
        return gr.Dropdown(choices=[i.run_id for i in jobs.list_runs() if i.run_id != run_id])

    def redraw_compare(run_id, other_id, key):
        if not run_id:
            return gr.skip()
        feed = jobs.RunFeed(jobs.run_path(run_id))
        feed.poll()
        return _plot(_compare(run_id, feed.metrics, other_id, key))

    # The API first, so its names are the plain ones; the UI's own listeners stay private.
    for fn, name in ((api_start, "start"), (api_stop, "stop"), (api_resume, "resume"), (api_status, "status"),
                     (api_runs, "runs"), (api_export, "export")):
        gr.api(fn, api_name=name)
    ui = dict(api_visibility="private")
    load_btn.click(load_shipped, recipe_pick, [*form, form_msg, cli], **ui)
    upload.upload(load_uploaded, upload, [*form, form_msg, cli], **ui)
    gr.on([c.input for c in form] + [stage.change], check_form, [stage, *form], [form_msg, cli], **ui)
    save_btn.click(save_form, form, [saved, cli], **ui)
    start_btn.click(start_from_form, [stage, token, *form], [run_pick, run_msg], **ui)
    stop_btn.click(stop_selected, [run_pick, token], run_msg, **ui)
    resume_btn.click(resume_selected, [run_pick, token], run_msg, **ui)
    export_btn.click(export_selected, [run_pick, gguf_types, token], export_md, **ui)
    run_pick.change(compare_choices, run_pick, compare_run, **ui)
    history.select(pick_from_history, history, run_pick, **ui)
    gr.on([compare_run.change, compare_key.change], redraw_compare, [run_pick, compare_run, compare_key],
          compare_plot, **ui)
    # a user picking a run sees it at once; otherwise the timer refreshes every POLL_S
    gr.on([timer.tick, run_pick.input], poll, [run_pick, view, compare_run, compare_key],
          [run_pick, progress, queue_md, *plots, sample_caption, samples, findings, preflight_md, preflight, log,
           history, compare_plot, export_md, view], show_progress="hidden", **ui)

    return {"form": form, "specs": specs, "stage": stage, "token": token, "start": start_btn, "run": run_pick,
            "stop": stop_btn, "resume": resume_btn, "plots": plots, "samples": samples, "view": view,
            "to_sandbox": to_sandbox, "findings": findings, "preflight": preflight, "log": log}


def latest_group(view: dict | None) -> dict | None:
    feed = (view or {}).get("feed")
    return feed.samples[-1] if feed and feed.samples else None


def sandbox_settings(run_id: str | None) -> dict | None:
    """The run's own rewards, weights, tags and advantage scaling, so the sandbox scores a sample group the way
    GRPO did (not with the sandbox's defaults). None when the run's recipe cannot be read."""
    if not run_id:
        return None
    try:
        cfg = load_recipe(jobs.run_path(run_id) / "recipe.yaml")
    except (OSError, ValueError):  # an unreadable or hand-broken recipe: keep the sandbox's settings
        return None
    return {"weights": dict(cfg.rewards.weights), "tags": cfg.rewards.tags.to_dict(),
            "scale": one_group_scale(cfg.grpo.scale_rewards)}


def link_to_sandbox(training: dict, sandbox: dict) -> None:
    """'Open this group in the Reward sandbox': the latest sample group's completions (joined with
    "\\n---\\n") and answer go to the sandbox's boxes, with the run's rewards, weights, tags and scaling,
    and the sandbox tab is selected."""
    if not {"completions", "answer"} <= sandbox.keys():
        return  # the sandbox tab does not expose its boxes (yet)
    tabs = training["to_sandbox"]
    while tabs is not None and not isinstance(tabs, gr.Tabs):
        tabs = tabs.parent
    weight_boxes = sandbox.get("weights") or []
    tag_boxes = sandbox.get("tags") or []
    settings_outputs = [sandbox["enabled"], *weight_boxes, *tag_boxes, sandbox["scale"]] if "enabled" in sandbox else []

    def open_group(view):
        group = latest_group(view)
        if group is None:
            raise gr.Error("no sample group yet: GRPO writes one at each logging step")
        text = "\n---\n".join(str(c) for c in group.get("completions") or [])
        out = [text, str(group.get("answer", ""))]
        if settings_outputs:
            settings = sandbox_settings((view or {}).get("run_id"))
            if settings is None:
                out += [gr.skip()] * len(settings_outputs)
            else:
                # the sandbox builds one weight box per registry name and one tag box per Tags field, in order
                out += [list(settings["weights"]),
                        *[settings["weights"].get(name, box.value) for name, box in zip(REWARDS, weight_boxes)],
                        *settings["tags"].values(), settings["scale"]]
        if tabs is not None:
            out.append(gr.Tabs(selected="sandbox"))
        return out

    outputs = [sandbox["completions"], sandbox["answer"], *settings_outputs] + ([tabs] if tabs is not None else [])
    training["to_sandbox"].click(open_group, training["view"], outputs, api_visibility="private")
