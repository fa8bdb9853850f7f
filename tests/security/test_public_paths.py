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

from grpo_playground.contracts.layout import ADAPTER_CONFIG, EXPORT_JOB, JOB_FILE, LOG_FILE, METRICS_FILE
from grpo_playground.contracts.process import write_json_atomic
from grpo_playground.owner import OWNER_TOKEN_ENV
from grpo_playground.run_layout import runs_dir, write_status

RUN = "20260101-000000-leak-beef"


@pytest.fixture(scope="module", autouse=True)
def owner_token():
    """A Space with an owner, as the stranger meets it: /resume and /export below are refused. Without a token they
    would start jobs on the fake run, and whether its export record was still the fixture's when the later tests read
    it depended on how fast the resumed job failed (a full run once saw the export's files gone)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv(OWNER_TOKEN_ENV, "the-owner-token-of-this-module")
        yield


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
    from grpo_playground.jobs.eval_results import check_checkpoint

    values = dict(client.predict(api_name="/eval_checkpoints"))
    assert values[f"{RUN}/sft"] == f"{RUN}/sft"
    assert check_checkpoint(f"{RUN}/sft") == str(run / "sft")
    with pytest.raises(ValueError, match="neither a registry model"):
        check_checkpoint(f"{RUN}/../../etc")


def _event_answer(app_url: str, session: str, fn_index: int, data: list) -> str:
    """What the page's event `fn_index` answers a stranger who joins the queue with `data` (its whole stream)."""
    import httpx

    joined = httpx.post(f"{app_url}gradio_api/queue/join", timeout=30, json={
        "data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None})
    joined.raise_for_status()
    answer = []
    with httpx.stream("GET", f"{app_url}gradio_api/queue/data", params={"session_hash": session}, timeout=60) as s:
        for line in s.iter_lines():
            answer.append(line)
            if '"process_completed"' in line:
                return "\n".join(answer)
    return "\n".join(answer)


def _fn_index(demo, name: str) -> int:
    return next(i for i, fn in demo.fns.items() if getattr(fn.fn, "__name__", "") == name)


def _initial(block):
    value = getattr(block, "value", None)
    return None if callable(value) else value


@pytest.fixture
def chat_server(run):
    """A chat server of the run's GGUF in the app's pool (a sleeping process stands in for llama.cpp)."""
    import subprocess

    from grpo_playground.serving import LLAMA_CPP, POOL, ManagedServer

    model = str(run / "export" / "model-q4_k_m.gguf")
    server = ManagedServer(LLAMA_CPP, ["sleep", "60"], 54321, model=model)
    server.process = subprocess.Popen(["sleep", "60"])
    POOL._servers[(LLAMA_CPP, model, None)] = server
    yield server
    POOL._servers.pop((LLAMA_CPP, model, None))
    server.process.kill()
    server.process.wait()


@pytest.mark.parametrize("name", ["tick", "refresh", "current"])
def test_the_pages_own_events_name_no_server_path(app_url, run, chat_server, name):
    # Before: the Training timer showed the run's status and log with the runs folder's path, the Evaluate refresh
    # its jobs' logs, the Chat status each server's model path; any stranger can join the queue with their fn_index.
    import uuid

    import app

    index, session = _fn_index(app.demo, name), uuid.uuid4().hex
    inputs = app.demo.fns[index].inputs
    data = [_initial(block) for block in inputs]
    answer = _event_answer(app_url, session, index, data)  # the timer's first tick lists the runs for the picker
    if name == "tick":  # then a stopped run whose status and log name its folder, as the timer shows them
        folder = runs_dir() / "20260101-000001-leak-tick"
        folder.mkdir(exist_ok=True)
        write_status(folder, state="stopped", stage="sft", step=3, reason=f"stopped; last checkpoint in {folder}/sft")
        (folder / LOG_FILE).write_text(f"saving the adapter to {folder}/sft\n")
        answer += "\n" + _event_answer(app_url, session, index, data)  # the picker's choices now list it
        data[0] = folder.name
        answer += "\n" + _event_answer(app_url, session, index, data)
        assert "last checkpoint in 20260101-000001-leak-tick/sft" in answer  # its status, named relative
    if name == "current":  # the Chat status: the server's model named in the runs folder, and no local port
        assert f"{RUN}/export/model-q4_k_m.gguf" in answer and "54321" not in answer
    assert '"success":true' in answer, answer[-600:]
    for root in {str(runs_dir()), os.path.realpath(runs_dir())}:
        assert root not in answer, f"{name} answered the runs folder's path: {answer[:600]}"


def _downloads(stream: str) -> list[dict]:
    """The files an event's stream offers for download (Gradio's file data)."""
    found = []

    def walk(value):
        if isinstance(value, dict):
            if isinstance(value.get("meta"), dict) and value["meta"].get("_type") == "gradio.FileData":
                found.append(value)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for line in stream.splitlines():
        if line.startswith("data: "):
            walk(json.loads(line[len("data: "):]))
    return found


def test_an_exports_download_names_no_server_path_and_serves_its_bytes(app_url, run):
    # Before: the Training timer offered the exported GGUF at /gradio_api/file=<the runs folder>/<run>/export/...,
    # telling every stranger who opened the run where the data root lies (issue 38 item 6).
    import uuid

    import httpx

    import app

    index, session = _fn_index(app.demo, "tick"), uuid.uuid4().hex
    data = [_initial(block) for block in app.demo.fns[index].inputs]
    answer = _event_answer(app_url, session, index, data)  # the timer's first tick lists the runs for the picker
    data[0] = RUN  # then the run is picked (its files are offered once, by the first tick that shows it)
    answer += "\n" + _event_answer(app_url, session, index, data)
    for root in {str(runs_dir()), os.path.realpath(runs_dir())}:
        assert root not in answer, f"the export's download named the runs folder's path: {answer[:600]}"
    files = _downloads(answer)
    assert [file["path"] for file in files] == [f"{RUN}/export/model-q4_k_m.gguf"]
    got = httpx.get(httpx.URL(app_url).join(files[0]["url"]), timeout=30)
    assert got.status_code == 200 and got.content == b"GGUF"  # the same bytes as the file in the run's folder
    # Only files offered for download are served, by their name in the runs folder: not the run's other files.
    for name in (f"{RUN}/{JOB_FILE}", f"{RUN}/export/result.json", f"{RUN}/export", "etc/passwd"):
        assert httpx.get(f"{app_url}download/{name}", timeout=30).status_code == 404, name


@pytest.mark.slow  # builds a second copy of the page
def test_the_page_config_names_no_server_path_after_a_restart(run):
    # Before: a page built while runs existed (an app restarted on a Space) carried their paths in /config.
    from grpo_playground.ui.app import build_demo

    config = json.dumps(build_demo().get_config_file(), default=str)
    for root in {str(runs_dir()), os.path.realpath(runs_dir())}:
        assert root not in config
