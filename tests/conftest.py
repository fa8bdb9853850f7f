"""Shared fixtures. Tests run offline, single-threaded (2 shared cores: more threads made steps 50-300x slower)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("SWANLAB_MODE", "disabled")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    """The real app, launched once per test session on a free port, with its runs in a temp folder."""
    os.environ["GRPO_PLAYGROUND_RUNS_DIR"] = str(tmp_path_factory.mktemp("runs"))
    import app
    from grpo_playground.ui.public_limits import serve

    port = free_port()
    serve(app.demo, server_name="127.0.0.1", server_port=port, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    app.demo.close()
    kill_leftover_jobs()


def kill_leftover_jobs() -> None:
    """Jobs outlive the app by design; a test that failed half-way must not leave one training on shared cores."""
    from grpo_playground.jobs import ACTIVE_STATES, kill_group, list_runs

    for info in list_runs():
        if info.state in ACTIVE_STATES and info.job.get("pid"):
            kill_group(info.job["pid"])
