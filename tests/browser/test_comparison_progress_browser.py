"""A running "GRPO vs more SFT" comparison says where it is, in a real browser: sft-W's round and the format rate
after each round against the target (the step counter restarts every round), the time elapsed and what is left;
and the Training tab says the training slot is held by it.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_comparison_progress_browser.py

The comparison folder is written here in the formats the job and the experiment write (docs/ARCHITECTURE.md); a
`sleep` child stands in for the experiment's process.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from conftest import TIMEOUT_MS
from test_e2e_flow import show_screen

expect = pytest.importorskip("playwright.sync_api").expect
expect.set_options(timeout=TIMEOUT_MS)

ORDER = ["data", "sft_w", "sft_w+grpo_a", "sft_w+more_sft_w", "sft_w+fresh_sft", "eval"]


def test_a_running_comparison_shows_its_rounds_format_rates_and_time_left(page):
    from grpo_playground.contracts.process import process_start_ticks
    from grpo_playground.contracts.layout import COMPARISON_JOB, COMPARISON_LOG, COMPARISON_WORK, PROGRESS_FILE
    from grpo_playground.run_layout import comparisons_dir

    job = subprocess.Popen(["sleep", "120"])
    try:
        folder = comparisons_dir() / "20991231-235959-compare-0201"
        work = folder / COMPARISON_WORK
        work.mkdir(parents=True)
        (folder / COMPARISON_JOB).write_text(json.dumps({  # a job record (grpo_playground.jobs.record) that runs
            "kind": "comparison", "state": "running", "pid": job.pid, "start_ticks": process_start_ticks(job.pid),
            "started": time.time() - 250, "steps": [], "meta": {
                "recipe_name": "recipes/tiny-cpu.yaml", "command": "grpo-playground compare ...",
                "plan": {"minutes": 5, "n_worked": 400, "n_answers": 400, "n_eval": 100}}}))
        (folder / COMPARISON_LOG).write_text("[compare] got the training slot\n")
        rounds = [{"steps": 40, "seconds": 30.0, "format_rate": r} for r in (0.797, 0.594, 0.625)]
        (work / PROGRESS_FILE).write_text(json.dumps({"order": ORDER, "steps": {
            "data": {"state": "done", "time": time.time() - 240},
            "sft_w": {"state": "running", "time": time.time(), "round": 4, "max_rounds": 10, "rounds": rounds,
                      "format_target": 0.95, "run_dir": str(work / "sft_w_round3")}}}))
        page.reload()
        page.get_by_role("tab", name="Evaluate").click()
        status = page.locator("#compare-status")
        expect(status).to_contain_text("sft_w: running (round 4 of at most 10")
        expect(status).to_contain_text("format rate after each round: 79.7% -> 59.4% -> 62.5% (target 95%)")
        expect(status).to_contain_text("Elapsed 4m")
        expect(status).to_contain_text("Still to come: 3 arm(s) of at most 5 min each (~15m00s)")
        page.get_by_role("tab", name="Training").click()
        show_screen(page, "2. Live run")
        expect(page.locator("#training-queue")).to_contain_text("the training slot is held by the comparison")
    finally:
        job.kill()
