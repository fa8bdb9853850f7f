"""The Training tab's history screen: every run on disk, and one metric of two runs on one chart."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd

from grpo_playground.jobs.feed import RunFeed
from grpo_playground.jobs.runs import list_runs
from grpo_playground.run_layout import run_path
from grpo_playground.contracts.metrics import HEADLINE_KEYS, GRAD_NORM
from grpo_playground.ui import run_views
from grpo_playground.ui.handlers import handler
from grpo_playground.ui.training_charts import chart_update

COMPARE_CHART = run_views.Chart("Two runs, one metric", [], None)
COMPARE_KEYS = [k for k in HEADLINE_KEYS if k != GRAD_NORM]


@dataclass
class HistoryPart:
    table: gr.Dataframe
    compare_run: gr.Dropdown
    compare_key: gr.Dropdown
    compare_plot: gr.Plot


def build_history() -> HistoryPart:
    gr.Markdown("Every run on disk; click a row to watch it in **2. Live run**.")
    table = gr.Dataframe(run_views.history_table([]), label="Runs", interactive=False, wrap=True, max_height=200,
                         elem_id="training-history")
    with gr.Row():  # the pickers beside the chart: table and chart fit one laptop screen (1280 x 800)
        with gr.Column(scale=1, min_width=220):
            compare_run = gr.Dropdown([], label="Compare with run")
            compare_key = gr.Dropdown(COMPARE_KEYS, value="reward", label="Metric", allow_custom_value=True)
        compare_plot = gr.Plot(label=COMPARE_CHART.title, show_label=False, visible=False, elem_id="training-compare",
                               scale=3)
    return HistoryPart(table, compare_run, compare_key, compare_plot)


def compare_metrics(run_id: str, metrics: list[dict], other_id: str | None, key: str | None) -> dict:
    """The compare chart's update: metric `key` of the watched run (its rows given) and of run `other_id`."""
    if not key:
        return chart_update(None, COMPARE_CHART)
    runs = {run_id: metrics}
    if other_id and other_id != run_id:
        try:
            other = RunFeed(run_path(other_id))
        except (ValueError, FileNotFoundError):
            other = None  # deleted meanwhile: show the selected run alone
        if other is not None:
            other.poll()
            runs[other_id] = other.metrics
    return chart_update(run_views.compare_frame(runs, key, None), COMPARE_CHART)


@dataclass
class TablePick:
    table: pd.DataFrame  # the history table as shown
    evt: gr.SelectData  # the clicked cell (Gradio fills it)


@dataclass
class RunPick:
    run_pick: str | None


@dataclass
class CompareRequest:
    run_pick: str | None  # the watched run
    compare_run: str | None
    compare_key: str | None  # the metric


@handler(RunPick)
def compare_choices(req: RunPick):
    return gr.Dropdown(choices=[i.run_id for i in list_runs() if i.run_id != req.run_pick])


@handler(CompareRequest)
def redraw_compare(req: CompareRequest):
    if not req.run_pick:
        return gr.skip()
    feed = RunFeed(run_path(req.run_pick))
    feed.poll()
    return compare_metrics(req.run_pick, feed.metrics, req.compare_run, req.compare_key)


def wire_history(part: HistoryPart, run_pick: gr.Dropdown, screens: gr.Tabs, live_screen: str) -> None:
    """A click on a run in the table watches it on the live screen (`live_screen`, a tab id of `screens`)."""
    @handler(TablePick)
    def pick_from_history(req: TablePick):
        return req.table.iloc[req.evt.index[0]]["run"], gr.Tabs(selected=live_screen)

    ui = dict(api_visibility="private")
    run_pick.change(compare_choices, run_pick, part.compare_run, **ui)
    part.table.select(pick_from_history, part.table, [run_pick, screens], **ui)
    gr.on([part.compare_run.change, part.compare_key.change], redraw_compare,
          [run_pick, part.compare_run, part.compare_key], part.compare_plot, **ui)
