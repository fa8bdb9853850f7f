"""Issue 39 items 10-12 in a real browser: the setup screen previews the data as the model will see it before Start,
and the recipe form offers the format gate, the shaped rewards' knobs and the doctor's stop on critical.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_issue39_shapes_browser.py
"""

from __future__ import annotations

import pytest

from conftest import TIMEOUT_MS
from test_e2e_flow import region_screenshot
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
    region_screenshot(page, "data-preview", "#training-data-preview-box")  # docs/guide.md embeds it
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


def test_a_refused_recipe_leaves_the_upload_box_and_every_typo_is_named(page, tmp_path):
    # issue 39 item 9: the refused file stayed in the box as if loaded, and only its first unknown key was named
    from test_e2e_flow import upload_recipe

    recipe = tmp_path / "two-typos.yaml"
    recipe.write_text("grpo:\n  learning_rat: 1.0e-5\n  num_generation: 4\n")
    upload_recipe(page, recipe)
    message = page.locator("#training-form-msg")
    expect(message).to_contain_text("two-typos.yaml was not loaded")
    expect(message).to_contain_text("grpo.learning_rat")
    expect(message).to_contain_text("grpo.num_generation")
    box = page.locator("div.block").filter(has=page.get_by_text("Upload a recipe (.yaml)", exact=True))
    expect(box).not_to_contain_text("two-typos.yaml")
    fixed = tmp_path / "fixed.yaml"  # and the next file goes in without a page reload
    fixed.write_text("grpo:\n  learning_rate: 1.0e-5\n")
    upload_recipe(page, fixed)
    expect(message).to_contain_text("Loaded fixed.yaml")


def test_a_group_opened_from_a_run_shows_the_sandbox_from_its_top(page):
    # issue 39 item 5: the sandbox kept the Training tab's scroll, its group summary above the viewport, and the
    # default set's two design warnings stood above every result
    import json

    from test_live_run_browser import pick, write_run

    run_id = "20991231-120000-tosandbox-0391"
    run = write_run(run_id, {"state": "finished", "stage": "all", "step": 12, "max_steps": 12})
    (run / "samples.jsonl").write_text(json.dumps({
        "stage": "grpo", "step": 12, "prompt": "6 x 7?", "answer": "42", "rewards": {}, "total": [], "advantages": [],
        "completions": ["<start_working_out>6 x 7<end_working_out><SOLUTION>42</SOLUTION>",
                        "<start_working_out>6 + 7<end_working_out><SOLUTION>13</SOLUTION>"]}) + "\n")
    pick(page, run_id)
    button = page.locator("#training-to-sandbox")
    expect(button).to_be_enabled()
    button.scroll_into_view_if_needed()
    assert page.evaluate("window.scrollY") > 300  # the button sits far down the live screen
    button.click()
    report = page.locator("#sandbox-report")
    expect(report).to_contain_text("Group of 2")
    expect(report).to_be_in_viewport()
    assert page.evaluate("window.scrollY") == 0
    # the design check's warnings are one line until opened, not a wall above the results
    design = page.locator("#sandbox-design")
    expect(design).to_contain_text("Reward design check")
    expect(design.locator("p").first).to_be_hidden()
    design.locator("summary").click()
    expect(design).to_contain_text("keeps writing after the closing tag")
    expect(design.locator("p").first).to_be_visible()


def test_chat_question_and_send_fit_a_1280x800_screen(page):
    # issue 39 item 7: empty 420 px panes pushed the question box and Send below the fold
    page.set_viewport_size({"width": 1280, "height": 800})
    page.get_by_role("tab", name="Chat").click()
    for element in ("#chat-question textarea", "#chat-send"):
        expect(page.locator(element)).to_be_in_viewport(ratio=1.0)


def test_export_it_goes_to_the_export_panel_where_its_progress_shows(page):
    # issue 39 item 7: the card's "Export it (GGUF)" sits at the top, the export's progress far below it
    import json

    from test_live_run_browser import pick, write_run

    run_id = "20991231-120001-exportit-0392"
    run = write_run(run_id, {"state": "finished", "stage": "all", "step": 12, "max_steps": 12})
    (run / "grpo").mkdir()
    (run / "grpo" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "assets/tiny"}))
    pick(page, run_id)
    page.locator("#training-next-export").click()
    expect(page.locator("#training-export-heading")).to_be_in_viewport()
    expect(page.locator("#training-export")).to_be_in_viewport()
    expect(page.locator("#training-export")).not_to_be_empty()
