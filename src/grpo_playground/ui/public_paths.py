"""Public API answers name files by their place in the runs folder, never by the server's absolute paths.

Issue 38: 12 of 26 public answers carried the data root (/status's command and export file list, errors, the
evaluation checkpoints...). Every `gr.api` endpoint is registered through `public_api`, which rewrites, in its
answer and in the message of a refusal, each path under the runs folder as `<run id>/...` and each path under the
other data folders as `<folder name>/...`. Values that come back as inputs (an evaluation checkpoint) are
accepted in that form.
"""

from __future__ import annotations

import functools
import os
import re

import gradio as gr

from grpo_playground.run_layout import exports_dir, runs_dir

DATA_ENVS = {"GRPO_PLAYGROUND_DATA_ROOT": "data", "HF_HOME": "hf-home", "GRPO_PLAYGROUND_CACHE": "cache"}


def _roots() -> list[tuple[str, str]]:
    """(absolute folder, public name) pairs, longest first, as given and with links resolved."""
    named = [(str(runs_dir()), ""), (str(exports_dir()), "exports")]
    named += [(os.path.abspath(os.environ[env]), name) for env, name in DATA_ENVS.items() if os.environ.get(env)]
    pairs = {(path, name) for folder, name in named for path in (folder, os.path.realpath(folder))}
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)


def run_relative(value, roots: list[tuple[str, str]] | None = None):
    """`value` (text, or lists and dicts of them) with the data folders' absolute paths made relative."""
    roots = _roots() if roots is None else roots
    if isinstance(value, str):
        for folder, name in roots:
            if folder in value:
                value = value.replace(folder + os.sep, f"{name}/" if name else "")
                value = re.sub(re.escape(folder) + r"(?![\w.-])", name or "the runs folder", value)  # not /runs2
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(run_relative(item, roots) for item in value)
    if isinstance(value, dict):
        return {run_relative(key, roots): run_relative(item, roots) for key, item in value.items()}
    return value


def public_api(fn, api_name: str) -> None:
    """gr.api(fn, api_name) whose answers and refusals name no absolute data path."""
    @functools.wraps(fn)  # gradio reads the wrapped signature for the API's parameters
    def endpoint(*args, **kwargs):
        try:
            return run_relative(fn(*args, **kwargs))
        except gr.Error as exc:
            raise gr.Error(run_relative(str(exc.message)), duration=exc.duration, visible=exc.visible,
                           title=exc.title, print_exception=exc.print_exception) from None

    gr.api(endpoint, api_name=api_name)
