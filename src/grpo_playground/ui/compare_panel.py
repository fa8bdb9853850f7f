""""GRPO vs more SFT" panel (Evaluate tab): the seed-regime experiment on a recipe of the user's, as a background job.

Same arms as `grpo-playground compare` (sft-W; + GRPO on answer-only problems for T minutes;
+ more SFT on W for the same time; + SFT on fresh worked problems), smaller sets by default. The job
(grpo_playground.jobs.comparisons) outlives the browser; the panel lists every comparison on page load, follows the
chosen one from its progress file every few seconds, and when it is done shows each arm's accuracy with GRPO's
paired difference, and accuracy by level, read from the experiment's result JSON (until then a sentence says so, not
an empty chart). A and the held-out set may come from GSM8K-format .jsonl files (`gsm8k:PATH`); with a GSM8K
held-out set the generated one is scored too, and a table gives each arm's accuracy per source. A stopped or cut
comparison resumes from the steps it finished. Starting, stopping and resuming need the owner token when
GRPO_PLAYGROUND_OWNER_TOKEN is set.

The form's inputs are ComparisonPlan's fields (grpo_playground.experiments.plan), in its order: Start, the API and
the job's command line all build that one plan.

API (gradio_client): /compare_start (recipe, minutes, n_worked, n_answers, n_eval, levels, round_steps, max_rounds,
format_target, token, answers="", eval_data="": each "" for generated problems or gsm8k:PATH.jsonl) -> the
comparison's state; /compare_resume (id, token) -> its state; /compare_status (id, or "" for the newest) -> its state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import pandas as pd

from grpo_playground.config import load_recipe
from grpo_playground.jobs.runs import list_runs
from grpo_playground.run_layout import run_path
from grpo_playground.experiments.plan import ComparisonPlan, form_fields
from grpo_playground.experiments.progress import SCORED
from grpo_playground.jobs.comparisons import (comparison_state, list_comparisons, resume_comparison, start_comparison,
                                              stop_comparison)
from grpo_playground.owner import check_owner, owner_token_required
from grpo_playground.contracts.layout import RECIPE_FILE
from grpo_playground.contracts.shipped import RECIPES_DIR, shipped_recipes
from grpo_playground.step_timing import clock
from grpo_playground.ui.public_paths import public_api
from grpo_playground.ui.handlers import handler, inputs

POLL_S = 3.0
START_ACTION = "starting, stopping or resuming a comparison"
PLAN = ComparisonPlan()  # the defaults the form starts from
FORM = form_fields()  # the form's inputs after the recipe and the token, in this order


def recipe_choices() -> list[tuple[str, str]]:
    """(label, value): the shipped recipes, then the recipe of every run (newest first)."""
    shipped = [(f"recipes/{name}.yaml", f"recipe:{name}") for name in shipped_recipes()]  # labels: resolve_recipe's
    runs = [(f"run {info.run_id}", f"run:{info.run_id}") for info in list_runs() if (info.path / RECIPE_FILE).is_file()]
    return shipped + runs


def resolve_recipe(choice: str | None) -> tuple[Path, str]:
    """The recipe file of a choice ("recipe:NAME" or "run:ID") and its label; a clear error for anything else."""
    kind, _, name = (choice or "").partition(":")
    if kind == "recipe" and name in shipped_recipes():
        path, label = RECIPES_DIR / f"{name}.yaml", f"recipes/{name}.yaml"
    elif kind == "run":
        path, label = run_path(name) / RECIPE_FILE, f"run {name}"
        if not path.is_file():
            raise FileNotFoundError(f"run {name} has no {RECIPE_FILE}: pick another run or a shipped recipe")
    else:
        raise ValueError(f"unknown recipe {choice!r}: pick one of the shipped recipes "
                         f"({', '.join(shipped_recipes())}) or a run's recipe from the list")
    load_recipe(path)  # a broken recipe is refused here, not minutes later in the job
    return path, label


def start(recipe, token, *values) -> dict:
    """Owner only: check everything, then start the comparison job (returns at once). `values`: the plan's settings
    in FORM's order (the form's inputs; those left out keep their defaults)."""
    check_owner(token, START_ACTION)  # first: a visitor's input is not even read
    if len(values) > len(FORM):
        raise ValueError(f"{len(values)} settings given, {len(FORM)} known: {', '.join(FORM)}")
    plan = ComparisonPlan.from_form(dict(zip(FORM, values)))
    return start_comparison(*resolve_recipe(recipe), plan)


def state_text(state: dict) -> str:
    """The comparison in words: its state, each step done / running (with the training step) / waiting."""
    plan = state["plan"]
    resume = "press **Resume comparison** to go on from the steps it finished"
    word = {"waiting": "**Waiting for the training slot** (a training run holds it)",
            "running": "**Running** (a background job: closing the browser does not stop it)",
            "finished": "**Finished**", "stopped": f"**Stopped** ({resume})",
            "failed": f"**Failed** (see the log below; once fixed, {resume})"}[state["state"]]
    head = (f"{word}: comparison `{state['id']}` on `{state['recipe_name']}`, T = {plan.get('minutes', 0):g} min, "
            f"W = {plan.get('n_worked')}, A = {plan.get('n_answers')}, {plan.get('n_eval')} held-out prompts"
            + sources_text(plan) + (f", resumed {state['resumes']} time(s)." if state.get("resumes") else "."))
    steps = []
    for step in state["order"]:
        entry = state["steps"].get(step, {})
        mark = entry.get("state", "waiting")
        if mark == "running" and state["state"] != "running":
            mark = "interrupted"
        elif mark == "running" and entry.get("round"):
            mark += f" (round {entry['round']} of at most {entry.get('max_rounds')}"
            if state["current"].get("max_steps"):
                mark += f", step {state['current'].get('step', 0)} of {state['current']['max_steps']}"
            mark += ")"
        elif mark == "running" and state["current"].get("max_steps"):
            mark += f" (step {state['current'].get('step', 0)} of at most {state['current']['max_steps']})"
        if entry.get("rounds"):  # sft-W's sampled format rate after each round, against its target
            rates = " -> ".join(f"{100 * r['format_rate']:.1f}%" for r in entry["rounds"])
            mark += f"; format rate after each round: {rates} (target {100 * entry.get('format_target', 0):.0f}%)"
        steps.append(f"- {step}: {mark}")
    return "\n\n".join([head, "\n".join(steps), time_text(state),
                        f"The same experiment from a shell: `{state['command']}`"])


def source_label(spec: str) -> str:
    """A source in a few words: "gsm8k:test.jsonl" (the file's name, not the server's folders) or "generated"."""
    kind, _, target = spec.partition(":")
    return f"{kind}:{Path(target).name}" if kind == "gsm8k" else "generated"


def sources_text(plan: dict) -> str:
    """", A from gsm8k:train.jsonl, held-out gsm8k:test.jsonl + generated" when a source is a file; "" otherwise."""
    answers, held_out = plan.get("answers", ""), plan.get("eval_data", "")
    if not (answers or held_out):
        return ""
    text = f", A from {source_label(answers)}, held-out {source_label(held_out)}"
    return text + (" + generated" if held_out.startswith("gsm8k:") else "")


def time_text(state: dict) -> str:
    """Elapsed, and what is left at most: each arm trains for T minutes; sft-W's rounds and the evaluations come on
    top (their length depends on the model and the machine, so they are named, not guessed)."""
    plan, steps = state["plan"], state["steps"]
    if not state.get("started"):
        return ""
    elapsed = (time.time() if state["state"] in ("waiting", "running") else
               max((s.get("time", 0) for s in steps.values()), default=state["started"])) - state["started"]
    text = f"Elapsed {clock(elapsed)}."
    arms_left = [arm for arm in state["order"][2:-1] if steps.get(arm, {}).get("state") != "done"]
    if state["state"] in ("waiting", "running") and arms_left:
        text += (f" Still to come: {len(arms_left)} arm(s) of at most {plan.get('minutes', 0):g} min each "
                 f"(~{clock(60 * plan.get('minutes', 0) * len(arms_left))})")
        text += ", after sft-W's rounds," if steps.get("sft_w", {}).get("state") != "done" else ","
        text += " then the evaluation of every arm."
    return text


LEGEND = "GRPO minus arm (points)"
ARM_ORDER = list(SCORED)  # the chart's x order (Vega sorts names otherwise): the experiment's report order


def _grpo_arm(result: dict) -> str:
    return next(arm for arm in result["eval"] if arm not in result["grpo_minus"])


def legend_label(arm: str, grpo: str, d: dict | None) -> str:
    """"more_sft_w: +0.5 ± 1.1": GRPO minus the arm in points; the arms' shared "sft_w+" is dropped, as the
    chart's legend clips labels past about 25 characters."""
    short = arm.split("+", 1)[-1]
    return f"{short}: the GRPO arm" if arm == grpo else f"{short}: {100 * d['difference']:+.1f} ± {100 * d['se']:.1f}"


