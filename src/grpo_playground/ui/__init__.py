"""Gradio UI: one module per tab, each exposing create_<name>_tab(...) -> dict of components."""
