"""Issue 39 through the API: a machine that cannot reach the Hugging Face Hub offers no hub model and refuses one
before a job is made, even when nobody set HF_HUB_OFFLINE; a finished run's card says whether GRPO's reward moved,
with its uncertainty.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_first_hour_round3.py
"""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from grpo_playground.jobs.control import resume_run, start_run
from grpo_playground.jobs.feed import RunFeed
from grpo_playground.jobs.runs import load_run, reconcile
from grpo_playground.child_process import free_port
from grpo_playground.config import RunConfig
from grpo_playground.jobs import eval_results as store
from grpo_playground.models import MODELS
from grpo_playground.models.registry import hub_offline
from grpo_playground.ui.run_summary import summary_markdown

HUB_MODELS = {name for name, spec in MODELS.items() if spec.source == "hub"}


@pytest.fixture
def no_internet(monkeypatch, tmp_path):
    """A machine whose hub does not answer (nothing listens on HF_ENDPOINT's port) and where nobody set
    HF_HUB_OFFLINE: the app must find out by itself. The tests' hub cache is empty."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))


def test_where_the_hub_does_not_answer_no_hub_model_is_offered(no_internet):
    values = [value for _, value in store.list_checkpoints()]
    assert "tiny" in values
    assert HUB_MODELS and not HUB_MODELS & set(values), values  # each one ended in "FAILED (see the log)"


def test_where_the_hub_does_not_answer_a_hub_model_is_refused_before_a_run_is_made(no_internet, tmp_path):
    config = RunConfig()
    for model in ("Qwen/Qwen2.5-0.5B-Instruct", "qwen3-0.6b"):
        config.model.name_or_path = model
        started = time.monotonic()
        with pytest.raises(ValueError, match="cannot be reached") as refused:
            start_run(config)
        assert time.monotonic() - started < 5  # not a job that fails on load seconds later
        assert "models that work offline: tiny" in str(refused.value)  # and what to use instead
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # no run folder, no job


def test_a_hub_that_answers_is_not_called_offline(monkeypatch):
    """Any answer counts (here an error page: the server knows no HEAD), so a reachable hub keeps its models."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert not hub_offline()
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the owner's switch still wins
        assert hub_offline()
    finally:
        server.shutdown()
        server.server_close()


def card(tmp_path, monkeypatch, rewards: list[float], name: str = "card") -> str:
    """The finished run's card from a metrics file as the job writes it."""
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    run = tmp_path / f"20991231-235959-{name}-0001"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "stage": "all", "updated": time.time()}))
    rows = [{"stage": "grpo", "step": i, "max_steps": len(rewards), "reward": r} for i, r in enumerate(rewards, 1)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    feed = RunFeed(run)
    feed.poll()
    return summary_markdown(reconcile(load_run(run)), feed.metrics, None, None, [])


def test_the_card_says_plainly_when_grpo_did_not_move(tmp_path, monkeypatch):
    # the quick run of the issue: 12 steps jumping between 0 and 9, "GRPO reward 5.62 -> 5.06" read as a trend
    text = card(tmp_path, monkeypatch, [5.62, 0.5, 9.0, 3.1, 8.2, 1.0, 6.5, 0.2, 8.8, 2.4, 7.7, 5.06])
    assert "GRPO reward did not move" in text, text
    assert "first vs the last third of 12 steps" in text and "±" in text and "within noise" in text


def test_the_card_states_a_rise_with_its_uncertainty(tmp_path, monkeypatch):
    text = card(tmp_path, monkeypatch, [0.1, 0.3, 0.2, 0.4, 1.0, 1.2, 1.1, 1.3, 2.0, 2.2, 2.1, 2.3])
    # first third 0.25, last third 2.15: +1.90 with a standard error of sqrt(2 * 0.0167 / 4) = 0.09
    assert "GRPO reward rose: 0.25 -> **2.15**" in text and "+1.90 ± 0.09" in text, text
    text = card(tmp_path, monkeypatch, [1.0, 2.0, 3.0], "few")
    assert "3 steps: too few to tell a trend" in text, text


def test_resuming_a_run_is_counted_for_the_history(tmp_path, monkeypatch):
    """The job itself is not started here (it would train): spawn_job is the queue, tested in test_jobs.py."""
    from grpo_playground.jobs import control

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    run = tmp_path / "20991231-235959-resumed-0001"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "stopped", "stage": "grpo", "updated": time.time()}))
    monkeypatch.setattr(control, "spawn_job", lambda run_dir, command, stage: load_run(run_dir))
    for _ in range(2):
        resume_run(run.name)
    assert load_run(run).status["resumes"] == 2


def test_where_the_hub_does_not_answer_evaluating_a_hub_model_is_refused_with_the_reason(no_internet):
    """The API takes any registry name, listed or not: it said "FAILED (see the log)" once the job tried to load."""
    with pytest.raises(ValueError, match="cannot be reached from here"):
        store.check_checkpoint("qwen3-0.6b")
    assert store.check_checkpoint("tiny") == "tiny"
