"""What a finished run says, and where to go next: its time, where its reward ended, how often it wrote the
format, its accuracy if it was evaluated (a summary card), and the buttons Export / Chat with it / Evaluate it.

The card is computed from the run folder and the saved evaluations (pure reads, no torch). The buttons reach into
the Chat and Evaluate tabs, so `link_next_steps` is wired by the app once every tab exists.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from statistics import mean, variance

import gradio as gr

from grpo_playground.jobs.runs import RunInfo, load_run, reconcile
from grpo_playground.run_layout import run_path
from grpo_playground.config import load_recipe
from grpo_playground.jobs import eval_results as store
from grpo_playground.rewards.group import explain_extraction
from grpo_playground.config.run_settings import run_settings
from grpo_playground.contracts.layout import RECIPE_FILE
from grpo_playground.contracts.states import TRAINED_STAGES
from grpo_playground.run_layout import latest_stage, stage_done
from grpo_playground.step_timing import clock
from grpo_playground.tags import DEFAULT_TAGS
from grpo_playground.ui.handlers import handler


def _format_rate(sample: dict | None, run_dir: Path) -> str:
    """The share of the last sampled group in the run's strict format (its own tags)."""
    completions = [str(c) for c in (sample or {}).get("completions") or []]
    if not completions:
        return ""
    try:
        settings = run_settings(run_dir)
    except (OSError, ValueError):
        settings = None
    tags = settings.tags if settings else DEFAULT_TAGS
    in_format = sum(explain_extraction(c, tags)[0] is not None for c in completions)
    return f"{in_format}/{len(completions)} of the last sampled group in the format"


def _accuracy(run_dir: Path, results: list[dict]) -> list[str]:
    """The newest saved evaluation of each of the run's stages."""
    lines = []
    for result in store.latest_per_checkpoint(results):
        model = Path(result["model"])
        if model.is_absolute() and model.parent == run_dir.resolve():
            lines.append(f"{model.name} accuracy **{100 * float(result['accuracy']):.1f}%** "
                         f"(format {100 * float(result['format_rate']):.1f}%, {result['data']}, n={result['n']})")
    return lines


def reward_change(rewards: list[float]) -> str:
    """GRPO's reward over the run with its uncertainty: the mean of the first third of the steps against the last
    third, with the standard error of that difference. A change under two standard errors is called no change: one
    step's reward jumps with its few sampled groups, and first -> last step ("5.62 -> 5.06") read noise as a trend."""
    third = len(rewards) // 3
    if third < 2:
        return f"GRPO reward {rewards[0]:.2f} -> **{rewards[-1]:.2f}** ({len(rewards)} steps: too few to tell a trend)"
    first, last = rewards[:third], rewards[-third:]
    change = mean(last) - mean(first)
    error = math.sqrt(variance(first) / len(first) + variance(last) / len(last))
    words = "rose" if change > 2 * error else "fell" if change < -2 * error else "did not move"
    return (f"GRPO reward {words}: {mean(first):.2f} -> **{mean(last):.2f}** (mean of the first vs the last third of "
            f"{len(rewards)} steps: {change:+.2f} ± {error:.2f}{', within noise' if words == 'did not move' else ''})")


def summary_markdown(info: RunInfo, metrics: list[dict], sample: dict | None, preflight: dict | None,
                     results: list[dict]) -> str:
    """The card of a finished run, two short lines beside its next-step buttons ('' for any other state: the
    progress line says where it is)."""
    if info.state != "finished":
        return ""
    stage_seconds = {s: v for s, v in (info.status.get("stage_seconds") or {}).items() if isinstance(v, (int, float))}
    head = "**Finished**"
    if stage_seconds:
        head += f" in {clock(sum(stage_seconds.values()))} (" + \
            ", ".join(f"{s} {clock(v)}" for s, v in stage_seconds.items()) + ")"
    elif info.status.get("started") and info.status.get("updated"):
        head += f" in {clock(float(info.status['updated']) - float(info.status['started']))}"
    facts = []
    rewards = [m["reward"] for m in metrics if m.get("stage") == "grpo" and isinstance(m.get("reward"), (int, float))]
    if rewards:
        facts.append(reward_change(rewards))
    rate = _format_rate(sample, info.path)
    if rate:
        facts.append(rate)
    if preflight and isinstance(preflight.get("format_rate"), (int, float)):
        facts.append(f"{100 * preflight['format_rate']:.0f}% in the format at the pre-flight")
    accuracy = _accuracy(info.path, results)
    facts += accuracy or ["accuracy: not evaluated yet"]
    return head + " · " + " · ".join(facts[:2]) + ("  \n" + " · ".join(facts[2:]) if facts[2:] else "")


