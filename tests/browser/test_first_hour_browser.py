"""What a new user meets in the first hour, in a real browser: saved evaluations listed at once, a Stop pressed
right after the page loads, a malformed recipe upload, and the CLI box following the form.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_first_hour_browser.py

Run folders and evaluation results are written here in the formats the jobs write (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from test_e2e_flow import show_screen, upload_recipe

expect = pytest.importorskip("playwright.sync_api").expect


def save_eval(name: str, accuracy: float) -> None:
    from grpo_playground.jobs import eval_results as store

    result = {"model": "tiny", "data": "generator:test", "n": 4, "format_rate": 1.0, "accuracy": accuracy,
              "accuracy_se": 0.1, "lenient_accuracy": accuracy, "mean_completion_tokens": 40.0, "recheck_rate": 0.0,
              "seconds": 3.0}
    (store.evals_dir() / name).write_text(json.dumps(result))


def test_evaluate_tab_lists_saved_results_on_load_and_on_refresh(page):
    # written after the app was built: the tab must read the disk when the page loads, not when the app started
    save_eval("20990101-000000-tiny.json", 0.25)
    page.reload()
    page.get_by_role("tab", name="Evaluate").click()
    table = page.locator("#eval-table")
    expect(table).to_contain_text("20990101-000000-tiny.json")
    expect(table).to_contain_text("25")  # accuracy in percent, not 0.25
    page.locator("#eval-chart svg.marks, #eval-chart canvas").first.wait_for()  # the chart is drawn too
    save_eval("20990101-000001-tiny.json", 0.5)
    page.locator("#eval-refresh").click()
    expect(table).to_contain_text("20990101-000001-tiny.json")


def test_stop_right_after_page_load_stops_the_run_on_screen(page):
    """The picker is filled on page load: a Stop pressed before the first 2 s tick acts on the shown run (it said
    'pick a run to stop')."""
    job = subprocess.Popen(["sleep", "120"])  # stands in for a CLI-started job: the pid its status names
    try:
        run = Path(os.environ["GRPO_PLAYGROUND_RUNS_DIR"]) / "20991231-235959-stopme-0001"
        run.mkdir(parents=True)
        (run / "status.json").write_text(json.dumps({"state": "running", "stage": "sft", "step": 1, "max_steps": 9,
                                                     "pid": job.pid, "updated": time.time()}))
        page.reload()
        page.get_by_role("tab").first.wait_for()
        show_screen(page, "2. Live run")
        page.get_by_role("button", name="Stop (saves, then exits)").click()
        message = page.locator("#training-run-msg")
        expect(message).to_contain_text(f"Stop requested for {run.name}")
        assert job.wait(timeout=30) != 0, "the job was not signalled"
        assert "pick a run" not in message.inner_text()
    finally:
        job.kill()


def test_a_malformed_recipe_says_where_and_keeps_the_form(page, tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\ngrpo:\n  max_steps: 5\n   beta: 0.1\n")
    upload_recipe(page, bad)
    message = page.locator("#training-form-msg")
    expect(message).to_contain_text("line 4, column 8")
    assert "/tmp" not in message.inner_text()
    # the form keeps the recipe it had, and no field is marked as failed
    expect(page.locator("#cfg-run-name textarea, #cfg-run-name input").first).to_have_value("quick")
    assert page.locator(".error").count() == 0


def test_the_cli_box_follows_the_form(page):
    page.locator("#cfg-section-grpo").get_by_role("button").first.click()
    steps = page.locator("#cfg-grpo-max_steps input")
    steps.fill("7")
    steps.press("Enter")
    steps.blur()
    expect(page.locator("#training-cli")).to_contain_text("--config recipes/quick.yaml --set grpo.max_steps=7")


def test_dark_theme_keeps_the_underscores_of_highlighted_tags(browser, app_url):
    """A tool about exact tag matching must show `<start_working_out>` exactly: in the dark theme the underscores
    fell below the highlight and vanished (dark text on the dark page)."""
    from io import BytesIO

    from PIL import Image

    from conftest import open_page

    context, page = open_page(browser, app_url + "?__theme=dark")
    try:
        page.get_by_role("tab", name="Reward sandbox").click()
        mark = page.locator("#sandbox-details mark").filter(has_text="<start_working_out>").first
        mark.wait_for()
        image = Image.open(BytesIO(mark.screenshot())).convert("L")
        width, height = image.size
        char = width / len("<start_working_out>")
        rows = [[image.getpixel((x, y)) for x in range(width)] for y in range(height)]

        def underscore_stroke(row) -> bool:
            """A stroke a whole character wide (antialiased ink, < 170) on the light highlight (> 200), not on the
            dark page (where a dark underscore cannot be seen)."""
            best = run = 0
            for value in row:
                run = run + 1 if value < 170 else 0
                best = max(best, run)
            return best >= 0.8 * char and sum(v > 200 for v in row) > width / 2

        assert any(underscore_stroke(row) for row in rows[height // 2:]), \
            "no visible underscore inside the highlighted <start_working_out>"
    finally:
        context.close()


def test_during_sft_only_charts_with_points_are_shown(page):
    """While SFT runs, the GRPO charts have no points: they are hidden, not five empty, untitled boxes."""
    run = Path(os.environ["GRPO_PLAYGROUND_RUNS_DIR"]) / "20991231-235959-sftonly-0002"
    run.mkdir(parents=True)
    now = time.time()
    (run / "status.json").write_text(json.dumps({"state": "stopped", "stage": "sft", "step": 20, "max_steps": 20}))
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"stage": "sft", "step": s, "max_steps": 20, "time": now + s, "loss": 2.0 / s,
                    "learning_rate": 1e-3}) + "\n" for s in range(5, 25, 5)))
    page.reload()
    show_screen(page, "2. Live run")
    page.locator("#training-run input").click()
    page.get_by_role("option", name=run.name).click()
    expect(page.locator("#training-progress")).to_contain_text(run.name)
    page.locator("#training-plot-5 svg.marks").wait_for()  # Loss: SFT fills it
    for grpo_chart in range(5):  # reward, per-reward means, KL, length, truncation: GRPO only
        expect(page.locator(f"#training-plot-{grpo_chart}")).to_be_hidden()
