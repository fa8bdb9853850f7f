"""Issue 39 items 10-12 in a real browser: the setup screen previews the data as the model will see it before Start,
and the recipe form offers the format gate, the shaped rewards' knobs and the doctor's stop on critical.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_issue39_shapes_browser.py
"""

from __future__ import annotations

import pytest

from conftest import TIMEOUT_MS
from test_recipe_form_browser import open_section

expect = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=TIMEOUT_MS)


def test_data_preview_shows_the_rendered_prompt_and_gold_before_start(page):
    page.locator("#training-data-preview-box").get_by_role("button").first.click()  # the accordion starts closed
    page.locator("#training-data-preview-button").click()
    preview = page.locator("#training-data-preview")
    # the quick recipe: the tiny model's chat template around a generated problem, the prefilled reasoning tag
    expect(preview).to_contain_text("GRPO data", timeout=max(TIMEOUT_MS, 90_000))
    expect(preview).to_contain_text("gold answer")
    expect(preview).to_contain_text("<|im_start|>assistant")
    expect(preview).to_contain_text("<start_working_out>")
    page.get_by_label("sft", exact=True).check()
    page.locator("#training-data-preview-button").click()
    expect(preview).to_contain_text("SFT target (what it learns to write)", timeout=max(TIMEOUT_MS, 90_000))


def test_form_offers_the_format_gate_the_shaped_rewards_and_stop_on_critical(page):
    open_section(page, "rewards")
    expect(page.locator("#cfg-rewards-gate_on_format")).to_contain_text("Gate correctness on format")
    table = page.locator("#cfg-rewards-weights")
    for name in ("cosine_scaled", "soft_overlong", "repetition_penalty"):
        expect(table).to_contain_text(name)
    open_section(page, "doctor")
    expect(page.locator("#cfg-doctor-stop_on_critical")).to_contain_text("Stop on critical")
    expect(page.locator("#cfg-doctor-stop_on_critical input")).not_to_be_checked()  # opt-in
