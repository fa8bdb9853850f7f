"""Assembles the tabs into one Blocks app."""

from __future__ import annotations

import os

import gradio as gr

from grpo_playground.ui import chat_tab, eval_panel, sandbox_tab, training_tab

TITLE = "GRPO Playground"


def build_demo() -> gr.Blocks:
    with gr.Blocks(title=TITLE) as demo:
        gr.Markdown(f"# {TITLE}\nSFT teaches the format, GRPO teaches correctness: see why a reward moves or stays flat.")
        with gr.Tabs():
            with gr.Tab("Training", id="training"):
                training = training_tab.create_training_tab()
            with gr.Tab("Reward sandbox", id="sandbox"):
                sandbox = sandbox_tab.create_sandbox_tab()
            with gr.Tab("Chat", id="chat"):
                chat_tab.create_chat_tab()
            with gr.Tab("Evaluate", id="evaluate"):
                eval_panel.create_eval_panel()
        training_tab.link_to_sandbox(training, sandbox)
    demo.queue(max_size=64, default_concurrency_limit=4)
    return demo


def launch(demo: gr.Blocks, **kwargs) -> None:
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        **kwargs,
    )