def chart_frame(result: dict | None) -> pd.DataFrame:
    """One bar per arm: greedy accuracy in percent; the legend carries GRPO's paired difference ± SE to it."""
    if not result:
        return pd.DataFrame(columns=["arm", "accuracy", LEGEND])
    grpo = _grpo_arm(result)
    return pd.DataFrame([{"arm": arm, "accuracy": round(100 * e["accuracy"], 1),
                          LEGEND: legend_label(arm, grpo, result["grpo_minus"].get(arm))}
                         for arm, e in result["eval"].items()])


def arms_frame(result: dict | None) -> pd.DataFrame:
    """Per arm: training time and steps, format rate and accuracy (± SE), GRPO minus it (paired, ± SE)."""
    columns = ["arm", "train s", "steps", "format rate %", "accuracy %", "± %", "GRPO minus arm (points)", "± points"]
    if not result:
        return pd.DataFrame(columns=columns)
    rows = []
    for arm, e in result["eval"].items():
        d = result["grpo_minus"].get(arm, {})
        rows.append([arm, round(result["seconds"][arm]), result["steps"][arm], round(100 * e["format_rate"], 1),
                     round(100 * e["accuracy"], 1), round(100 * e.get("accuracy_se", 0), 1),
                     round(100 * d["difference"], 1) if d else None, round(100 * d["se"], 1) if d else None])
    return pd.DataFrame(rows, columns=columns)


