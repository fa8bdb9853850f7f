"""The seed's story, for real, in a real browser: GRPO started on the base model with no SFT. The pre-flight
says before the first GRPO step that no completion is in the format, the latest group scores alike, and
the doctor names the flat reward / zero-variance groups with the knob to turn. The same run, read back through the
Training tab's tick, shows the latest group with a score per enabled reward and every finding the job logged (this
was tests/test_training_tab.py's test_grpo_run_shows_samples_and_the_doctor, which trained the same story again).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_e2e_collapse.py

A real training job on the embedded `tiny` model (about a minute on 2 shared cores); the test stops it
once the doctor has spoken. Screenshots: artifacts/screenshots/test_e2e_collapse-*.png (docs/guide.md).
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

from grpo_playground.config import apply_overrides, dump_recipe, load_recipe
from test_e2e_flow import region_screenshot, upload_recipe

pytestmark = pytest.mark.slow  # a real training job

ROOT = Path(__file__).resolve().parents[2]
RECIPE_NAME = "e2e-no-sft"
# The batch counts completions: 2 prompts of 4 a step (4 prompts took a third longer to reach the doctor's 3 rows;
# the base model's groups all score alike either way).
OVERRIDES = [
    f"name={RECIPE_NAME}", "sft.enabled=false", "data.n_grpo=128", "grpo.max_steps=200", "grpo.logging_steps=1",
    "grpo.save_steps=1000", "grpo.per_device_train_batch_size=8", "grpo.num_generations=4",
    "grpo.max_completion_length=48", "grpo.preflight_prompts=2", "tracking.swanlab=disabled",
    "grpo.on_preflight_error=continue",  # spend the steps: the doctor must see the collapse too
]
WAIT_MS = 240_000  # model load, pre-flight and the doctor's 3-row window, under load


def test_grpo_without_sft_is_caught_by_the_preflight_and_the_doctor(page, expect, screenshot, tmp_path):
    recipe = tmp_path / f"{RECIPE_NAME}.yaml"
    recipe.write_text(dump_recipe(apply_overrides(load_recipe(ROOT / "recipes" / "tiny-cpu.yaml"), OVERRIDES)))
    upload_recipe(page, recipe)
    expect(page.get_by_text(f"Loaded {recipe.name}")).to_be_visible()
    page.get_by_role("button", name="Start", exact=True).click()
    progress = page.locator("#training-progress")
    run_id_re = re.compile(rf"\d{{8}}-\d{{6}}-{RECIPE_NAME}-[0-9a-f]+")  # run folders: <time>-<recipe>-<hex>
    expect(progress).to_contain_text(run_id_re)
    run_id = run_id_re.search(progress.inner_text()).group(0)

    # before any GRPO step has taught anything: the pre-flight's verdict, in words, with what to do
    preflight = page.locator("#training-preflight")
    expect(preflight).to_contain_text("Pre-flight: ERROR", timeout=WAIT_MS)
    expect(preflight).to_contain_text("run SFT first")
    expect(preflight).to_contain_text("In the format: 0%")

    # during GRPO: the doctor names the collapse from the metrics, with the knob to turn
    findings = page.locator("#training-findings")
    expect(findings).to_contain_text("flat_reward", timeout=WAIT_MS)
    expect(findings).to_contain_text("run SFT first")
    expect(page.locator("#training-samples")).to_contain_text("check_answer")
    expect(page.get_by_text("Every completion scored the same: zero advantage")).to_be_visible()
    screenshot(page, "collapse")
    region_screenshot(page, "collapse-charts", "#training-progress", "#training-plot-4")
    region_screenshot(page, "collapse-doctor", "#training-samples", "#training-preflight")

    page.get_by_role("button", name="Stop (saves, then exits)").click()
    expect(page.locator("#training-progress")).to_contain_text("stopped", timeout=120_000)
    tick_shows_the_group_the_preflight_and_every_logged_finding(run_id)


def tick_shows_the_group_the_preflight_and_every_logged_finding(run_id: str) -> None:
    """What the Training tab's tick sends for the stopped run: the latest group with a score per enabled reward and
    its advantage, the pre-flight verdict in words, and the doctor's findings exactly as the job logged them."""
    from grpo_playground.ui.training_run_view import poll

    tick = poll(run_id, None, None, "reward")
    assert "answer" in tick.caption
    enabled = set(load_recipe(ROOT / "recipes" / "tiny-cpu.yaml").rewards.weights)
    assert {"completion", "total", "advantage", *enabled} <= set(tick.samples.columns)  # a score per enabled reward
    assert len(tick.samples) == 4  # one group: grpo.num_generations
    preflight = tick.preflight
    assert f"Pre-flight: {preflight['level'].upper()}" in tick.preflight_verdict
    assert preflight["why"] in tick.preflight_verdict
    assert preflight["level"] == "error"  # the base model never saw the tags
    doctor_file = Path(os.environ["GRPO_PLAYGROUND_RUNS_DIR"], run_id, "doctor.jsonl")
    logged = [json.loads(line) for line in doctor_file.read_text().splitlines()]
    assert logged, "the page showed the doctor's findings, but the job logged none"
    assert tick.findings.count('class="doctor-finding') == len(logged)
    assert all(f"<b>{f['rule']}</b>" in tick.findings and f"Try: {html.escape(f['knob'])}" in tick.findings
               for f in logged)
    assert "<b>flat_reward</b>" in tick.findings
