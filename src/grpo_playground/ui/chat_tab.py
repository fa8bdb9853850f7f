"""The chat tab (placeholder until its issue lands)."""

import gradio as gr


def create_chat_tab() -> dict:
    gr.Markdown("Coming soon.")
    return {}
