"""Issue 38: absolute paths of the data root reached strangers in 12 of 26 public answers. Every public API endpoint is
called here, as a stranger would, about a run whose files name the server's paths, and its answer (or refusal) is
scanned for the runs folder.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/security/test_public_paths.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from grpo_playground.run_layout import (ADAPTER_CONFIG, EXPORT_JOB, JOB_FILE, METRICS_FILE, runs_dir,
                                        write_json_atomic, write_status)

RUN = "20260101-000000-leak-beef"


@pytest.fixture(scope="module")
def run(app_url) -> Path:
    """A stopped run as the app leaves one: its command, its export's files and an adapter name its folder."""
    folder = runs_dir() / RUN
    (folder / "sft").mkdir(parents=True)
    (folder / "sft" / ADAPTER_CONFIG).write_text("{}")
    write_status(folder, state="stopped", stage="all", step=3, reason=f"stopped; last checkpoint in {folder}/sft")
    write_json_atomic(folder / JOB_FILE, {"launcher_pid": None, "stage": "all", "command": [
        sys.executable, "-m", "grpo_playground.cli.train", "--recipe", str(folder / "recipe.yaml")]})
    (folder / METRICS_FILE).write_text(json.dumps({"stage": "sft", "step": 3, "loss": 1.0}) + "\n")
    gguf = folder / "export" / "model-q4_k_m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    write_json_atomic(folder / "export" / "result.json", {"state": "finished", "started": 2,
                                                          "files": {"q4_k_m": str(gguf)}})
    write_json_atomic(folder / EXPORT_JOB, {"state": "done", "started": 1, "result": str(folder / "export" /
                                                                                        "result.json")})
    return folder


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


CALLS = [  # every public endpoint a stranger may call without the token, with the arguments that reach a run
    ("/status", (RUN,)), ("/runs", ()), ("/metrics", (RUN,)), ("/samples", (RUN,)), ("/eval_checkpoints", ()),
    ("/eval_status", ()), ("/eval_results", ()), ("/chat_targets", ()), ("/compare_status", ("")),
    ("/status", ("20990101-000000-none-beef",)), ("/metrics", ("20990101-000000-none-beef",)),
    ("/resume", (RUN, "not-the-token")), ("/export", (RUN, ["q4_k_m"], "not-the-token")),
]


@pytest.mark.parametrize("api_name, args", CALLS, ids=[f"{name}{'-' + args[0] if args else ''}" for name, args in
                                                       CALLS])
def test_public_answers_name_no_server_path(client, run, api_name, args):
    try:
        answer = json.dumps(client.predict(*args, api_name=api_name))
    except Exception as refused:  # a refusal's message reaches the stranger too
        answer = str(refused)
    for root in {str(runs_dir()), os.path.realpath(runs_dir())}:
        assert root not in answer, f"{api_name} answered the runs folder's path: {answer[:400]}"


def test_the_status_names_the_runs_files_relative_to_it(client, run):
    status = client.predict(RUN, api_name="/status")
    assert f"{RUN}/recipe.yaml" in status["command"] and status["export"]["files"] == [
        f"{RUN}/export/model-q4_k_m.gguf"]


def test_a_listed_checkpoint_goes_back_in_as_it_came_out(client, run):
    # The evaluation checkpoints are run-relative now: /eval_start must take them as /eval_checkpoints gives them.
    from grpo_playground.eval.results import check_checkpoint

    values = dict(client.predict(api_name="/eval_checkpoints"))
    assert values[f"{RUN}/sft"] == f"{RUN}/sft"
    assert check_checkpoint(f"{RUN}/sft") == str(run / "sft")
    with pytest.raises(ValueError, match="neither a registry model"):
        check_checkpoint(f"{RUN}/../../etc")
