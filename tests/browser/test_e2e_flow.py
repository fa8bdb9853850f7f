"""The whole product in a real browser, on the offline defaults: upload a small version of the tiny recipe,
start it and watch its chart update, stop it, open its latest sample group in the Reward sandbox, export
the run to GGUF, and chat with that GGUF: a streamed reply, scored by the rewards.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_e2e_flow.py

The steps are tests run in file order and share one run (a later step skips when an earlier one failed).
A real training job runs on the embedded `tiny` model: a couple of minutes on 2 shared cores.
Screenshots: artifacts/screenshots/test_e2e_flow-*.png (the README and docs/guide.md embed a few).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from grpo_playground.config import apply_overrides, dump_recipe, load_recipe
from grpo_playground.data import load_examples
from grpo_playground.serving.targets import run_name

pytestmark = pytest.mark.slow  # a real training job, export and llama.cpp server

ROOT = Path(__file__).resolve().parents[2]
RECIPE_NAME = "e2e-tiny"
# The shipped tiny-cpu recipe, shortened: SFT logged every 5 steps (the loss chart redraws as they arrive), GRPO
# steps logged one by one and far more of them than the test waits for (it stops the run while GRPO is going). No
# step of the flow needs the format learned: 20 SFT steps of 8 (loss 1.1 -> 0.20, pre-flight OK at 50% in the format)
# take 13 s less than the 40 that reach 0.14 (whose pre-flight also varied: 25-50% in the format).
OVERRIDES = [
    f"name={RECIPE_NAME}", "data.n_sft=512", "data.n_grpo=256", "sft.max_steps=20", "sft.logging_steps=5",
    "sft.save_steps=1000", "sft.per_device_train_batch_size=8", "sft.max_length=256", "grpo.max_steps=500",
    "grpo.logging_steps=1", "grpo.save_steps=1000", "grpo.per_device_train_batch_size=8", "grpo.num_generations=4",
    "grpo.max_completion_length=64", "grpo.preflight_prompts=1", "tracking.swanlab=disabled",
    "grpo.on_preflight_error=continue",  # this short SFT may leave 1 sampled group out of format: GRPO runs on
]
TRAIN_TIMEOUT_MS = 240_000  # model load + 20 SFT steps + pre-flight + first GRPO steps, under load
STOP_TIMEOUT_MS = 120_000
GRPO_STEPS_SHOWN = 6
EXPORT_TIMEOUT_MS = 400_000  # merge, convert, quantize, greedy check: child processes that import torch
CHAT_TIMEOUT_MS = 120_000  # the llama.cpp server starts on the first question


@pytest.fixture(scope="module")
def flow() -> dict:
    """What the steps hand on to each other (run id, export path, ...)."""
    return {}


def need(flow: dict, key: str):
    if key not in flow:
        pytest.skip(f"an earlier step of the flow failed (no {key})")
    return flow[key]


def upload_recipe(page, recipe: Path) -> None:
    """The Training tab's "Upload a recipe" box (its file input carries no label of its own)."""
    box = page.locator("div.block").filter(has=page.get_by_text("Upload a recipe (.yaml)", exact=True))
    box.locator("input[type=file]").set_input_files(str(recipe))


def show_screen(page, name: str) -> None:
    """Open one of the Training tab's screens: "1. Set up a run", "2. Live run", "3. History and comparison"."""
    page.get_by_role("tab", name=name).click()


def region_screenshot(page, name: str, *selectors: str) -> Path:
    """Save the band of the page that holds every one of `selectors` (the first element each matches), full width:
    artifacts/screenshots/e2e-<name>.png, the size the docs embed (the full pages run to 5000 px);
    `python scripts/docs_images.py` copies it, optimized, to docs/images/<name>.png."""
    # the union of the boxes: in the split Training tab the pre-flight sits above the samples table, and a clip of
    # negative height made Playwright's screenshot wait until its timeout
    top, bottom = page.evaluate("""(selectors) => {
        const boxes = selectors.map((sel) => document.querySelector(sel).getBoundingClientRect());
        return [Math.min(...boxes.map((b) => b.top)) + window.scrollY,
                Math.max(...boxes.map((b) => b.bottom)) + window.scrollY];
    }""", list(selectors))
    path = ROOT / "artifacts" / "screenshots" / f"e2e-{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True,
                    clip={"x": 0, "y": max(0, top - 12), "width": page.viewport_size["width"], "height": bottom - top + 24})
    return path


def progress_step(page) -> int:
    match = re.search(r"step (\d+)/", page.locator("#training-progress").inner_text())
    return int(match.group(1)) if match else -1


