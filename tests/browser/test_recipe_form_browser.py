"""The recipe form speaks to people, in a real browser: labels in words with the config key in the help, the CPU
recipe not asking for CUDA rollouts, a reward-weights table wide enough to read, and errors that list every
problem in plain words (a binary file, two bad values at once).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_recipe_form_browser.py
"""

from __future__ import annotations

import pytest

from conftest import TIMEOUT_MS
from test_e2e_flow import upload_recipe

expect = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=TIMEOUT_MS)


def open_section(page, section: str) -> None:
    page.locator(f"#cfg-section-{section}").get_by_role("button").first.click()  # sections start closed


def test_labels_in_words_with_the_key_in_the_help_and_cpu_settings(page):
    open_section(page, "grpo")
    group = page.locator("#cfg-grpo-num_generations")
    expect(group).to_contain_text("Completions per prompt (group size)")
    expect(group).to_contain_text("grpo.num_generations")  # the key, as in the YAML file and --set
    for key, words in (("cfg-grpo-scale_rewards", "Advantage scaling"),
                       ("cfg-grpo-on_preflight_error", "When the pre-flight says ERROR"),
                       ("cfg-grpo-max_completion_length", "Max completion length")):
        expect(page.locator(f"#{key}")).to_contain_text(words)
    # the quick recipe runs on 2 CPU cores: it does not ask for Unsloth's CUDA-only vLLM rollouts
    open_section(page, "model")
    expect(page.locator("#cfg-model-fast_inference input")).not_to_be_checked()
    # the reward weights: a table with room for the names and the weights (it was ~160 px, names cut mid-word)
    open_section(page, "rewards")
    table = page.locator("#cfg-rewards-weights")
    expect(table).to_contain_text("check_answer")
    assert table.bounding_box()["width"] >= 500, table.bounding_box()


def test_every_problem_is_listed_in_plain_words(page):
    open_section(page, "grpo")
    for key, value in (("cfg-grpo-max_steps", "0"), ("cfg-grpo-learning_rate", "5")):
        box = page.locator(f"#{key} input")
        box.fill(value)
        box.press("Enter")
        box.blur()
    message = page.locator("#training-form-msg")
    expect(message).to_contain_text("Fix before starting (2 problems)")
    expect(message).to_contain_text("grpo.max_steps=0: must be between 1 and 1000000")  # a bound said in words, not "1 .. "
    expect(message).to_contain_text("grpo.learning_rate=5.0: must be between 1e-09 and 0.01")
    assert "*" not in message.inner_text() and " .. " not in message.inner_text()


def test_a_binary_file_is_refused_in_plain_words(page, tmp_path):
    picture = tmp_path / "holiday.yaml"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    upload_recipe(page, picture)
    message = page.locator("#training-form-msg")
    expect(message).to_contain_text("holiday.yaml was not loaded")
    expect(message).to_contain_text("is not a text file")
    assert "codec" not in message.inner_text()


def test_a_recipe_with_the_forms_run_section_loads_and_a_wrong_key_is_named(page, tmp_path):
    """The form shows the name in a "run" section: a recipe written that way loads (it was refused as an unknown
    section), and a misspelt key of that section gets a did-you-mean."""
    expect(page.locator("#cfg-section-run")).to_contain_text("run:")
    recipe = tmp_path / "as-the-form-shows.yaml"
    recipe.write_text("run:\n  name: from-the-form\ngrpo:\n  max_steps: 3\n")
    upload_recipe(page, recipe)
    message = page.locator("#training-form-msg")
    expect(message).to_contain_text("Loaded as-the-form-shows.yaml")
    expect(page.locator("#cfg-run-name textarea, #cfg-run-name input").first).to_have_value("from-the-form")
    expect(page.locator("#training-cli")).to_contain_text("as-the-form-shows.yaml")
    misspelt = tmp_path / "misspelt.yaml"
    misspelt.write_text("run:\n  nmae: typo\n")
    page.reload()  # the upload box holds the first file now
    upload_recipe(page, misspelt)
    expect(message).to_contain_text("run.nmae='typo': unknown key (did you mean 'name'?)")
    expect(page.locator("#cfg-run-name textarea, #cfg-run-name input").first).to_have_value("quick")  # kept


def test_any_trl_option_typed_in_all_trl_options_reaches_the_equivalent_cli_and_a_typo_is_named(page):
    """GRPOConfig's fields the form does not show: listed with TRL's help in "All TRL options", and one typed in its
    YAML box is checked like a recipe key and carried into the command that runs the form's recipe."""
    open_section(page, "grpo")
    page.locator("#cfg-section-grpo-trl").get_by_role("button").first.click()
    expect(page.locator("#cfg-section-grpo-trl")).to_contain_text("model_init_kwargs")  # TRL's list, GRPO's own first
    editor = page.locator("#cfg-grpo-trl_options .cm-content")
    editor.click()
    page.keyboard.type("importance_sampling_levle: sequence")
    message = page.locator("#training-form-msg")
    expect(message).to_contain_text("did you mean 'importance_sampling_level'")
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type("importance_sampling_level: sequence")
    expect(message).to_contain_text("Recipe is valid")
    expect(page.locator("#training-cli")).to_contain_text("--set grpo.importance_sampling_level=sequence")
