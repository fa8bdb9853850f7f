"""The Evaluate tab's chart and verdict, from the saved results (torch-free, pure over result summaries).

The chart groups bars by metric ("accuracy", "format rate", ...), one bar per checkpoint with its 95% interval,
as a Vega-Lite spec drawn by gr.Plot like the Training tab's charts. The verdict puts a run's GRPO and SFT results
side by side in one sentence: the accuracy difference in points and whether it lies within the noise of n problems.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gradio.components.plot import AltairPlotData

from grpo_playground.jobs import eval_results as store
from grpo_playground.ui.training_charts import EMBED, PALETTE

METRIC_LABELS = {"accuracy": "accuracy", "lenient_accuracy": "lenient accuracy (last number)",
                 "format_rate": "format rate", "recheck_rate": "re-checks its work"}
Z95 = 1.96  # a 95% interval: the bars' whiskers and the verdict's noise band


def _rate_se(result: dict, metric: str) -> float:
    """The standard error of a rate over the result's n problems (the eval's own one for accuracy)."""
    if metric == "accuracy" and isinstance(result.get("accuracy_se"), (int, float)):
        return float(result["accuracy_se"])
    p, n = float(result[metric]), max(1, int(result.get("n") or 1))
    return math.sqrt(p * (1 - p) / n)


def chart_records(results: list[dict]) -> list[dict]:
    """One record per (metric, checkpoint) of the newest result per checkpoint, in percent, with its interval."""
    records = []
    for metric in store.CHART_METRICS:
        for number, result in enumerate(results, start=1):
            value, half = 100 * float(result[metric]), 100 * Z95 * _rate_se(result, metric)
            records.append({"metric": METRIC_LABELS.get(metric, metric),
                            "checkpoint": f"{number}: {store.checkpoint_label(result['model'])}",
                            "value": round(value, 1), "low": round(max(0.0, value - half), 1),
                            "high": round(min(100.0, value + half), 1), "n": result.get("n")})
    return records


def chart_spec(results: list[dict]) -> dict:
    order = [METRIC_LABELS.get(m, m) for m in store.CHART_METRICS]
    x = {"field": "metric", "type": "nominal", "title": None, "sort": order,
         "axis": {"labelAngle": 0, "labelLimit": 0}}
    offset = {"field": "checkpoint", "type": "nominal"}
    color = {"field": "checkpoint", "type": "nominal", "title": "checkpoint", "scale": {"range": PALETTE},
             "legend": {"orient": "bottom", "direction": "vertical", "labelLimit": 0}}
    percent = {"type": "quantitative", "title": "% of problems", "scale": {"domain": [0, 100]}}
    return {"height": 220, "background": "transparent", "usermeta": EMBED,
            "title": "Newest result per checkpoint (whiskers: 95% interval)",
            "data": {"values": chart_records(results)},
            "encoding": {"x": x, "xOffset": offset, "color": color},
            "layer": [{"mark": {"type": "bar", "tooltip": True}, "encoding": {"y": {"field": "value", **percent}}},
                      {"mark": {"type": "rule"}, "encoding": {"y": {"field": "low", **percent}, "y2": {"field": "high"},
                                                              "color": {"value": "#555"}}}]}


def chart_plot(results: list[dict]) -> AltairPlotData:
    return AltairPlotData(plot=json.dumps(chart_spec(results)), chart="bar")


def verdict(results: list[dict]) -> str:
    """For each run with both an SFT and a GRPO result (newest of each): 'GRPO vs SFT: -2.0 points, within noise'."""
    by_run: dict[Path, dict[str, dict]] = {}
    for result in results:
        path = Path(result["model"])
        if path.is_absolute():
            by_run.setdefault(path.parent, {})[path.name] = result
    lines = []
    for run, stages in by_run.items():
        if "sft" in stages and "grpo" in stages:
            grpo, sft = stages["grpo"], stages["sft"]
            diff = 100 * (float(grpo["accuracy"]) - float(sft["accuracy"]))
            noise = 100 * Z95 * math.hypot(_rate_se(grpo, "accuracy"), _rate_se(sft, "accuracy"))
            within = "within noise" if abs(diff) <= noise else ("a real gain" if diff > 0 else "a real loss")
            lines.append(f"**{run.name}**: GRPO vs SFT: {diff:+.1f} points of accuracy, {within} "
                         f"(95% band ±{noise:.1f} points on n={grpo.get('n')} and {sft.get('n')} problems; "
                         f"{100 * float(grpo['accuracy']):.1f}% vs {100 * float(sft['accuracy']):.1f}%)")
    return "\n\n".join(lines)