def test_start_the_tiny_recipe_and_watch_its_chart_update(page, expect, screenshot, tmp_path, flow):
    recipe = tmp_path / f"{RECIPE_NAME}.yaml"
    recipe.write_text(dump_recipe(apply_overrides(load_recipe(ROOT / "recipes" / "tiny-cpu.yaml"), OVERRIDES)))
    upload_recipe(page, recipe)
    expect(page.get_by_text(f"Loaded {recipe.name}")).to_be_visible()

    page.get_by_role("button", name="Start", exact=True).click()
    progress = page.locator("#training-progress")
    run_id_re = re.compile(rf"\d{{8}}-\d{{6}}-{RECIPE_NAME}-[0-9a-f]+")  # run folders: <time>-<recipe>-<hex>
    expect(progress).to_contain_text(run_id_re)
    run_id = run_id_re.search(progress.inner_text()).group(0)
    flow["run_dir"] = Path(os.environ["GRPO_PLAYGROUND_RUNS_DIR"]) / run_id
    assert flow["run_dir"].is_dir(), f"the tab shows run {run_id!r}, but there is no such folder"

    # SFT logs every 5 steps: the first chart is drawn, then redrawn with more points as steps arrive
    expect(progress).to_contain_text("stage sft", timeout=TRAIN_TIMEOUT_MS)
    chart = page.locator("#training-plot-5")  # "Loss": the one chart SFT fills
    chart.locator("svg.marks").wait_for(timeout=TRAIN_TIMEOUT_MS)  # vega draws an svg.marks (empty plot: an icon)
    first_step, first_image = progress_step(page), chart.screenshot()
    deadline = time.monotonic() + TRAIN_TIMEOUT_MS / 1000
    while chart.screenshot() == first_image and time.monotonic() < deadline:
        page.wait_for_timeout(1500)  # the tab polls every 2 s; SFT logs every 5 steps
    assert chart.screenshot() != first_image, "the loss chart did not change while SFT was logging steps"
    assert progress_step(page) > first_step, "the chart changed but the progress did not move"

    # GRPO: the latest sample group appears with each reward's score, the charts fill
    expect(progress).to_contain_text("stage grpo", timeout=TRAIN_TIMEOUT_MS)
    expect(page.locator("#training-samples")).to_contain_text("advantage", timeout=TRAIN_TIMEOUT_MS)
    expect(page.locator("#training-samples")).to_contain_text("check_answer", timeout=TRAIN_TIMEOUT_MS)
    page.locator("#training-plot-0 svg.marks").wait_for()
    deadline = time.monotonic() + TRAIN_TIMEOUT_MS / 1000
    while progress_step(page) < GRPO_STEPS_SHOWN and time.monotonic() < deadline:
        page.wait_for_timeout(1000)  # a few GRPO points, so the screenshot shows curves, not dots
    page.wait_for_timeout(2500)
    screenshot(page, "training-running")
    region_screenshot(page, "training-running", "#training-progress", "#training-plot-4")
    flow["started"] = True


def test_stop_the_run(page, expect, screenshot, flow):
    need(flow, "started")
    run_id = flow["run_dir"].name
    show_screen(page, "2. Live run")
    page.locator("#training-run input").click()
    page.get_by_role("option", name=run_id).click()
    expect(page.locator("#training-progress")).to_contain_text("running")
    page.get_by_role("button", name="Stop (saves, then exits)").click()
    expect(page.locator("#training-run-msg")).to_contain_text(f"Stop requested for {run_id}")
    expect(page.locator("#training-progress")).to_contain_text("stopped", timeout=STOP_TIMEOUT_MS)
    assert (flow["run_dir"] / "sft" / "adapter_config.json").exists(), "SFT finished but saved no adapter"
    screenshot(page, "training-stopped")
    flow["stopped"] = True


def test_open_its_samples_in_the_reward_sandbox(page, expect, screenshot, flow):
    need(flow, "stopped")
    show_screen(page, "2. Live run")
    page.locator("#training-run input").click()
    page.get_by_role("option", name=flow["run_dir"].name).click()
    expect(page.locator("#training-samples")).to_contain_text("advantage")
    page.locator("#training-to-sandbox").click()
    expect(page.get_by_role("tab", name="Reward sandbox")).to_have_attribute("aria-selected", "true")
    completions = page.locator("#sandbox-completions textarea")
    expect(completions).not_to_have_value("")
    # the job's own group, rescored here: one row per completion of the group (num_generations = 4)
    assert completions.input_value().count("\n---\n") == 3
    expect(page.locator("#sandbox-report")).to_contain_text("Group of 4")
    expect(page.locator("#sandbox-details .sandbox-card")).to_have_count(4)
    screenshot(page, "sandbox-from-run")
    region_screenshot(page, "sandbox-from-run", "#sandbox-report", "#sandbox-completions", "#sandbox-details")


def open_stopped_run(page, expect, run_dir: Path) -> None:
    """The live screen showing the flow's run, stopped (a new page opens on the set-up screen)."""
    show_screen(page, "2. Live run")
    page.locator("#training-run input").click()
    page.get_by_role("option", name=run_dir.name).click()
    expect(page.locator("#training-progress")).to_contain_text("stopped")


