"""The Evaluate tab's "GRPO vs more SFT" panel in a real browser: a small comparison started with the mouse runs
every arm as a background job, and the page shows each arm's accuracy, GRPO's paired differences and the level
table from the experiment's own result file. The comparison is the fake experiment's (tests/fake_experiment.py:
the real driver and eval CLI without a model), as this is the page's plumbing.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_compare_browser.py
"""

from __future__ import annotations

import json
import shutil

from grpo_playground.jobs.comparisons import list_comparisons
from grpo_playground.contracts.layout import COMPARISON_JOB, COMPARISON_RESULT
from grpo_playground.run_layout import comparisons_dir

COMPARISON_TIMEOUT_MS = 300_000  # the fake experiment's four short arms and their evaluations, on 2 shared cores


def fill(page, selector: str, value) -> None:
    box = page.locator(selector).first
    box.fill(str(value))
    box.press("Tab")  # Gradio reads a number box on blur


def test_before_a_result_the_panel_says_so_instead_of_an_empty_chart(page, expect):
    """A comparison stopped before its result (here one written as its job record says, the newest of the list):
    a sentence stands where the chart and tables will be, and the status says how to go on."""
    folder = comparisons_dir() / "20991231-235959-compare-0301"
    folder.mkdir(parents=True)
    try:
        (folder / COMPARISON_JOB).write_text(json.dumps({"kind": "compare", "state": "stopped", "steps": [], "meta": {
            "recipe_name": "recipes/tiny-cpu.yaml", "command": "grpo-playground compare ...",
            "plan": {"minutes": 1, "n_worked": 8, "n_answers": 8, "n_eval": 2}}}))
        page.reload()
        page.get_by_role("tab", name="Evaluate").click()
        expect(page.locator("#compare-status")).to_contain_text("Stopped (press Resume comparison to go on")
        expect(page.locator("#compare-no-result")).to_contain_text("No result yet")
        for part in ("#compare-chart", "#compare-arms", "#compare-levels"):
            expect(page.locator(part)).to_be_hidden()
        # Stop answers beside the status, which stays the view's alone (the next tick would overwrite it there)
        page.get_by_role("button", name="Stop comparison").click()
        expect(page.locator("#compare-message")).to_contain_text(f"Comparison {folder.name} is not running.")
        expect(page.locator("#compare-status")).to_contain_text("Stopped (press Resume comparison to go on")
    finally:
        shutil.rmtree(folder)  # the newest comparison of the list: the next test reads its own


def test_a_comparison_started_from_the_evaluate_tab_shows_every_arm(page, expect, screenshot, fake_experiment):
    """The page's plumbing, started and followed with the mouse: the fake experiment (the real driver and eval CLI,
    no model: tests/fake_experiment.py) runs it; tests/test_compare.py's panel test reads a real one."""
    page.get_by_role("tab", name="Evaluate").click()
    expect(page.locator("#compare-recipe input")).to_have_value("recipes/tiny-cpu.yaml")
    fill(page, "#compare-minutes input", 0.05)  # 3 s per arm: the mechanics, not a result
    fill(page, "#compare-n-eval input", 2)
    page.get_by_label("Worked problems (W)").fill("8")
    page.get_by_label("Answer-only problems (A)", exact=True).fill("8")  # not "... (A) from"
    page.get_by_label("Answer-only problems (A)", exact=True).press("Tab")
    page.get_by_text("sft-W: when the format is learned").click()
    fill(page, "#compare-round-steps input", 1)
    page.get_by_label("At most this many rounds").fill("1")
    fill(page, "#compare-format-target input", 0)
    page.locator("#compare-start").click()

    status = page.locator("#compare-status")
    expect(status).to_contain_text("Running", timeout=60_000)  # a background job: the click returned at once
    expect(status).to_contain_text("T = 0.05 min, W = 8, A = 8, 2 held-out prompts")
    expect(status).to_contain_text("grpo-playground compare")
    expect(status).to_contain_text("Finished", timeout=COMPARISON_TIMEOUT_MS)

    comparison = list_comparisons()[0]
    result = json.loads((comparisons_dir() / comparison / f"{COMPARISON_RESULT}.json").read_text())
    arms = page.locator("#compare-arms")
    for arm in result["eval"]:
        expect(arms).to_contain_text(arm)
    chart = page.locator("#compare-chart")
    expect(chart).to_contain_text("GRPO minus arm (points)")
    for arm, d in result["grpo_minus"].items():  # the legend carries GRPO's paired difference to each arm, unclipped
        expect(chart).to_contain_text(f"{arm.split('+', 1)[-1]}: {100 * d['difference']:+.1f} ± {100 * d['se']:.1f}")
    expect(chart).not_to_contain_text("…")
    expect(page.locator("#compare-levels")).to_contain_text("level")
    page.locator("#compare-chart svg.marks, #compare-chart canvas").first.wait_for()
    expect(page.locator("#compare-no-result")).to_be_hidden()
    screenshot(page, "compare-finished")
