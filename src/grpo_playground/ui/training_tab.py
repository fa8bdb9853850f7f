"""The Training tab: three screens, each one page high: set up a run (recipe form, Start), watch the live run
(progress, charts, doctor, samples, Stop/Resume/Export), and the history of runs (with a two-run comparison).

Each screen is its own module (training_form, training_run_view, training_history; charts and the sample group
in training_charts and training_samples) that builds its components and returns them named. Jobs are child
processes run by grpo_playground.jobs; this tab only reads their run folders (a gr.Timer polls every 2 s,
reading only what was appended), so a closed browser or a restarted app loses nothing. Per-user values live in
gr.State; the runs directory on disk is the only thing shared by everyone. The API is in training_api.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from grpo_playground.ui.public_paths import public_api
from grpo_playground.ui.sandbox_tab import SandboxInputs
from grpo_playground.ui.training_api import ENDPOINTS
from grpo_playground.ui.training_form import FormPart, build_form_part, wire_form
from grpo_playground.ui.training_history import HistoryPart, build_history, wire_history
from grpo_playground.ui.training_run_view import (LIVE_SCREEN, POLL_S, RunViewPart, build_run_view, started_updates,
                                                   wire_run_view)
from grpo_playground.ui.training_samples import link_to_sandbox as link_samples_to_sandbox

SETUP_SCREEN, HISTORY_SCREEN = "setup", "history"  # tab ids of the screens (the live one: LIVE_SCREEN)


@dataclass
class TrainingTab:
    form: FormPart
    run: RunViewPart
    history: HistoryPart
    screens: gr.Tabs  # setup | live | history: Start and a click in the history open the live screen
    timer: gr.Timer  # refreshes the run view from disk while the tab is shown (ui.app.poll_the_shown_tab)


def create_training_tab() -> TrainingTab:
    with gr.Tabs(selected=SETUP_SCREEN, elem_id="training-screens") as screens:
        with gr.Tab("1. Set up a run", id=SETUP_SCREEN):
            form = build_form_part()
        with gr.Tab("2. Live run", id=LIVE_SCREEN):
            run = build_run_view()
        with gr.Tab("3. History and comparison", id=HISTORY_SCREEN):
            history = build_history()
    timer = gr.Timer(POLL_S)
    # The API first, so its names are the plain ones; the UI's own listeners stay private.
    for fn, name in ENDPOINTS:
        public_api(fn, api_name=name)
    started = [run.run_pick, run.message, run.message_for, screens]
    wire_form(form, started, lambda info: started_updates(run, screens, info))
    wire_run_view(run, history, timer, form.token, screens)
    wire_history(history, run.run_pick, screens, LIVE_SCREEN)
    return TrainingTab(form, run, history, screens, timer)


def link_to_sandbox(training: TrainingTab, sandbox: SandboxInputs, tabs: gr.Tabs) -> None:
    """'Open this group in the Reward sandbox' fills the sandbox's boxes and selects its tab in `tabs`."""
    link_samples_to_sandbox(training.run.samples, training.run.view, sandbox, tabs)
