"""What a stranger can send a public app before or without the owner token: each test is a hole of issue 12.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/security/test_owner_and_input_bounds.py
"""

from __future__ import annotations

import math
import uuid
import signal
import time

import gradio as gr
import httpx
import pytest

from grpo_playground.config import ConfigError, RunConfig
from grpo_playground.config.recipe_io import config_from_dict, safe_yaml
from grpo_playground.owner import OWNER_TOKEN_ENV
from grpo_playground.rewards import custom

OWNER = "the-owners-secret"
GROUP = "<SOLUTION>42</SOLUTION>\n---\n<SOLUTION>41</SOLUTION>"
CODE = "def reward(completions, answer, **kwargs):\n    return [7.0] * len(completions)\n"
# 9 aliases of 9 aliases ... 6 levels: 300 bytes that a plain yaml.safe_load turns into 531,441 values
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(6))


@pytest.fixture
def owner(monkeypatch):
    monkeypatch.setenv(OWNER_TOKEN_ENV, OWNER)
    monkeypatch.setenv(custom.ENABLE_ENV, "1")


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


def test_score_api_runs_custom_code_only_with_the_owner_token(owner, client):
    # Before: /score with custom_code ran the code for anyone.
    with pytest.raises(Exception, match="running custom reward code needs the owner token"):
        client.predict(GROUP, "42", custom_code=CODE, owner_token="guess", api_name="/score")
    table = client.predict(GROUP, "42", custom_code=CODE, owner_token=OWNER, api_name="/score")
    assert [row[table["headers"].index("custom")] for row in table["data"]] == [7.0, 7.0]


def test_score_api_without_custom_code_stays_open_to_visitors(owner, client):
    assert len(client.predict(GROUP, "42", api_name="/score")["data"]) == 2


def test_scaling_out_a_run_needs_the_owner_token(owner, tmp_path, monkeypatch):
    """It writes files on the server (a folder and a zip per run): the token is checked before the run is read."""
    from grpo_playground.ui.training_api import api_scale_out

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    for guess in ("", "guess"):
        with pytest.raises(gr.Error, match="needs the owner token"):
            api_scale_out("20260101-000000-anyrun-beef", guess)
    assert not list(tmp_path.iterdir())


def test_start_checks_the_token_before_reading_the_recipe(owner):
    from grpo_playground.ui.training_api import api_start

    # Before: the YAML was parsed first and the whole expanded value echoed in the error (2.4 GB).
    start = time.monotonic()
    with pytest.raises(gr.Error) as caught:
        api_start(BOMB, "all", "guess")
    assert "needs the owner token" in str(caught.value) and len(str(caught.value)) < 300
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("text, expected", [
    (BOMB, "more than 20,000 values once aliases are expanded"),
    ("[" * 5000 + "]" * 5000, "nesting deeper than 16 levels"),
    ("&a [*a]", "refers to its own parent"),
    ("x" * 300_000, "larger than 256 KiB"),
], ids=["alias-bomb", "deep-nesting", "recursive-alias", "oversized"])
def test_yaml_is_bounded_before_anything_is_built(text, expected):
    start = time.monotonic()
    with pytest.raises(ConfigError, match=expected):
        safe_yaml(text)
    assert time.monotonic() - start < 2.0  # milliseconds here; before, the bomb's value was built and printed


def test_errors_never_echo_a_whole_value():
    with pytest.raises(ConfigError) as caught:
        config_from_dict(safe_yaml("bogus: [" + ", ".join(["123456789"] * 5000) + "]"))
    assert len(str(caught.value)) < 400
    with pytest.raises(ConfigError) as caught:
        safe_yaml("grpo: {learning_rate: [" + "y" * 100_000 + "}")
    assert len(str(caught.value)) < 600


@pytest.mark.parametrize("recipe, field", [
    ("grpo: {learning_rate: .nan}", "grpo.learning_rate"),
    ("grpo: {learning_rate: -.inf}", "grpo.learning_rate"),
    ("sft: {learning_rate: 1e999}", "sft.learning_rate"),
    ("rewards: {weights: {check_answer: .nan}}", "rewards.weights.check_answer"),
    ("model: {gpu_memory_utilization: .nan}", "model.gpu_memory_utilization"),
])
def test_recipes_refuse_nan_and_infinity(recipe, field):
    # Before: `learning_rate: .nan` passed every range check (NaN compares False) and failed later in training.
    with pytest.raises(ConfigError, match=f"{field}.*finite number"):
        config_from_dict(safe_yaml(recipe))


def test_a_config_built_in_code_refuses_nan_too():
    config = RunConfig()
    config.grpo.learning_rate = math.nan
    with pytest.raises(ConfigError, match="grpo.learning_rate.*finite"):
        config.validate()


def test_restarting_chat_servers_needs_the_owner_token(owner):
    # Before: anyone could stop and restart the llama.cpp servers (400 MB loads) over and over.
    from grpo_playground.ui.chat_tab import restart_backends

    with pytest.raises(gr.Error, match="restarting the chat servers needs the owner token"):
        restart_backends("", "", "", "guess")
    assert "Stopped the chosen checkpoints' servers" in restart_backends("", "", "", OWNER)


