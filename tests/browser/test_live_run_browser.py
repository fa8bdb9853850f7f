"""The live-run screen when it matters, in a real browser: GRPO's charts on their own axis with whole legends, the
hand-over between stages, a finished run that says what it did and what to do next, controls enabled only when they
can act, a doctor panel that reads, and an export with its downloads, its checks and "Chat with it".

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_live_run_browser.py

Run folders are written here in the formats the jobs write (docs/ARCHITECTURE.md "Run folder"); a `sleep` child
stands in for a running job (the pid its status names).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TIMEOUT_MS, drawn_texts, open_page
from test_e2e_flow import show_screen

expect = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=TIMEOUT_MS)  # its own 5 s is too short for a tick under load

SCREEN = {"width": 1280, "height": 800}


def runs() -> Path:
    return Path(os.environ["GRPO_PLAYGROUND_RUNS_DIR"])


def write_run(run_id: str, status: dict, sft_steps=range(10, 250, 10), grpo_steps=range(1, 13)) -> Path:
    """SFT logged every 10 of 240 steps, then GRPO's 12 steps (each timed): the quick recipe's shape."""
    run = runs() / run_id
    run.mkdir(parents=True, exist_ok=True)
    (run / "status.json").write_text(json.dumps({"updated": time.time(), **status}))
    now = time.time()
    rows = [{"stage": "sft", "step": s, "max_steps": 240, "time": now + s, "loss": 2.0 / s, "learning_rate": 2e-4,
             "timing/forward_backward_s": 0.5, "timing/rollout_s": 0.0, "timing/other_s": 0.1} for s in sft_steps]
    rows += [{"stage": "grpo", "step": s, "max_steps": 12, "time": now + 300 + s, "reward": round(-1.8 + 0.2 * s, 4),
              "rewards/check_answer/mean": -1.0 + 0.1 * s,
              "reward_std": 0.5, "loss": 0.01 * s, "learning_rate": 5e-6, "completions/clipped_ratio": 0.1,
              "frac_reward_zero_std": 0.25, "timing/rollout_s": 2.0, "timing/forward_backward_s": 1.0,
              "timing/other_s": 0.2} for s in grpo_steps]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def pick(page, run_id: str) -> None:
    show_screen(page, "2. Live run")
    page.locator("#training-run input").click()
    page.get_by_role("option", name=run_id).click()
    page.locator("#training-progress").get_by_text(run_id).wait_for()


def x_ticks(page, plot: int) -> list[int]:
    page.locator(f"#training-plot-{plot} svg.marks").wait_for()
    labels = page.locator(f"#training-plot-{plot} svg g[aria-label^='X-axis'] .role-axis-label text")
    return [int(t) for t in drawn_texts(page, labels)]


def test_grpo_charts_have_their_own_axis_whole_legends_and_readable_widths(browser, app_url):
    run_id = "20991231-235959-grpo-axis-0101"
    write_run(run_id, {"state": "finished", "stage": "grpo", "step": 12, "max_steps": 12})
    context, page = open_page(browser, app_url)
    try:
        page.set_viewport_size(SCREEN)
        pick(page, run_id)
        # Loss (plot 5) shows GRPO's 12 steps on their own axis, not squashed onto SFT's 0-240
        expect(page.locator("#training-plot-5")).to_contain_text("Loss: grpo")
        assert max(x_ticks(page, 5)) <= 12, x_ticks(page, 5)
        # the legend says the whole key (it was cut: "zero-std groups (frac_reward_zero_std")
        legend = drawn_texts(page, page.locator("#training-plot-4 svg g.role-legend text"))
        assert "zero-std groups (frac_reward_zero_std)" in legend, legend
        for plot in (0, 1, 5):  # two thirds of a laptop screen, two charts a row
            assert page.locator(f"#training-plot-{plot}").bounding_box()["width"] >= 370
        # the stage toggle shows SFT's loss and its step time without GRPO's phases
        page.locator("#training-chart-stage").get_by_text("sft", exact=True).click()
        expect(page.locator("#training-plot-5")).to_contain_text("Loss: sft")
        expect(page.locator("#training-plot-7")).to_contain_text("Where the step time went (s): sft")
        assert max(x_ticks(page, 5)) >= 200
        phases = drawn_texts(page, page.locator("#training-plot-7 svg g.role-legend text"))
        assert "rollout" not in phases and "forward backward" in phases, phases
    finally:
        context.close()


def test_the_hand_over_to_grpo_says_starting_not_step_0_of_sfts_steps(page):
    job = subprocess.Popen(["sleep", "120"])
    try:
        run_id = "20991231-235959-handover-0102"
        # the job has just begun GRPO: status.json still holds SFT's max_steps and its final ETA of 0
        write_run(run_id, {"state": "running", "stage": "grpo", "step": 0, "max_steps": 240, "eta_s": 0,
                           "pid": job.pid}, grpo_steps=[])
        pick(page, run_id)
        progress = page.locator("#training-progress")
        expect(progress).to_contain_text("stage grpo · starting")
        assert "0/240" not in progress.inner_text() and "ETA 0m00s" not in progress.inner_text()
        # a running job: Stop can act, Resume cannot
        expect(page.locator("#training-stop")).to_be_enabled()
        expect(page.locator("#training-resume")).to_be_disabled()
    finally:
        job.kill()


def test_a_finished_run_says_what_it_did_and_what_to_do_next(page):
    run_id = "20991231-235959-finished-0103"
    run = write_run(run_id, {"state": "finished", "stage": "all", "step": 12, "max_steps": 12,
                             "stage_seconds": {"sft": 70.0, "grpo": 100.0}})
    (run / "grpo").mkdir()
    (run / "grpo" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "assets/tiny"}))
    (run / "samples.jsonl").write_text(json.dumps({
        "stage": "grpo", "step": 12, "prompt": "6 x 7?", "answer": "42", "rewards": {}, "total": [], "advantages": [],
        "completions": ["<start_working_out>6 x 7<end_working_out><SOLUTION>42</SOLUTION>", "42"]}) + "\n")
    (run / "preflight.json").write_text(json.dumps({"level": "ok", "why": "GRPO has a signal", "format_rate": 0.98}))
    pick(page, run_id)
    summary = page.locator("#training-summary")
    expect(summary).to_contain_text("Finished in 2m50s (sft 1m10s, grpo 1m40s)")
    expect(summary).to_contain_text("GRPO reward rose: -1.30 -> 0.30")  # first vs last third, with its error
    expect(summary).to_contain_text("1/2 of the last sampled group in the format")
    expect(summary).to_contain_text("98% in the format at the pre-flight")
    expect(summary).to_contain_text("accuracy: not evaluated yet")
    # nothing to stop, nothing to resume: both disabled (a bright red Stop stayed enabled)
    expect(page.locator("#training-stop")).to_be_disabled()
    expect(page.locator("#training-resume")).to_be_disabled()
    # an evaluation saved later shows up in the card
    from grpo_playground.jobs import eval_results as store

    (store.evals_dir() / "20991231-235959-finished-grpo.json").write_text(json.dumps({
        "model": str(run / "grpo"), "data": "generator:test", "n": 50, "format_rate": 0.96, "accuracy": 0.4,
        "accuracy_se": 0.07, "lenient_accuracy": 0.42, "mean_completion_tokens": 40.0, "recheck_rate": 0.0}))
    expect(summary).to_contain_text("grpo accuracy 40.0%")
    # "Chat with it" on a run with no GGUF (and no GPU) says what to do first, and stays on the Training tab
    page.locator("#training-next-chat").click()
    expect(page.locator("#training-run-msg")).to_contain_text("has nothing to chat with yet: export it to GGUF first")
    expect(page.get_by_role("tab", name="Training")).to_have_attribute("aria-selected", "true")
    # "Evaluate it" opens the Evaluate tab with the run's stage picked
    page.locator("#training-next-eval").click()
    expect(page.get_by_role("tab", name="Evaluate")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#eval-checkpoints")).to_contain_text(f"{run_id}/grpo")


def test_a_paused_run_is_called_paused_and_can_be_resumed(page):
    run_id = "20991231-235959-paused-0104"
    write_run(run_id, {"state": "stopped", "stage": "grpo", "step": 0, "max_steps": 12, "paused_at_preflight": True,
                       "reason": "Paused before GRPO: the pre-flight says ERROR"}, grpo_steps=[])
    pick(page, run_id)
    expect(page.locator("#training-progress")).to_contain_text(f"{run_id}: paused before GRPO")
    expect(page.locator("#training-resume")).to_be_enabled()
    expect(page.locator("#training-stop")).to_be_disabled()


def test_reopening_the_browser_while_a_job_runs_lands_on_its_live_screen(browser, app_url):
    job = subprocess.Popen(["sleep", "120"])
    try:
        run_id = "20991231-235959-running-0105"
        write_run(run_id, {"state": "running", "stage": "sft", "step": 40, "max_steps": 240, "pid": job.pid},
                  sft_steps=range(10, 50, 10), grpo_steps=[])
        context, page = open_page(browser, app_url)
        try:
            expect(page.get_by_role("tab", name="2. Live run")).to_have_attribute("aria-selected", "true")
            expect(page.locator("#training-progress")).to_contain_text(f"{run_id}: running")
        finally:
            context.close()
    finally:
        job.kill()


def test_the_doctor_panel_reads_whole_with_a_true_caption_and_styled_severity(browser, app_url):
    run_id = "20991231-235959-doctor-0106"
    run = write_run(run_id, {"state": "finished", "stage": "grpo", "step": 12, "max_steps": 12})
    findings = [{"step": 4, "rule": "zero_std", "severity": "error", "stage": "grpo",
                 "message": "every group scored the same: no gradient", "knob": "raise grpo.temperature or train SFT longer"},
                {"step": 6, "rule": "length_pinned", "severity": "warning", "stage": "grpo",
                 "message": "completions hit the length limit", "knob": "raise grpo.max_completion_length"}]
    (run / "doctor.jsonl").write_text("".join(json.dumps(f) + "\n" for f in findings))
    context, page = open_page(browser, app_url)
    try:
        page.set_viewport_size(SCREEN)
        pick(page, run_id)
        panel = page.locator("#training-findings")
        expect(panel).to_contain_text("Try: raise grpo.temperature or train SFT longer")
        caption = page.locator("#training-findings-caption")
        expect(caption).to_contain_text("2 findings (1 error, 1 warning)")
        assert "empty" not in caption.inner_text()
        # every knob and message is whole: wrapped, never cut or scrolled out of its box
        cut = page.evaluate("""() => [...document.querySelectorAll('#training-findings .doctor-knob, #training-findings .doctor-message')]
            .filter((e) => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > window.innerWidth)
            .map((e) => e.textContent)""")
        assert cut == [], cut
        colours = page.evaluate("""() => [...document.querySelectorAll('#training-findings .doctor-severity')]
            .map((e) => [e.textContent, getComputedStyle(e).backgroundColor])""")
        assert dict(colours)["ERROR"] == "rgb(220, 38, 38)" and dict(colours)["WARNING"] != dict(colours)["ERROR"]
        assert [c[0] for c in colours] == ["ERROR", "WARNING"]  # the most urgent first
    finally:
        context.close()


def test_an_export_offers_its_files_its_greedy_check_the_sft_stage_and_a_chat(page):
    from grpo_playground.serving import llamacpp_unavailable_reason

    run_id = "20991231-235959-exported-0107"
    run = write_run(run_id, {"state": "finished", "stage": "grpo", "step": 12, "max_steps": 12})
    for stage in ("sft", "grpo"):
        (run / stage).mkdir()
        (run / stage / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "assets/tiny"}))
    out = run / "export" / "grpo"
    out.mkdir(parents=True)
    gguf = out / f"{run_id}-grpo.q4_k_m.gguf"
    gguf.write_bytes(b"GGUF-bytes")
    (out / "Modelfile").write_text("FROM ./x.gguf\n")
    cases = [{"prompt": "q", "match": True, "first_difference": None}] * 3
    (out / "export.json").write_text(json.dumps({
        "state": "finished", "started": 10.0, "stage": "grpo", "errors": [],
        "files": {"gguf_q4_k_m": str(gguf), "modelfile": str(out / "Modelfile"), "merged": str(out / "merged")},
        "checks": {"greedy_f16": {"file": "x.f16.gguf", "max_new_tokens": 16, "match": True, "cases": cases}}}))
    # a finished export process: its pid is above the kernel's pid_max (2**22), so it is not alive
    (run / "export_job.json").write_text(json.dumps({"pid": 2**22 + 7, "started": 5.0, "command": [],
                                                      "result": str(out / "export.json")}))
    pick(page, run_id)
    status = page.locator("#training-export")
    expect(status).to_contain_text("f16 GGUF vs the HF model, greedy (16 tokens each): the same tokens on 3/3 prompts")
    expect(status).to_contain_text("Exported the grpo stage")
    # the files download from the page, straight from the run folder
    link = page.locator(f'#training-export-files a[href*="{gguf.name}"]').first
    link.wait_for()
    response = page.request.get(link.get_attribute("href"))
    assert response.ok and response.body() == b"GGUF-bytes"
    # the SFT stage can be exported too
    expect(page.locator("#training-export-stage")).to_contain_text("sft")
    page.locator("#training-export-stage").get_by_text("sft", exact=True).click()
    if llamacpp_unavailable_reason():
        pytest.skip(f"llama.cpp is not available here, so the GGUF is not a chat target: {llamacpp_unavailable_reason()}")
    page.locator("#training-export-chat").click()
    expect(page.get_by_role("tab", name="Chat")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#chat-model-1 input")).to_have_value(re.compile(r"llama\.cpp · exported · grpo · q4_k_m"))
