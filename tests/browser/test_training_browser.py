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

from test_e2e_flow import show_screen

expect = pytest.importorskip("playwright.sync_api").expect

RUN_ID = "20991231-235959-browser-0001"  # sorts first: the tab picks the newest run when none is active
# the second is long, as real completions are: it presses on the table's column widths
COMPLETIONS = ["<end_working_out><SOLUTION>42</SOLUTION>", "solution 41 " + "because 6 x 7 = 41, then we check it. " * 4,
               "<SOLUTION>40</SOLUTION>"]


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
    show_screen(page, "2. Live run")
    run_box = page.locator("#training-run input")
    run_box.click()
    page.get_by_role("option", name=RUN_ID).click()
    progress = page.locator("#training-progress")
    progress.get_by_text(RUN_ID).wait_for()
    assert "finished" in progress.inner_text() and "10/10" in progress.inner_text()
    # charts are drawn (vega renders into a canvas or svg), the sample group and the doctor's finding shown
    chart = page.locator("#training-plot-0 svg.marks")
    chart.wait_for()
    # a chart drawn 0 px wide (Gradio draws a chart shown with its first points, before its box has a width, and
    # dropped the box's next resize: CI's test_each_screen_fits_a_laptop_and_steps_are_whole) is redrawn to its box
    chart.evaluate("svg => svg.setAttribute('width', '0')")
    expect(chart).not_to_have_attribute("width", "0", timeout=5000)
    expect(page.locator("#training-samples")).to_contain_text("solution 41")
    assert "8.5" in page.locator("#training-samples").inner_text()
    # reward names head their columns on one line (they wrapped one letter a line beside long completions)
    lines = page.evaluate("""() => {
        const walker = document.createTreeWalker(document.querySelector('#training-samples thead'), NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            if (node.textContent.trim() === 'check_numbers') {
                const range = document.createRange();
                range.selectNodeContents(node);
                return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
            }
        }
        return -1;
    }""")
    assert lines == 1, f"the header check_numbers spans {lines} lines"
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
    page.locator("#cfg-section-grpo").get_by_role("button").first.click()  # sections start closed
    learning_rate = page.locator("#cfg-grpo-learning_rate input")
    learning_rate.fill("5")
    learning_rate.press("Enter")
    learning_rate.blur()
    expect(page.locator("#training-form-msg")).to_contain_text("grpo.learning_rate=5.0")


SCREEN = {"width": 1280, "height": 800}  # a laptop: each of the tab's screens must fit without scrolling the page


def outside_screen(page, selectors: list[str]) -> list[str]:
    """The selectors whose element is not wholly inside the viewport of the unscrolled page."""
    assert page.evaluate("window.scrollY") == 0
    outside = []
    for selector in selectors:
        box = page.locator(selector).bounding_box()  # relative to the viewport; None when not shown
        if box is None or box["y"] < 0 or box["y"] + box["height"] > SCREEN["height"]:
            outside.append(f"{selector}: {box}")
    return outside


def test_each_screen_fits_a_laptop_and_steps_are_whole(browser, app_url, screenshot):
    """Set up, live run and history are each one screen at 1280x800: their key items are in view without
    scrolling (the form was one ~4,800-px page). The live charts label steps 1, 2, 3, never 1.2; the step-time
    chart is a bar per step stacked by phase; a long completion does not stretch the sample table."""
    from conftest import drawn_texts, open_page

    run = write_run()
    for n in range(12):  # a user with many runs (as CI's shared runs folder has): the history table at full height
        older = run.parent / f"20000101-0000{n:02d}-older"  # sorts after RUN_ID (newest first): RUN_ID stays on top
        older.mkdir(exist_ok=True)
        (older / "status.json").write_text((run / "status.json").read_text())
    with open(run / "metrics.jsonl", "a") as f:  # a few timed steps: the phases of each one stacked into a bar
        for step in range(1, 4):
            f.write(json.dumps({"stage": "grpo", "step": step, "timing/rollout_s": 2.0, "timing/rewards_s": 0.5,
                                "timing/forward_backward_s": 1.0 + step, "timing/other_s": 0.25,
                                "timing/step_s": 3.75 + step}) + "\n")
    long_group = {"stage": "grpo", "step": 11, "prompt": "What is 6 x 7?", "answer": "42",
                  "completions": ["<SOLUTION>42</SOLUTION>", "word " * 1500], "total": [1.0, -1.0],
                  "advantages": [0.7, -0.7], "rewards": {"check_answer": [1.0, -1.0]}}
    with open(run / "samples.jsonl", "a") as f:
        f.write(json.dumps(long_group) + "\n")
    context, page = open_page(browser, app_url)
    try:
        page.set_viewport_size(SCREEN)
        page.locator("#training-cli").wait_for()
        setup = ["#training-recipe", "#training-cli"]
        assert outside_screen(page, setup + ["#training-start"]) == [], outside_screen(page, setup + ["#training-start"])

        show_screen(page, "2. Live run")
        page.locator("#training-run input").click()
        page.get_by_role("option", name=RUN_ID).click()
        page.locator("#training-progress").get_by_text(RUN_ID).wait_for()
        page.locator("#training-plot-0 svg.marks").wait_for()
        expect(page.locator("#training-findings")).to_contain_text("raise max_completion_length")
        live = ["#training-run", "#training-progress", "#training-plot-0", "#training-plot-1", "#training-preflight",
                "#training-findings"]
        screenshot(page, "live-screen")
        assert outside_screen(page, live) == [], outside_screen(page, live)
        # whole steps on the x axis (10 steps logged: vega's default ticks were 1, 1.5, 2, ... or 1.2, 1.4)
        x_axis = page.locator("#training-plot-0 svg g[aria-label^='X-axis']")
        ticks = drawn_texts(page, x_axis.locator(".role-axis-label text"))
        assert ticks and all(t.isdigit() for t in ticks), ticks
        assert len(set(ticks)) == len(ticks), ticks  # no "1" twice (a rounded 1.5)
        # the step-time chart: one bar (a rect) per phase per step, stacked (3 steps x 4 phases logged)
        page.locator("#training-plot-7 svg.marks").wait_for()
        expect(page.locator("#training-plot-7 svg .mark-rect path")).to_have_count(12)
        # a 7,500-character completion is clipped in its cell: the table scrolls in its own box, the page does not
        table = page.locator("#training-samples")
        expect(table).to_contain_text("word word")
        assert table.bounding_box()["height"] < 500, table.bounding_box()

        show_screen(page, "3. History and comparison")
        row = page.locator("#training-history span.text").filter(has_text=RUN_ID).first
        row.wait_for()
        assert outside_screen(page, ["#training-history", "#training-compare"]) == []
        row.click()  # a row opens the live screen on that run
        expect(page.get_by_role("tab", name="2. Live run")).to_have_attribute("aria-selected", "true")
    finally:
        context.close()
