"""The Training tab's charts: one Vega-Lite spec per chart, drawn by gr.Plot.

gr.LinePlot (gradio 6.31) cannot be told that steps are whole numbers: with a few logged steps its axis read
1.0, 1.2, 1.4, ... Here the x axis is `step` with a minimum tick step of 1, and the step-time chart is a bar
per step stacked by phase (the phases add up to the step; a line per phase hid that). Specs are handed to
gradio as its own altair plot payload (`AltairPlotData`), so gradio themes them like its native plots
(light and dark) and no plotting library is needed.
"""

from __future__ import annotations

import json

import gradio as gr
import pandas as pd
from gradio.components.plot import AltairPlotData

from grpo_playground.ui import run_views

CHART_HEIGHT = 200  # px: two rows of charts beside the doctor fit a 1280x800 screen
# gradio replaces each color with its theme's palette by position; the list only needs to be long enough
PALETTE = ["#1f77b4"] * 12
MAX_STEP_LABELS = 8  # x labels a ~370 px chart holds side by side: more ran together ("152229364350")
NICE_STRIDES = (1, 2, 5)  # tick strides are these times a power of ten: 1, 2, 5, 10, 20, 50, ...
# svg (vega-embed draws on a canvas by default): crisp text, and its marks can be found in the page
EMBED = {"embedOptions": {"renderer": "svg", "actions": False}}
FRAME = {"height": CHART_HEIGHT, "background": "transparent", "usermeta": EMBED}  # the page's theme shows through


LEGEND_PAIR_CHARS = 24  # longer labels get a legend line each: two to a line, the second was cut at the edge


def _color(title: str, labels: list[str]) -> dict:
    columns = 2 if max(map(len, labels), default=0) <= LEGEND_PAIR_CHARS else 1
    return {"field": "series", "type": "nominal", "title": title, "scale": {"range": PALETTE},
            "legend": {"orient": "bottom", "direction": "horizontal", "columns": columns, "labelLimit": 0}}


def _stride(span: int) -> int:
    """The smallest nice stride that labels a span of `span` steps with at most MAX_STEP_LABELS ticks."""
    scale = 1
    while True:
        for base in NICE_STRIDES:
            if span // (base * scale) + 1 <= MAX_STEP_LABELS:
                return base * scale
        scale *= 10


def step_ticks(steps) -> list[int]:
    """The x ticks of a line chart: whole steps at a nice stride inside the logged range, each labelled once (vega's
    own ticks over steps 1-2 were 1, 1.5, 2, printed "1 2 2")."""
    low, high = int(min(steps)), int(max(steps))
    stride = _stride(high - low)
    first = -(-low // stride) * stride  # the first multiple of the stride in range
    return list(range(first, high + 1, stride)) or [low]


def bar_ticks(steps) -> list[int]:
    """The labelled bars of a bar-per-step chart: at most MAX_STEP_LABELS, evenly spread, the first included
    (SFT's 24 bars labelled every one of them)."""
    logged = sorted({int(s) for s in steps})
    every = -(-len(logged) // MAX_STEP_LABELS)
    return logged[::every]


def _step_axis(steps) -> dict:
    return {"field": "step", "type": "quantitative", "title": "step", "scale": {"zero": False},
            "axis": {"values": step_ticks(steps), "format": "d"}}


def line_spec(frame: pd.DataFrame, title: str) -> dict:
    """One line per series over whole steps, a point on each logged step (a single step still shows)."""
    return {**FRAME, "title": title, "data": {"values": frame.to_dict("records")},
            "layer": [{"mark": {"type": "line", "tooltip": True, "point": {"filled": True, "strokeOpacity": 0}},
                       "encoding": {"x": _step_axis(frame["step"]),
                                    "y": {"field": "value", "type": "quantitative", "title": None,
                                          "scale": {"zero": False}},
                                    "color": _color("", list(frame["series"].unique()))}}]}


def stacked_bar_spec(frame: pd.DataFrame, title: str) -> dict:
    """A bar per step whose parts are the series (the step's phases), stacked in the order given."""
    order = list(dict.fromkeys(frame["series"]))
    records = [{**row, "order": order.index(row["series"])} for row in frame.to_dict("records")]
    # ordinal steps: one bar per logged step, a few of them labelled by their number
    x = {"field": "step", "type": "ordinal", "title": "step",
         "axis": {"values": bar_ticks(frame["step"]), "labelAngle": 0}}
    return {**FRAME, "title": title, "data": {"values": records},
            "mark": {"type": "bar", "tooltip": True},
            "encoding": {"x": x, "y": {"field": "value", "type": "quantitative", "title": "seconds", "stack": "zero"},
                         "color": {**_color("", order), "sort": order},
                         "order": {"field": "order", "type": "quantitative"}}}


def plot_data(frame: pd.DataFrame, chart: run_views.Chart) -> AltairPlotData:
    spec = stacked_bar_spec(frame, chart.title) if chart.kind == "stacked_bar" else line_spec(frame, chart.title)
    return AltairPlotData(plot=json.dumps(spec), chart="bar" if chart.kind == "stacked_bar" else "line")


def chart_update(frame: pd.DataFrame | None, chart: run_views.Chart) -> dict:
    """A chart with no points yet is hidden (not an empty, untitled box)."""
    if frame is None or not len(frame):
        return gr.update(value=None, visible=False)
    return gr.update(value=plot_data(frame, chart), visible=True)


def chart_updates(metrics: list[dict], shown: str | None = None) -> list[dict]:
    """Every chart of run_views.CHARTS, in order, from a run's metric rows; the per-stage charts show stage
    `shown` (None: the stage logged last), named in their title."""
    stage = shown or run_views.current_stage(metrics)
    return [chart_update(frame, chart._replace(title=f"{chart.title}: {stage}")
                         if chart.stage == run_views.CURRENT_STAGE else chart)
            for frame, chart in zip(run_views.chart_frames(metrics, shown), run_views.CHARTS)]


def build_charts(per_row: int = 2) -> list[gr.Plot]:
    """The charts of run_views.CHARTS, `per_row` to a row, hidden until their first point."""
    plots = []
    for start in range(0, len(run_views.CHARTS), per_row):
        with gr.Row():
            for chart in run_views.CHARTS[start : start + per_row]:
                plots.append(gr.Plot(label=chart.title, show_label=False, elem_id=f"training-plot-{len(plots)}",
                                     visible=False, min_width=240))
    return plots
