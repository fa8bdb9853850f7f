"""Screens that follow the disk without a reload or "Refresh list": a run trained, a GGUF exported or an evaluation
saved after the page opened shows up in the Evaluate and Chat pickers and the Evaluate chart.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_screens_follow_disk_browser.py

Run folders and results are written here in the formats the jobs write (docs/ARCHITECTURE.md), after the page
has loaded: the lists were fixed when the server started, so neither a reload nor the timer showed them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import TIMEOUT_MS

expect = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=TIMEOUT_MS)

RUN_ID = "20991231-235959-fresh-0003"


def runs() -> Path:
    return Path(os.environ["GRPO_PLAYGROUND_RUNS_DIR"])


def write_adapter(stage: str) -> Path:
    """A run with a saved stage adapter, as the job leaves it (eval lists adapter folders)."""
    run = runs() / RUN_ID
    (run / stage).mkdir(parents=True, exist_ok=True)
    (run / "status.json").write_text(json.dumps({"state": "finished", "stage": stage, "step": 4, "max_steps": 4}))
    (run / stage / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "assets/tiny"}))
    return run / stage


def save_result(model: Path, accuracy: float, stamp: str) -> None:
    from grpo_playground.jobs import eval_results as store

    result = {"model": str(model), "data": "generator:test", "n": 100, "format_rate": 0.9, "accuracy": accuracy,
              "accuracy_se": 0.05, "lenient_accuracy": accuracy, "mean_completion_tokens": 40.0,
              "recheck_rate": 0.0, "seconds": 3.0}
    (store.evals_dir() / f"{stamp}-{model.parent.name}-{model.name}.json").write_text(json.dumps(result))


def test_the_evaluate_tab_follows_new_runs_and_results_without_a_reload(page):
    page.get_by_role("tab", name="Evaluate").click()
    page.locator("#eval-status").wait_for()
    sft, grpo = write_adapter("sft"), write_adapter("grpo")  # trained after the page opened
    picker = page.locator("#eval-checkpoints input")
    picker.click()
    expect(page.get_by_role("option", name=f"{RUN_ID}/grpo")).to_be_visible()
    picker.press("Escape")
    # an evaluation finishing while the page is open redraws the chart and says what it means
    save_result(sft, 0.42, "20991231-235960")
    save_result(grpo, 0.40, "20991231-235961")
    chart = page.locator("#eval-chart")
    expect(chart.locator("svg.marks")).to_contain_text(f"{RUN_ID}/grpo")
    expect(chart.locator("svg.marks")).to_contain_text("accuracy")
    assert "NaN" not in chart.inner_text()
    expect(page.locator("#eval-verdict")).to_contain_text("GRPO vs SFT: -2.0 points of accuracy, within noise")


def test_the_chat_tab_lists_a_gguf_exported_after_the_page_opened(page):
    from grpo_playground.serving import llamacpp_unavailable_reason

    if llamacpp_unavailable_reason():
        pytest.skip(f"llama.cpp is not available here: {llamacpp_unavailable_reason()}")
    page.locator("#training-screens").wait_for()
    export = runs() / RUN_ID / "export" / "grpo"
    export.mkdir(parents=True, exist_ok=True)
    (export / f"{RUN_ID}-grpo.q4_k_m.gguf").write_bytes(b"GGUF")  # listed by name; nothing loads it here
    page.get_by_role("tab", name="Chat").click()
    page.locator("#chat-model-2 input").click()
    # the Chat tab's labels name the run, the stage and the quantization (serving's chat_tab)
    expect(page.get_by_role("option", name=re.compile(r"fresh · grpo · q4_k_m"))).to_be_visible()


def test_offline_the_evaluate_tab_offers_only_models_that_load(page):
    """The tests run with HF_HUB_OFFLINE=1 and an empty hub cache: the Qwen3 hub models cannot load, so they are
    not offered (they were, and failed minutes later); the embedded tiny model is."""
    from grpo_playground.models import MODELS
    from grpo_playground.models.registry import hub_cached

    hub_only = [name for name, spec in MODELS.items() if spec.source == "hub" and not hub_cached(spec.location)]
    assert hub_only, "the registry has no uncached hub model to leave out"
    page.get_by_role("tab", name="Evaluate").click()
    page.locator("#eval-checkpoints input").click()
    expect(page.get_by_role("option", name="tiny", exact=True)).to_be_visible()
    offered = page.get_by_role("option").all_text_contents()
    assert not set(hub_only) & {o.replace("✓", "").strip() for o in offered}, offered  # an option starts with its check mark


def test_the_evaluation_log_says_each_result_in_words_not_json(page):
    """pipelines.eval prints its summary as one JSON line (for scripts): the tab's log tail says it in words."""
    from grpo_playground.jobs import eval_results as store
    from grpo_playground.contracts.layout import EVAL_JOB, EVAL_LOG

    summary = {"model": "tiny", "data": "generator:test", "n": 100, "format_rate": 0.9, "accuracy": 0.4,
               "accuracy_se": 0.05, "lenient_accuracy": 0.41, "seconds": 12.0, "settings": {"x": 1}}
    (store.evals_dir() / EVAL_LOG).write_text("[eval] tiny\nwrote out.json\n" + json.dumps(summary) + "\n")
    # a finished job's record (grpo_playground.jobs.record); its pid is above the kernel's pid_max (2**22)
    (store.evals_dir() / EVAL_JOB).write_text(json.dumps({"kind": "eval", "state": "finished", "pid": 2**22 + 9,
                                                          "steps": [], "started": 1.0, "meta": {"items": []}}))
    page.get_by_role("tab", name="Evaluate").click()
    log = page.locator("#eval-log textarea")
    expect(log).to_have_value(re.compile(r"result: accuracy 40\.0%, format rate 90\.0% on 100 problems"))
    assert '{"model"' not in log.input_value()
