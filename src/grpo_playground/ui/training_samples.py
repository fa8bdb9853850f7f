"""The latest sample group of a run, and the button that opens it in the Reward sandbox."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from grpo_playground.run_layout import run_path
from grpo_playground.config import load_recipe
from grpo_playground.contracts.layout import RECIPE_FILE
from grpo_playground.rewards import one_group_scale
from grpo_playground.ui import run_views
from grpo_playground.ui.handlers import handler
from grpo_playground.ui.run_summary import ViewRequest
from grpo_playground.ui.sandbox_input import join_group
from grpo_playground.ui.sandbox_tab import KNOB_NAMES, SandboxInputs

# The table scrolls inside its own box: a 2,000-character completion no longer stretches the page (a cell shows its
# start and its end: run_views.completion_cell).
TABLE_HEIGHT = 320


@dataclass
class SamplesPart:
    caption: gr.Markdown
    table: gr.Dataframe
    to_sandbox: gr.Button


def build_samples() -> SamplesPart:
    gr.Markdown("### Latest sample group")
    caption = gr.Markdown()
    table = gr.Dataframe(run_views.sample_table(None), label="Completions with each reward's score, total and advantage",
                         wrap=True, interactive=False, max_height=TABLE_HEIGHT,
                         max_chars=run_views.SAMPLE_CELL_CHARS,
                         elem_id="training-samples")
    # enabled by the tick once the run has a sample group
    to_sandbox = gr.Button("Open this group in the Reward sandbox", interactive=False, elem_id="training-to-sandbox")
    return SamplesPart(caption, table, to_sandbox)


def latest_group(view: dict | None) -> dict | None:
    feed = (view or {}).get("feed")
    return feed.samples[-1] if feed and feed.samples else None


def sandbox_settings(run_id: str | None) -> dict | None:
    """The run's own rewards, weights, tags and advantage scaling, so the sandbox scores a sample group the way
    GRPO did (not with the sandbox's defaults). None when the run's recipe cannot be read."""
    if not run_id:
        return None
    try:
        cfg = load_recipe(run_path(run_id) / RECIPE_FILE)
    except (OSError, ValueError):  # an unreadable or hand-broken recipe: keep the sandbox's settings
        return None
    return {"weights": dict(cfg.rewards.weights), "tags": cfg.rewards.tags.to_dict(),
            "scale": one_group_scale(cfg.grpo.scale_rewards), "max_completion_length": cfg.grpo.max_completion_length,
            **{name: getattr(cfg.rewards, name) for name in KNOB_NAMES if name != "max_completion_length"}}


def link_to_sandbox(samples: SamplesPart, view: gr.State, sandbox: SandboxInputs, tabs: gr.Tabs) -> None:
    """'Open this group in the Reward sandbox': the latest sample group's completions (sandbox_input.join_group)
    and answer go to the sandbox's boxes, with the run's rewards, weights, tags and scaling,
    and the sandbox tab (id "sandbox" of `tabs`) is selected."""
    @handler(ViewRequest)
    def open_group(req: ViewRequest) -> dict:
        view_value = req.view
        group = latest_group(view_value)
        if group is None:
            raise ValueError("no sample group yet: GRPO writes one at each logging step")
        out = {sandbox.completions: join_group([str(c) for c in group.get("completions") or []]),
               sandbox.answer: str(group.get("answer", "")), tabs: gr.Tabs(selected="sandbox")}
        settings = sandbox_settings((view_value or {}).get("run_id"))
        if settings is not None:
            weights = settings["weights"]
            out[sandbox.enabled] = list(weights)
            out.update({box: weights[name] for name, box in sandbox.weights.items() if name in weights})
            out.update({box: settings["tags"][field] for field, box in sandbox.tags.items() if field in settings["tags"]})
            out[sandbox.scale] = settings["scale"]
            out.update({box: settings[name] for name, box in sandbox.knobs.items()})
        return out

    outputs = [sandbox.completions, sandbox.answer, sandbox.enabled, *sandbox.weights.values(),
               *sandbox.tags.values(), sandbox.scale, *sandbox.knobs.values(), tabs]
    # then to the top of the page: the sandbox kept the Training tab's scroll and opened mid-page, its group summary
    # above the viewport
    samples.to_sandbox.click(open_group, view, outputs, api_visibility="private").then(
        None, js="() => window.scrollTo({top: 0})", api_visibility="private")
