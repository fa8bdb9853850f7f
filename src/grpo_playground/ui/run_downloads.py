"""Files the page offers for download, linked by their name in the runs folder, never by the server's path.

    offer(paths)          # these files may be downloaded (an export's files, a scale-out zip)
    public_file(data)     # a component's file data as the browser gets it: `<run id>/export/x.gguf`, /download/...
    RunDownloads          # ASGI middleware: serves /download/<name> for offered files only

Gradio serves a file a handler returns at `/gradio_api/file=<its absolute path>`, so an exported GGUF's link told
strangers where the data root lies (issue 38 item 6). Offered files are static paths to Gradio (so it links them
where they are instead of copying gigabytes into its cache); the file data the page gets is then rewritten (in
public_paths.py, where every answer is) to name the file relative to the runs folder and to link it here.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import quote

import gradio as gr
from starlette.responses import FileResponse, PlainTextResponse

from grpo_playground.run_layout import runs_dir

DOWNLOAD_PATH = "/download/"
GRADIO_FILE_ROUTE = "/gradio_api/file="
_OFFERED: dict[str, str] = {}  # public name -> the file's absolute path (this app's offers, kept while it runs)
_NAMES: dict[str, str] = {}  # the reverse


def public_name(path: str) -> str:
    """`<run id>/...` for a file in the runs folder; elsewhere a digest of its folder and its file name."""
    path = os.path.abspath(path)
    for root in {str(runs_dir()), os.path.realpath(runs_dir())}:
        if path.startswith(root + os.sep):
            return path[len(root) + 1:].replace(os.sep, "/")
    return f"{hashlib.sha256(os.path.dirname(path).encode()).hexdigest()[:16]}/{os.path.basename(path)}"


def offer(paths: list[str]) -> None:
    """Let the browser download these files where they are: only these, not the folders around them."""
    fresh = [os.path.abspath(p) for p in paths if os.path.abspath(p) not in _NAMES]
    if fresh:
        gr.set_static_paths(fresh)
        for path in fresh:
            _NAMES[path] = public_name(path)
            _OFFERED[_NAMES[path]] = path


def public_file(data: dict) -> dict:
    """Gradio's file data for an offered file, named and linked by its public name (other files unchanged)."""
    name = _NAMES.get(os.path.abspath(str(data.get("path"))))
    if name is None:
        return data
    url = str(data.get("url") or "")
    root = url[:url.index(GRADIO_FILE_ROUTE)] if GRADIO_FILE_ROUTE in url else ""
    return {**data, "path": name, "url": f"{root}{DOWNLOAD_PATH}{quote(name)}"}


class RunDownloads:
    """Serves GET and HEAD /download/<public name> for files offered this run of the app; 404 for anything else
    under /download/ (a name not offered, a folder, `..`)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(DOWNLOAD_PATH):
            return await self.app(scope, receive, send)
        path = _OFFERED.get(scope["path"][len(DOWNLOAD_PATH):])  # uvicorn hands the path decoded
        if scope["method"] not in ("GET", "HEAD") or path is None or not Path(path).is_file():
            response = PlainTextResponse("Not Found: only the files the page offers for download are served here",
                                         status_code=404)
        else:
            response = FileResponse(path, filename=os.path.basename(path), content_disposition_type="attachment")
        await response(scope, receive, send)