def test_export_the_run_to_gguf(page, expect, screenshot, flow):
    """The Training tab's Export button: pipelines.export in a child process, its state read back from disk."""
    run_dir = need(flow, "run_dir")
    need(flow, "stopped")
    open_stopped_run(page, expect, run_dir)
    page.locator("#training-export-button").click()
    expect(page.locator("#training-run-msg")).to_contain_text("Exporting")  # at once; the panel follows the disk
    exported = page.locator("#training-export")
    expect(exported).to_contain_text(re.compile("Exported the|Export failed"), timeout=EXPORT_TIMEOUT_MS)
    assert "Exported the" in exported.inner_text(), exported.inner_text()
    # stopped during GRPO, so the last saved adapter is SFT's: that is what gets exported
    assert "Exported the sft stage" in exported.inner_text(), exported.inner_text()
    written = re.search(r"(\S+\.q4_k_m\.gguf)", exported.inner_text())
    assert written, f"no q4_k_m file among the written files: {exported.inner_text()}"
    gguf = run_dir / "export" / "sft" / written.group(1)
    assert gguf.is_file() and gguf.stat().st_size > 100_000, gguf
    assert run_dir in gguf.parents
    assert "Checks that failed" not in exported.inner_text()
    screenshot(page, "exported")
    region_screenshot(page, "exported", "#training-export-heading", "#training-export-files")
    flow["gguf"] = gguf


def test_write_the_run_as_a_verl_or_openrlhf_job(page, expect, flow):
    """The run view's scale-out: the run (GRPO from its SFT adapter; OpenRLHF from the merged export just written) as
    a verl / OpenRLHF job, a zip to download."""
    run_dir = need(flow, "run_dir")
    need(flow, "gguf")
    open_stopped_run(page, expect, run_dir)
    page.locator("#training-scale-out-panel button.label-wrap").click()
    page.locator("#training-scale-out-button").click()
    expect(page.locator("#training-run-msg")).to_contain_text("as a verl / OpenRLHF job")
    status = page.locator("#training-scale-out")
    expect(status).to_contain_text(re.compile("Written|Scale-out failed"), timeout=120_000)
    assert "Written" in status.inner_text(), status.inner_text()
    # the next tick offers the zip, served from the run folder itself
    expect(page.locator("#training-scale-out-file a[download]")).to_have_attribute("download", "scale_out.zip",
                                                                                  timeout=60_000)
    written = run_dir / "scale_out"
    assert (written / "reward.py").is_file() and (run_dir / "scale_out.zip").is_file()
    assert str(run_dir / "export" / "sft" / "merged") in (written / "run_openrlhf.sh").read_text()


def gguf_entry(gguf: Path) -> str:
    """What the Chat tab's picker shows for a run's exported GGUF: `RUN · STAGE · QUANT` (runs/RUN/export/STAGE/...)."""
    run, stage = gguf.parents[2].name, gguf.parent.name
    return f"{run_name(run)[0]} · {stage} · {gguf.name.removesuffix('.gguf').rsplit('.', 1)[1]}"


def ask_in_chat(page, expect, target_text: str, question: str, gold: str) -> list[int]:
    """Pick the checkpoint whose label contains target_text, send the question; returns the reply's lengths
    as the browser saw them change (a streamed reply grows in several steps)."""
    page.get_by_role("tab", name="Chat").click()
    page.get_by_role("button", name="Refresh list").click()
    page.wait_for_timeout(1000)
    page.locator("#chat-model-1 input").click()
    page.get_by_role("option").filter(has_text=target_text).first.click()
    page.locator("#chat-question textarea").fill(question)
    page.locator("#chat-gold textarea, #chat-gold input").first.fill(gold)
    page.evaluate("""() => {
        const bot = document.querySelector('#chat-bot-1');
        window.__replyLengths = [];
        window.__lastChange = Date.now();
        new MutationObserver(() => {
            const bubbles = bot.querySelectorAll('[data-testid="bot"]');  // none until the reply starts
            const last = bubbles[bubbles.length - 1];
            if (last) { window.__replyLengths.push(last.innerText.length); window.__lastChange = Date.now(); }
        }).observe(bot, {subtree: true, childList: true, characterData: true});
    }""")
    page.locator("#chat-send").click()
    # done: the scores table, which the tab fills when the reply has finished (in the update that shows its last
    # text), and a moment for the observer to record that text
    page.wait_for_function("document.querySelector('#chat-scores').innerText.includes('total') && "
                           "window.__replyLengths.some((n) => n > 0) && Date.now() - window.__lastChange > 500",
                           timeout=CHAT_TIMEOUT_MS)
    return page.evaluate("window.__replyLengths")


def test_chat_with_the_gguf_streams_a_scored_reply(page, expect, screenshot, flow):
    gguf = need(flow, "gguf")
    example = load_examples("generator:test", n=1).examples[0]
    lengths = ask_in_chat(page, expect, gguf_entry(gguf), example["problem"], example["answer"])
    grown = sorted({n for n in lengths if n > 0})
    assert len(grown) >= 2, f"the reply appeared in one piece (lengths seen: {lengths}), not streamed"
    scores = page.locator("#chat-scores").inner_text()
    for reward in ("match_format_approximately", "check_answer", "check_numbers", "total"):
        assert reward in scores
    assert gguf_entry(gguf) in page.locator("#chat-model-1 input").input_value()
    screenshot(page, "chat-scored")
    region_screenshot(page, "chat-scored", "#chat-model-1", "#chat-scores")
