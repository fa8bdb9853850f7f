"""Assembles the tabs into one Blocks app."""

from __future__ import annotations

import os
import signal

import gradio as gr

from grpo_playground.ui import chat_tab, compare_panel, eval_panel, sandbox_tab, training_tab
from grpo_playground.ui.public_limits import DELETE_CACHE, configure_queue, launch_settings

TITLE = "GRPO Playground"
# Page-wide style, injected with the page (Blocks(css=) moved to launch() in gradio 6, which tests do not call):
# table headers of reward names stay on one line (they wrapped one letter a line beside long completions).
STYLE = """<style>
#training-samples th *, #training-findings th *, #eval-table th *, #chat-scores th { white-space: nowrap !important; }
</style>"""


def build_demo() -> gr.Blocks:
    with gr.Blocks(title=TITLE, delete_cache=DELETE_CACHE) as demo:
        gr.Markdown(f"# {TITLE}\nSFT teaches the format, GRPO teaches correctness: see why a reward moves or stays flat.")
        gr.HTML("", head=STYLE, padding=False)
        with gr.Tabs() as tabs:
            with gr.Tab("Training", id="training"):
                training = training_tab.create_training_tab()
            with gr.Tab("Reward sandbox", id="sandbox"):
                sandbox = sandbox_tab.create_sandbox_tab()
            with gr.Tab("Chat", id="chat"):
                chat_tab.create_chat_tab()
            with gr.Tab("Evaluate", id="evaluate"):
                eval_panel.create_eval_panel()
                compare_panel.create_compare_panel()
        training_tab.link_to_sandbox(training, sandbox, tabs)
    configure_queue(demo)
    return demo


def launch(demo: gr.Blocks, **kwargs) -> None:
    """Serve the app; SIGTERM (docker stop, a Space restart) exits through atexit, so the chat servers the
    app started are stopped with it instead of holding their ports and memory as orphans."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        **launch_settings(),
        **kwargs,
    )


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)
