"""Issue 39 in a real browser: "Evaluate it" judges a run on its own data beside its base model, nothing is offered
that cannot run (a hub model with no internet, a failed run's Resume / Export / sandbox), step axes a person can
read, and a fraction answer against a decimal gold says why it scored as it did.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_first_hour_round3_browser.py

Run folders are written in the formats the jobs write (docs/ARCHITECTURE.md "Run folder"), as in
test_live_run_browser.py, whose helpers these tests share. Their ids sort after test_training_browser.py's run (the
session shares one runs folder): its history row must stay in the table's first screenful.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import TIMEOUT_MS, drawn_texts
from test_e2e_flow import show_screen
from test_live_run_browser import SCREEN, pick, write_run, x_ticks
from test_recipe_form_browser import open_section
from test_sandbox_tab import WORK, open_sandbox, paste_group, wait_for_table

expect = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=TIMEOUT_MS)


def write_recipe(run, recipe: str = "quick") -> None:
    from grpo_playground.config import dump_recipe, load_recipe
    from grpo_playground.contracts.shipped import RECIPES_DIR
    from grpo_playground.contracts.layout import RECIPE_FILE

    (run / RECIPE_FILE).write_text(dump_recipe(load_recipe(RECIPES_DIR / f"{recipe}.yaml")))


def test_evaluate_it_judges_the_run_on_its_own_data_beside_its_base_model(page):
    run_id = "20991230-120000-evalown-0301"
    run = write_run(run_id, {"state": "finished", "stage": "all", "step": 12, "max_steps": 12})
    write_recipe(run)  # quick: tiny, trained and judged on levels 1-2
    for stage in ("sft", "grpo"):
        (run / stage).mkdir()
        (run / stage / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "assets/tiny"}))
    pick(page, run_id)
    page.locator("#training-next-eval").click()
    expect(page.get_by_role("tab", name="Evaluate")).to_have_attribute("aria-selected", "true")
    picked = page.locator("#eval-checkpoints")
    for label in ("tiny", f"{run_id}/sft", f"{run_id}/grpo"):  # the base model is the comparison's baseline
        expect(picked).to_contain_text(label)
    # the data the run is judged on (its recipe's eval_source), not the whole test set's levels 1-5
    expect(page.get_by_role("textbox", name="Data source")).to_have_value("generator:test?levels=1-2")


def test_a_hub_model_this_machine_cannot_reach_is_refused_before_start(page):
    """The tests run with HF_HUB_OFFLINE=1 and an empty hub cache, as a machine without internet is (the app finds
    that out by itself too: tests/test_first_hour_round3.py). It said "Recipe is valid", then the job failed on load
    9 s later with a raw RuntimeError."""
    open_section(page, "model")
    box = page.locator("#cfg-model-name_or_path input, #cfg-model-name_or_path textarea").first
    # the page's load writes the quick recipe into the form: typing before it lands was overwritten under load
    expect(box).to_have_value("tiny")
    box.fill("Qwen/Qwen2.5-0.5B-Instruct")
    expect(box).to_have_value("Qwen/Qwen2.5-0.5B-Instruct")
    box.press("Enter")
    message = page.locator("#training-form-msg")
    expect(message).to_contain_text("cannot be reached from here")
    expect(message).to_contain_text("models that work offline: tiny")
    assert "Recipe is valid" not in message.inner_text()


def test_a_run_that_failed_on_load_offers_nothing_it_cannot_do(page):
    run_id = "20991230-120000-failedload-0302"
    write_run(run_id, {"state": "failed", "stage": "sft", "step": 0, "max_steps": 240,
                       "reason": "could not get 'Qwen/Qwen2.5-0.5B-Instruct' from the Hugging Face Hub"},
              sft_steps=[], grpo_steps=[])
    pick(page, run_id)
    expect(page.locator("#training-progress")).to_contain_text("failed")
    # nothing trained, nothing saved, no sample group: Resume would fail the same way, Export has no stage
    for button in ("#training-resume", "#training-export-button", "#training-to-sandbox"):
        expect(page.locator(button)).to_be_disabled()
    # one that failed after saving a checkpoint can be resumed, and one with a trained stage exported
    run = write_run("20991230-120000-failedlate-0303", {"state": "failed", "stage": "grpo", "step": 5,
                                                        "max_steps": 12}, grpo_steps=range(1, 6))
    (run / "checkpoints" / "grpo" / "checkpoint-4").mkdir(parents=True)
    (run / "sft").mkdir()
    (run / "sft" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "assets/tiny"}))
    pick(page, run.name)
    expect(page.locator("#training-resume")).to_be_enabled()
    expect(page.locator("#training-export-button")).to_be_enabled()


def test_the_sft_step_time_chart_labels_only_as_many_steps_as_fit(page):
    page.set_viewport_size(SCREEN)
    # SFT logged every step (a short run, logging_steps 1): its step-time chart is a bar per step
    run_id = "20991230-120000-sftaxis-0304"
    write_run(run_id, {"state": "finished", "stage": "sft", "step": 60, "max_steps": 60},
              sft_steps=range(1, 61), grpo_steps=[])
    pick(page, run_id)
    expect(page.locator("#training-plot-7")).to_contain_text("Where the step time went (s): sft")
    page.locator("#training-plot-7 svg.marks").wait_for()
    labels = drawn_texts(page, page.locator("#training-plot-7 svg g[aria-label^='X-axis'] .role-axis-label text"))
    assert 2 <= len(labels) <= 8, labels  # every one of 60 steps was labelled: "1234567891011..."


def test_early_grpo_charts_label_each_step_once(page):
    """GRPO's first two steps: vega's ticks were 1, 1.5, 2, printed "1 2 2"."""
    page.set_viewport_size(SCREEN)
    run_id = "20991230-120000-grpoaxis-0305"
    # A live job that ends with the test: a "running" run with no pid stays active for a minute (reconcile's grace
    # for a queued run), and the next test's page load then opened its live screen over the screen it had clicked.
    job = subprocess.Popen(["sleep", "120"])
    try:
        write_run(run_id, {"state": "running", "stage": "grpo", "step": 2, "max_steps": 12, "pid": job.pid},
                  grpo_steps=[1, 2])
        pick(page, run_id)
        expect(page.locator("#training-plot-0")).to_contain_text("Reward")
        ticks = x_ticks(page, 0)
        assert ticks == [1, 2], ticks
    finally:
        job.kill()
        job.wait()


def test_a_fraction_answer_against_a_decimal_gold_says_why_it_scored_low(page):
    """The reverse of the fraction gold's refusal (test_sandbox_gold_browser.py): gold 0.75, answer 3/4 scored
    -4.5 with no word why."""
    sandbox = open_sandbox(page)
    paste_group(sandbox, [WORK + "<SOLUTION>3/4</SOLUTION>", WORK + "<SOLUTION>0.75</SOLUTION>"], "0.75")
    wait_for_table(sandbox, lambda t: (t.get("check_answer") or [None, None])[1:] == [5.0])
    report = page.locator("#sandbox-report")
    expect(report).to_contain_text("'3/4' of completion #1 is not a decimal number")
    expect(report).to_contain_text("answer_equivalence")


def test_the_history_says_how_long_a_run_took_where_its_reward_ended_and_that_it_was_resumed(page):
    run_id = "20991230-120000-history-0306"
    # GRPO's reward -1.6 ... 0.6 over 12 steps: its last third (steps 9-12) averages 0.30
    write_run(run_id, {"state": "finished", "stage": "all", "step": 12, "max_steps": 12, "resumes": 3,
                       "stage_seconds": {"sft": 61.0, "grpo": 100.0}})
    show_screen(page, "3. History and comparison")
    row = page.locator("#training-history").get_by_role("row").filter(has_text=run_id).first
    expect(row).to_contain_text("2m41s")
    expect(row).to_contain_text("0.3")
    expect(row).to_contain_text("3×")
    headers = page.locator("#training-history").get_by_role("columnheader").all_inner_texts()
    assert {"duration", "final reward", "resumed"} <= {h.strip() for h in headers}, headers