def level_frame(result: dict | None) -> pd.DataFrame:
    """Accuracy by problem level (%), one column per arm, with each level's number of prompts."""
    if not result:
        return pd.DataFrame(columns=["level", "prompts"])
    evals = result["eval"]
    levels = sorted({lv for e in evals.values() for lv in (e.get("per_level") or {})}, key=int)
    rows = []
    for lv in levels:
        cells = [(e.get("per_level") or {}).get(lv) for e in evals.values()]
        n = next((c["n"] for c in cells if c), 0)
        rows.append([lv, n, *(round(100 * c["accuracy"], 1) if c else None for c in cells)])
    return pd.DataFrame(rows, columns=["level", "prompts", *evals])


def source_columns(result: dict) -> list[tuple[str, dict, dict]]:
    """(source label, each arm's evaluation, GRPO minus each arm) of every held-out source, the primary one first."""
    return [(source_label(result["sources"]["eval"]), result["eval"], result["grpo_minus"]),
            *((source_label(c["source"]), c["eval"], c["grpo_minus"]) for c in result.get("second_eval") or [])]


def source_frame(result: dict | None) -> pd.DataFrame:
    """Per arm, on each held-out source: accuracy % and GRPO minus the arm (paired, points); empty with one source."""
    if not result or not result.get("second_eval"):
        return pd.DataFrame(columns=["arm"])
    columns, rows = source_columns(result), []
    for arm in result["eval"]:
        row = [arm]
        for _, evals, minus in columns:
            d = minus.get(arm)
            row += [round(100 * evals[arm]["accuracy"], 1), round(100 * d["difference"], 1) if d else None]
        rows.append(row)
    names = [name for label, _, _ in columns for name in (f"{label} accuracy %", f"{label} GRPO minus arm")]
    return pd.DataFrame(rows, columns=["arm", *names])


