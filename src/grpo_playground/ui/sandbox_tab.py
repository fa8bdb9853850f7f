"""The sandbox tab (placeholder until its issue lands)."""

import gradio as gr


def create_sandbox_tab() -> dict:
    gr.Markdown("Coming soon.")
    return {}