def chat_choice(run_id: str, targets: list) -> str | None:
    """The key of the run's first chat target among `targets` (ChatTargets; a GGUF of its export is listed first),
    None when none. Matched on the files' paths: the keys are digests that name no path."""
    folder = f"{os.sep}{run_id}{os.sep}"  # run ids are unique folder names
    return next((t.key for t in targets if folder in f"{t.model}{os.sep}" or folder in f"{t.lora or ''}{os.sep}"),
                None)


def eval_preset(run_id: str) -> tuple[list[str], str | None]:
    """What 'Evaluate it' picks: the run's base model (where this machine can evaluate it: the comparison's
    baseline) and its trained stages as Evaluate tab values (`<run id>/<stage>`, as store.list_checkpoints gives),
    and the data the run is judged on (its recipe's eval_source; None when the recipe cannot be read)."""
    run = run_path(run_id)
    stages = [f"{run_id}/{s}" for s in TRAINED_STAGES if stage_done(run, s)]
    try:
        config = load_recipe(run / RECIPE_FILE)
    except (OSError, ValueError):  # a hand-broken recipe: the stages alone, on the tab's data
        return stages, None
    base = config.model.name_or_path
    listed = {value for _, value in store.list_checkpoints()}
    return ([base] if base in listed else []) + stages, config.data.eval_source


@dataclass
class ViewRequest:
    """A button of the live run: the view's state (its "run_id", its feed of metrics and sample groups)."""
    view: dict | None


def link_next_steps(buttons: list[gr.Button], shown_run: gr.State, tabs: gr.Tabs, chat_picker: gr.Dropdown,
                    eval_picker: gr.Dropdown, eval_data: gr.Textbox, message: gr.Markdown,
                    message_for: gr.State) -> None:
    """'Chat with it' buttons (several: the summary's, the export panel's) open the Chat tab with the run's model
    picked; the last of `buttons` is 'Evaluate it', which opens the Evaluate tab with the run's base model and
    stages picked and its own held-out data in `eval_data` (eval_preset).
    `shown_run` is the live view's state (its "run_id"). Where they cannot, they say why in the run message, and
    mark it as written for the run's present state (message_for), so the tick keeps it until that state moves on."""
    from grpo_playground.ui.chat_tab import runnable_targets, target_choices

    def say(run_id, text):
        try:  # the state the tick compares with (it reconciles too)
            state = reconcile(load_run(run_path(run_id))).state
        except (FileNotFoundError, ValueError):  # deleted since the card was drawn
            state = None
        return {message: text, message_for: [run_id, state]}

    @handler(ViewRequest)
    def chat_with(req: ViewRequest) -> dict:
        run_id = (req.view or {}).get("run_id")
        choices = target_choices()
        key = chat_choice(run_id, runnable_targets()) if run_id else None
        if key is None:
            return say(run_id, f"**{run_id}** has nothing to chat with yet: export it to GGUF first (llama.cpp "
                               "chats with GGUF files; a GPU with vLLM chats with the LoRA folder).")
        return {chat_picker: gr.Dropdown(choices=choices, value=key), tabs: gr.Tabs(selected="chat")}

    @handler(ViewRequest)
    def evaluate(req: ViewRequest) -> dict:
        run_id = (req.view or {}).get("run_id")
        if not run_id or latest_stage(run_path(run_id)) is None:
            return say(run_id, f"**{run_id}** has no trained stage to evaluate yet.")
        picked, data = eval_preset(run_id)
        return {eval_picker: gr.Dropdown(choices=store.list_checkpoints(), value=picked),
                eval_data: data if data else gr.skip(), tabs: gr.Tabs(selected="evaluate")}

    ui = dict(api_visibility="private")
    *chat_buttons, eval_button = buttons
    for button in chat_buttons:
        button.click(chat_with, shown_run, [chat_picker, tabs, message, message_for], **ui)
    eval_button.click(evaluate, shown_run, [eval_picker, eval_data, tabs, message, message_for], **ui)