@dataclass
class ViewRequest:
    picker: str | None  # the chosen comparison; none or gone: the newest
    shown: dict | None  # what the page shows (ViewAnswer.shown of the last view); None: nothing yet


@dataclass
class ViewAnswer:
    """A value per shown component, gr.skip() where nothing changed."""
    status: object = field(default_factory=gr.skip)
    log: object = field(default_factory=gr.skip)
    chart: object = field(default_factory=gr.skip)
    arms: object = field(default_factory=gr.skip)
    levels: object = field(default_factory=gr.skip)
    shown: dict | None = None
    picker: object = field(default_factory=gr.skip)
    result_box: object = field(default_factory=gr.skip)
    no_result: object = field(default_factory=gr.skip)
    sources: object = field(default_factory=gr.skip)
    source_box: object = field(default_factory=gr.skip)


@handler(ViewRequest)
def view(req: ViewRequest) -> ViewAnswer:
    """Status, log, chart and tables of the chosen comparison (the newest when none is chosen), then whether its
    result is shown (the chart and tables) or the sentence that there is none yet; the chart, tables and that
    choice are re-sent only when its result changed."""
    ids = list_comparisons()
    selected = req.picker
    chosen = selected if selected in ids else (ids[0] if ids else None)
    if chosen is None:
        return ViewAnswer(status="No comparison has run from this app yet.", log="", shown=req.shown)
    state = comparison_state(chosen)
    answer = ViewAnswer(status=state_text(state), log=state["log"],
                        shown={"id": chosen, "finished": state["result"] is not None, "ids": ids})
    shown = req.shown or {}
    if (shown.get("id"), shown.get("finished")) != (chosen, answer.shown["finished"]):
        result = state["result"]
        answer.chart, answer.arms, answer.levels = chart_frame(result), arms_frame(result), level_frame(result)
        answer.result_box, answer.no_result = gr.Column(visible=bool(result)), gr.Markdown(visible=not result)
        answer.sources = source_frame(result)
        answer.source_box = gr.Column(visible=not answer.sources.empty)
    # a valid pick is never sent back: a tick computed before Start's answer would set the picker to the old id
    if selected != chosen:
        answer.picker = gr.Dropdown(choices=ids, value=chosen)
    elif shown.get("ids") != ids:
        answer.picker = gr.update(choices=ids)
    return answer


@dataclass
class StartRequest:
    """The panel's Start: the recipe, the owner token, then the plan's boxes in FORM's order."""
    recipe: str | None
    token: str | None
    plan: dict = inputs(FORM)


@handler(StartRequest)
def run_start(req: StartRequest) -> gr.Dropdown:
    state = start(req.recipe, req.token, *req.plan.values())
    return gr.Dropdown(choices=list_comparisons(), value=state["id"])


@dataclass
class PickedRequest:
    picker: str | None  # the comparison to stop or resume
    token: str | None


@handler(PickedRequest)
def run_resume(req: PickedRequest) -> gr.Dropdown:
    check_owner(req.token, START_ACTION)
    state = resume_comparison(req.picker)
    return gr.Dropdown(choices=list_comparisons(), value=state["id"])


@handler(PickedRequest)
def run_stop(req: PickedRequest) -> str:
    check_owner(req.token, START_ACTION)
    return stop_comparison(req.picker)


SOURCES = ("answers", "eval_data")  # the plan's data sources: /compare_start takes them after the token


@dataclass
class ApiStartRequest:
    """/compare_start's parameters: the recipe, the plan's settings with its defaults, the token, the sources."""
    recipe: str
    settings: dict = inputs([name for name in FORM if name not in SOURCES], like=ComparisonPlan, default_factory=dict)
    token: str = ""
    sources: dict = inputs(SOURCES, like=ComparisonPlan, default_factory=dict)


