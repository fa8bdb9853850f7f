"""Public API answers name files by their place in the runs folder, never by the server's absolute paths.

Issue 38: 12 of 26 public answers carried the data root (/status's command and export file list, errors, the
evaluation checkpoints...). Every `gr.api` endpoint is registered through `public_api`, which rewrites, in its
answer and in the message of a refusal, each path under the runs folder as `<run id>/...` and each path under the
other data folders as `<folder name>/...`. Values that come back as inputs (an evaluation checkpoint) are
accepted in that form.

The page's own events are a public API too (anyone can join the queue with an event's fn_index), and showed the
same paths in the Training timer's log and status, the Evaluate log, the Chat status (a server's model path) and
the page's /config once runs existed at start-up. `public_events(demo)` rewrites every event's answer and refusal
and the page's config the same way; a file offered for download (an export's GGUF) is named in the runs folder and
linked to /download/<run id>/... (run_downloads.py) instead of Gradio's /gradio_api/file=<absolute path>.
"""

from __future__ import annotations

import functools
import os
import re

import gradio as gr

from grpo_playground.run_layout import exports_dir, runs_dir
from grpo_playground.ui.run_downloads import public_file

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
        if isinstance(value.get("meta"), dict) and value["meta"].get("_type") == "gradio.FileData":
            return public_file(value)  # a file to download: linked by its name, served by RunDownloads
        return {run_relative(key, roots): run_relative(item, roots) for key, item in value.items()}
    return value


def _public_error(exc: gr.Error) -> gr.Error:
    return gr.Error(run_relative(str(exc.message)), duration=exc.duration, visible=exc.visible, title=exc.title,
                    print_exception=exc.print_exception)


def public_api(fn, api_name: str) -> None:
    """gr.api(fn, api_name) whose answers and refusals name no absolute data path."""
    @functools.wraps(fn)  # gradio reads the wrapped signature for the API's parameters
    def endpoint(*args, **kwargs):
        try:
            return run_relative(fn(*args, **kwargs))
        except gr.Error as exc:
            raise _public_error(exc) from None

    gr.api(endpoint, api_name=api_name)


def public_events(demo: gr.Blocks) -> None:
    """Every event's answer (each streamed update too) and refusal, and the page's config, without absolute data
    paths: rewritten where Gradio hands them to the browser, after each handler ran. A field the user edits and an
    event reads back (a data source's path in the Training form) keeps its value: it must reach the server as it
    left it. One the user cannot edit (interactive=False: the run history table) is only shown."""
    read_back = {block._id for fn in demo.fns.values() for block in fn.inputs
                 if getattr(block, "interactive", None) is not False}
    process_api, get_config_file = demo.process_api, demo.get_config_file

    async def public_process_api(block_fn, *args, **kwargs):
        try:
            result = await process_api(block_fn, *args, **kwargs)
        except gr.Error as exc:
            raise _public_error(exc) from None
        fn = demo.fns[block_fn] if isinstance(block_fn, int) else block_fn
        data = result.get("data") if isinstance(result, dict) else None
        if isinstance(data, list):
            roots = _roots()
            result["data"] = [value if block._id in read_back else run_relative(value, roots)
                              for block, value in zip(fn.outputs, data)] + data[len(fn.outputs):]
        return result

    def public_config():
        config = get_config_file()
        roots = _roots()
        for component in config.get("components", []):
            if component.get("id") not in read_back and "props" in component:
                component["props"] = run_relative(component["props"], roots)
        return config

    demo.process_api = public_process_api
    demo.get_config_file = public_config
