"""The Training tab (placeholder until its issue lands)."""

import gradio as gr


def create_training_tab() -> dict:
    gr.Markdown("Coming soon.")
    return {}


def link_to_sandbox(training: dict, sandbox: dict) -> None:
    """Wire 'open this sample group in the Reward sandbox' once both tabs exist."""
