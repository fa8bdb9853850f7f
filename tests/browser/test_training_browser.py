"""The Training tab in a real browser: it re-attaches to a run folder on disk, draws the live charts,
shows the latest sample group and the doctor's findings, and opens the group in the Reward sandbox.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_training_browser.py

The run folder is written here in the job's formats (docs/ARCHITECTURE.md "Run folder"), the way a
finished job leaves it: the tab must not care who wrote it, only read it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

expect = pytest.importorskip("playwright.sync_api").expect

RUN_ID = "20991231-235959-browser-0001"  # sorts first: the tab picks the newest run when none is active
COMPLETIONS = ["<end_working_out><SOLUTION>42</SOLUTION>", "solution 41", "<SOLUTION>40</SOLUTION>"]


def write_run() -> Path:
    run = Path(os.environ["GRPO_PLAYGROUND_RUNS_DIR"]) / RUN_ID
    run.mkdir(parents=True, exist_ok=True)
    now = time.time()
    status = {"state": "finished", "stage": "grpo", "step": 10, "max_steps": 10, "reason": "", "updated": now}
    (run / "status.json").write_text(json.dumps(status))
    # the run's own reward set (the de-gamed check_answer_strict_nomatch): the sandbox must take it over
    from grpo_playground.config import dump_recipe, load_recipe

    (run / "recipe.yaml").write_text(dump_recipe(load_recipe(Path(__file__).parents[2] / "recipes" / "tiny-cpu.yaml")))
    with open(run / "metrics.jsonl", "w") as f:
        for step in range(1, 11):
            f.write(json.dumps({
                "stage": "grpo", "step": step, "max_steps": 10, "time": now + step, "reward": -2.0 + step / 5,
                "reward_std": 0.5, "rewards/check_answer/mean": -2.0 + step / 4, "rewards/check_numbers/mean": 1.0,
                "kl": 0.001 * step, "completions/mean_length": 40.0, "completions/max_length": 64.0,
                "completions/clipped_ratio": 0.1, "frac_reward_zero_std": 0.25, "loss": 0.01,
                "learning_rate": 1e-4}) + "\n")
    with open(run / "samples.jsonl", "w") as f:
        f.write(json.dumps({"stage": "grpo", "step": 10, "prompt": "What is 6 x 7?", "answer": "42",
                            "completions": COMPLETIONS,
                            "rewards": {"check_answer": [5.0, -2.0, -2.5], "check_numbers": [3.5, -2.5, -1.5]},
                            "total": [8.5, -4.5, -4.0], "advantages": [1.4, -0.7, -0.7]}) + "\n")
    with open(run / "doctor.jsonl", "w") as f:
        f.write(json.dumps({"step": 5, "rule": "length_pinned", "severity": "warning",
                            "message": "completions hit the length limit", "knob": "raise max_completion_length",
                            "stage": "grpo"}) + "\n")
    return run


def test_tab_reattaches_draws_and_opens_the_group_in_the_sandbox(page, screenshot):
    write_run()
    run_box = page.locator("#training-run input")
    run_box.click()
    page.get_by_role("option", name=RUN_ID).click()
    progress = page.locator("#training-progress")
    progress.get_by_text(RUN_ID).wait_for()
    assert "finished" in progress.inner_text() and "10/10" in progress.inner_text()
    # charts are drawn (vega renders into a canvas or svg), the sample group and the doctor's finding shown
    page.locator("#training-plot-0 canvas, #training-plot-0 svg").first.wait_for()
    expect(page.locator("#training-samples")).to_contain_text("solution 41")
    assert "8.5" in page.locator("#training-samples").inner_text()
    expect(page.locator("#training-findings")).to_contain_text("raise max_completion_length")
    screenshot(page, "training-run")

    page.locator("#training-to-sandbox").click()
    completions = page.locator("#sandbox-completions textarea")
    completions.wait_for()  # the sandbox tab is now the selected one
    assert completions.input_value() == "\n---\n".join(COMPLETIONS)
    assert page.get_by_role("tab", name="Reward sandbox").get_attribute("aria-selected") == "true"
    enabled = page.locator("#sandbox-enabled")
    expect(enabled.get_by_label("check_answer_strict_nomatch", exact=True)).to_be_checked()
    expect(enabled.get_by_label("check_answer", exact=True)).not_to_be_checked()


def test_form_loads_a_shipped_recipe_and_names_a_bad_value(page):
    page.locator("#training-recipe input").click()
    page.get_by_role("option", name="smollm2").click()
    page.get_by_role("button", name="Load recipe").click()
    expect(page.locator("#cfg-run-name textarea, #cfg-run-name input").first).to_have_value("smollm2")
    expect(page.locator("#training-form-msg")).to_contain_text("Loaded recipes/smollm2.yaml")
    learning_rate = page.locator("#cfg-grpo-learning_rate input")
    learning_rate.fill("5")
    learning_rate.press("Enter")
    learning_rate.blur()
    expect(page.locator("#training-form-msg")).to_contain_text("grpo.learning_rate=5.0")