def test_chat_servers_start_only_for_listed_checkpoints():
    # Held: a key naming any other file (here a file that is not a model at all) starts nothing.
    from grpo_playground.ui.chat_tab import chat

    with pytest.raises(gr.Error, match="Unknown checkpoint"):
        next(chat("hi", "", "llama.cpp|/etc/passwd|", "", "", 0.8, 0.95, 16, "", [], None))


def test_uploads_are_capped_by_the_server(monkeypatch):
    # Before: a 50 MB upload was accepted from anyone. The cap applies while receiving, before any handler.
    from grpo_playground.child_process import free_port
    from grpo_playground.ui.app import launch
    from grpo_playground.ui.public_limits import MAX_UPLOAD_BYTES

    with gr.Blocks() as demo:
        gr.File()
    port = free_port()
    monkeypatch.setenv("GRADIO_SERVER_PORT", str(port))
    sigterm = signal.getsignal(signal.SIGTERM)  # launch() installs the app's SIGTERM handler: not pytest's
    launch(demo, prevent_thread_lock=True, quiet=True)  # the app's own launch, with its settings
    signal.signal(signal.SIGTERM, sigterm)
    try:
        url = f"http://127.0.0.1:{port}/gradio_api/upload"
        small = httpx.post(url, files={"files": ("ok.csv", b"completion\nx\n")}, timeout=30)
        big = httpx.post(url, files={"files": ("big.csv", b"x" * (MAX_UPLOAD_BYTES + 1))}, timeout=30)
    finally:
        demo.close()
    assert small.status_code == 200
    assert big.status_code == 413


def test_evaluations_start_and_stop_only_with_the_owner_token(owner, tmp_path, monkeypatch):
    """An evaluation takes the CPU / GPU for minutes: a visitor's start and stop are refused before the job is
    touched, and the owner's bounds hold on the API too (its sliders are not checked there)."""
    from grpo_playground.contracts.layout import EVAL_JOB
    from grpo_playground.run_layout import evals_dir
    from grpo_playground.ui.eval_panel import api_start, stop_eval

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    for guess in ("", "guess"):
        with pytest.raises(gr.Error, match="needs the owner token"):
            api_start(["tiny"], "generator:test", 4, token=guess)
        with pytest.raises(gr.Error, match="needs the owner token"):
            stop_eval(guess)
    assert not (evals_dir() / EVAL_JOB).exists()
    for bad, reason in (({"batch_size": 10_000}, "batch size"), ({"max_new_tokens": 100_000}, "max new tokens"),
                        ({"n": None}, "n, batch size and max new tokens must be numbers"),
                        ({"n": float("inf")}, "must be numbers"), ({"batch_size": True}, "must be numbers")):
        with pytest.raises(gr.Error, match=reason):
            api_start(["tiny"], "generator:test", **{"n": 4, **bad}, token=OWNER)
    assert not (evals_dir() / EVAL_JOB).exists()


def test_a_comparison_stops_and_resumes_only_with_the_owner_token(owner, tmp_path, monkeypatch):
    import json

    from grpo_playground.contracts.layout import COMPARISON_JOB
    from grpo_playground.run_layout import comparisons_dir
    from grpo_playground.ui.compare_panel import api_resume, run_stop

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    folder = comparisons_dir() / "20991231-235959-compare-0401"
    folder.mkdir()
    record = {"kind": "compare", "state": "stopped", "steps": [], "meta": {"recipe_name": "recipes/tiny-cpu.yaml"}}
    (folder / COMPARISON_JOB).write_text(json.dumps(record))
    for guess in ("", "guess"):
        with pytest.raises(gr.Error, match="needs the owner token"):
            run_stop(folder.name, guess)
        with pytest.raises(gr.Error, match="needs the owner token"):
            api_resume(folder.name, guess)
    assert json.loads((folder / COMPARISON_JOB).read_text()) == record and sorted(folder.iterdir()) == [
        folder / COMPARISON_JOB]


@pytest.mark.parametrize("call, message", [
    (lambda api: api.api_start(None, "all", OWNER), "recipe_yaml must be text, not NoneType"),
    (lambda api: api.api_export("20260101-000000-anyrun-beef", None, OWNER), "gguf must be a list of texts"),
    (lambda api: api.api_export("20260101-000000-anyrun-beef", ["q4_k_m", 4], OWNER), "gguf must be a list of texts"),
    (lambda api: api.api_stop(None, OWNER), "run_id must be text, not NoneType"),
    (lambda api: api.api_status({"run": 1}), "run_id must be text, not dict"),
], ids=["null-recipe", "null-types", "a-number-type", "null-run", "object-run"])
def test_the_training_api_names_a_value_of_the_wrong_kind(owner, call, message, tmp_path, monkeypatch):
    """gr.api passes what a script sends as it is: a null reached int(None) or str methods, and the caller got a bare
    "Error"; now the parameter and what it must be, before anything runs."""
    from grpo_playground.ui import training_api

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    with pytest.raises(gr.Error, match=message):
        call(training_api)
    assert not list(tmp_path.iterdir())