def _without_log(state: dict) -> dict:
    return {k: v for k, v in state.items() if k != "log"}


@handler(ApiStartRequest)
def api_start(req: ApiStartRequest) -> dict:
    """Start a GRPO vs more SFT comparison on a recipe ("recipe:NAME" or "run:ID"), A and the held-out set from the
    generator ("") or a gsm8k:PATH.jsonl file each; its state, without the log. The parameters are the plan's fields
    (named for gradio_client; tests/test_compare.py checks they are FORM's)."""
    plan = {**req.settings, **req.sources}
    return _without_log(start(req.recipe, req.token, *(plan[name] for name in FORM)))


@dataclass
class ApiResumeRequest:
    comparison_id: str
    token: str = ""


@handler(ApiResumeRequest)
def api_resume(req: ApiResumeRequest) -> dict:
    """Resume a stopped or cut comparison from the steps it finished; its state, without the log."""
    check_owner(req.token, START_ACTION)
    return _without_log(resume_comparison(req.comparison_id))


@dataclass
class ApiStatusRequest:
    comparison_id: str = ""


@handler(ApiStatusRequest)
def api_status(req: ApiStatusRequest) -> dict:
    """A comparison's state (the newest when the id is empty): steps, result; {} when none has run."""
    ids = list_comparisons()
    return comparison_state(req.comparison_id or ids[0]) if req.comparison_id or ids else {}


def create_compare_panel() -> dict:
    gr.Markdown(
        "### GRPO vs more SFT\nDoes GRPO on answer-only problems beat spending the same minutes on more SFT? From a "
        "recipe: SFT on a few worked solutions (W) until the sampled format rate reaches the target (**sft-W**), "
        "then for T minutes each: **GRPO** on answer-only problems (A), **more SFT on W** (the fair control), and "
        "SFT on **fresh** worked problems (if gold reasoning were free). Every arm is scored greedily on the same "
        "held-out problems (generated, or a GSM8K file's: then the generated ones too, each source's accuracy in its "
        "own table). It trains, so it waits for the training slot; the CLI "
        "(`grpo-playground compare`) takes larger sets and other data formats.")
    with gr.Row():
        recipe = gr.Dropdown(choices=recipe_choices(), value="recipe:tiny-cpu", label="Recipe", scale=3,
                             info="a shipped recipe or the recipe of one of your runs", elem_id="compare-recipe")
        refresh_btn = gr.Button("Refresh recipes", scale=0)
    limits = ComparisonPlan.LIMITS
    form = {}  # the plan's inputs by field name: Start sends them in FORM's order
    with gr.Row():
        form["minutes"] = gr.Number(PLAN.minutes, label="T (minutes per arm)", minimum=limits["minutes"][0],
                                    maximum=limits["minutes"][1], elem_id="compare-minutes")
        form["n_worked"] = gr.Number(PLAN.n_worked, precision=0, label="Worked problems (W)",
                                     maximum=limits["n_worked"][1])
        form["n_answers"] = gr.Number(PLAN.n_answers, precision=0, label="Answer-only problems (A)",
                                      maximum=limits["n_answers"][1])
        form["n_eval"] = gr.Number(PLAN.n_eval, precision=0, label="Held-out prompts", maximum=limits["n_eval"][1],
                                   elem_id="compare-n-eval")
        form["levels"] = gr.Textbox(PLAN.levels, label="Problem levels", info="e.g. 1-2; empty: all levels")
    source_info = "gsm8k:/path/to/{}.jsonl (a file on the server, GSM8K's format); empty: generated problems"
    with gr.Row():
        form["answers"] = gr.Textbox("", label="Answer-only problems (A) from", info=source_info.format("train"),
                                     elem_id="compare-answers")
        form["eval_data"] = gr.Textbox("", label="Held-out set from", info=source_info.format("test"),
                                       elem_id="compare-eval-data")
    with gr.Accordion("sft-W: when the format is learned", open=False):
        with gr.Row():
            form["round_steps"] = gr.Number(PLAN.round_steps, precision=0, label="SFT steps between format checks",
                                            elem_id="compare-round-steps")
            form["max_rounds"] = gr.Number(PLAN.max_rounds, precision=0, label="At most this many rounds")
            form["format_target"] = gr.Number(PLAN.format_target, label="Sampled format rate target (0-1)",
                                              elem_id="compare-format-target")
    token = gr.Textbox(label="Owner token", type="password", visible=owner_token_required())
    with gr.Row():
        run = gr.Button("Start comparison", variant="primary", elem_id="compare-start")
        stop = gr.Button("Stop comparison")
        resume = gr.Button("Resume comparison", elem_id="compare-resume")
        picker = gr.Dropdown(choices=[], label="Comparison", info="every comparison of this app, newest first",
                             elem_id="compare-picker", scale=2)
    message = gr.Markdown(elem_id="compare-message")  # Stop answers here: the status has one writer, the view
    status = gr.Markdown(elem_id="compare-status")
    # until a result exists: this sentence, not an empty chart and two empty tables
    no_result = gr.Markdown("No result yet: each arm's accuracy (a chart) and the tables by arm and by level show here "
                            "once a comparison finishes.", elem_id="compare-no-result")
    with gr.Column(visible=False, elem_id="compare-result") as result_box:
        chart = gr.BarPlot(None, x="arm", y="accuracy", color=LEGEND, sort=ARM_ORDER, y_lim=[0, 100],
                           y_title="accuracy %", x_title="", title="Greedy accuracy per arm (%)",
                           label="GRPO vs more SFT", elem_id="compare-chart")
        arms = gr.Dataframe(None, label="Arms", interactive=False, elem_id="compare-arms")
        levels_table = gr.Dataframe(None, label="Accuracy by level (%)", interactive=False, elem_id="compare-levels")
        with gr.Column(visible=False) as source_box:  # only when a second held-out source was scored
            sources_table = gr.Dataframe(None, label="Accuracy per held-out source (%, GRPO minus arm in points)",
                                         interactive=False, elem_id="compare-sources")
    log = gr.Textbox(label="Log (tail)", lines=6, max_lines=12, autoscroll=True)
    shown = gr.State(None)
    timer = gr.Timer(POLL_S, active=False)  # ticks while the Evaluate tab is shown (ui.app.poll_the_shown_tab)

    public_api(api_start, api_name="compare_start")
    public_api(api_resume, api_name="compare_resume")
    public_api(api_status, api_name="compare_status")
    ui = dict(api_visibility="private")
    views = [status, log, chart, arms, levels_table, shown, picker, result_box, no_result, sources_table,
             source_box]
    gr.on(None, view, [picker, gr.State(None)], views, **ui)  # on page load: the newest comparison
    gr.on([timer.tick], view, [picker, shown], views, show_progress="hidden", **ui)
    picker.input(view, [picker, gr.State(None)], views, **ui)
    refresh_btn.click(lambda: gr.Dropdown(choices=recipe_choices()), None, recipe, **ui)
    started = run.click(run_start, [recipe, token, *(form[name] for name in FORM)], picker, concurrency_limit=1,
                        concurrency_id="compare", **ui)
    stop.click(run_stop, [picker, token], message, **ui)
    resumed = resume.click(run_resume, [picker, token], picker, concurrency_limit=1, concurrency_id="compare", **ui)
    for going in (started, resumed):  # the status shows it running; a Stop's answer would be stale
        going.success(view, [picker, gr.State(None)], views, **ui)
        going.success(lambda: "", None, message, **ui)
    return {"timer": timer, "recipe": recipe, "minutes": form["minutes"], "run": run, "stop": stop, "resume": resume,
            "picker": picker, "message": message, "status": status, "chart": chart, "arms": arms,
            "levels": levels_table, "sources": sources_table}