def test_a_short_owner_token_is_called_out_at_launch(monkeypatch, capsys):
    """Nothing limits how fast a stranger guesses the token through a gated endpoint: a short one is named at
    launch with how to make a long one (a long one or none says nothing)."""
    import gradio as gr

    from grpo_playground.owner import MIN_OWNER_TOKEN_CHARS, weak_owner_token
    from grpo_playground.ui import app

    monkeypatch.setattr(app, "serve", lambda demo, **kwargs: None)  # the check, not a server
    monkeypatch.setattr(app.signal, "signal", lambda *args: None)  # nor the test process's SIGTERM handler
    for token, warned in (("1234", True), ("x" * MIN_OWNER_TOKEN_CHARS, False), ("", False)):
        monkeypatch.setenv(OWNER_TOKEN_ENV, token)
        app.launch(gr.Blocks(), prevent_thread_lock=True)
        said = capsys.readouterr().err
        assert ("has 4 characters: every request may guess it" in said) is warned and (weak_owner_token() is None) \
            is not warned
        assert "secrets.token_urlsafe" in said or not warned


def test_a_null_for_an_optional_api_value_is_its_default():
    from dataclasses import dataclass

    from grpo_playground.ui.handlers import handler

    @dataclass
    class Request:
        run_id: str
        stage: str = "all"
        gguf: list[str] = ()

    @handler(Request)
    def endpoint(req: Request) -> tuple:
        return req.run_id, req.stage, req.gguf

    assert endpoint("r", None, None) == ("r", "all", ())  # "stage None is unknown" before
    with pytest.raises(gr.Error, match="run_id must be text, not NoneType"):
        endpoint(None)  # a required value has no default to stand in


@pytest.mark.parametrize("folder", ["evals", "comparisons"])
def test_resuming_the_apps_own_folders_is_refused(owner, folder, tmp_path, monkeypatch):
    """Issue 38: /resume with the run id `evals` launched a training job inside the evaluations folder, which was
    then listed as a run. The app's folders are no run ids; the refusal names no path of the server."""
    from grpo_playground.jobs.runs import list_runs
    from grpo_playground.ui import training_api

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "status.json").write_text('{"state": "failed", "stage": "all"}')  # as the attack left it
    with pytest.raises(gr.Error, match=f"run id '{folder}' is not valid") as refused:
        training_api.api_resume(folder, OWNER)
    assert sorted(p.name for p in (tmp_path / folder).iterdir()) == ["status.json"]  # no job, no log
    assert list_runs() == []
    with pytest.raises(gr.Error) as missing:
        training_api.api_resume("20260101-000000-gone-beef", OWNER)
    assert str(tmp_path) not in str(refused.value) + str(missing.value)


@pytest.mark.parametrize("stage", ["sft", "grpo"])
def test_max_steps_has_an_upper_bound(stage):
    # Issue 38: max_steps 10**20 was accepted from the owner and reached the trainer.
    from grpo_playground.config import ConfigError
    from grpo_playground.config.recipe_io import config_from_dict, safe_yaml

    with pytest.raises(ConfigError, match=f"{stage}.max_steps=100000000000000000000: .*1,?000,?000"):
        config_from_dict(safe_yaml(f"{stage}: {{max_steps: 100000000000000000000}}"))
    assert config_from_dict(safe_yaml(f"{stage}: {{max_steps: 1000000}}"))


@pytest.mark.parametrize("endpoint", ["/score", "/resume"])  # a password box of the page; an API's token parameter
def test_owner_token_guessing_is_refused_after_ten_wrong_tokens_a_minute(app_url, monkeypatch, endpoint):
    # Before: 8-13 guesses a second per endpoint, without limit. Each address here is one visitor (uvicorn reads
    # X-Forwarded-For from 127.0.0.1), so this lockout touches no other test's client.
    from gradio_client import Client

    from grpo_playground.ui.token_guesses import MAX_WRONG_TOKENS

    monkeypatch.setenv(OWNER_TOKEN_ENV, OWNER)
    code = "def reward(completions, answer, **kwargs):\n    return [1.0] * len(completions)\n"

    def send_as(address: str, token: str) -> str:
        client = Client(app_url, verbose=False, headers={"X-Forwarded-For": address})
        try:
            if endpoint == "/score":
                client.predict(completions_text="<SOLUTION>42</SOLUTION>", answer="42", custom_code=code,
                               owner_token=token, api_name="/score")
            else:
                client.predict("20990101-000000-none-beef", token, api_name="/resume")
        except Exception as error:  # noqa: BLE001 - the refusal's text is what is checked
            return str(error)
        return "answered"

    guesser = f"10.38.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    for guess in range(MAX_WRONG_TOKENS):
        assert "owner token" in send_as(guesser, f"guess-{guess}")
    assert "429 Too Many Requests" in send_as(guesser, "guess-next")  # refused before it is queued
    assert "429 Too Many Requests" in send_as(guesser, OWNER)  # the right one too: a refusal tells nothing
    other = send_as(f"10.39.{uuid.uuid4().int % 250}.1", OWNER)  # another address is not locked out: its token
    assert "429" not in other and "needs the owner token" not in other  # is taken
