"""The Space end to end on CPU (benchmarks/space_e2e.py): the app started by scripts/start.sh on a data root with an
owner token, driven through its own API as the browser drives it: the `quick` recipe from /start to finished with a
stop and a resume, its charts' rows and sample group, a GGUF export, a llama.cpp chat with the exported GRPO model
(again after an app restart) and an evaluation of base, SFT and GRPO. The same script runs on the GPU machine with
--gpu (results/gpu/space_e2e.json), its GRPO-vs-more-SFT comparison included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.space_e2e import reply_text
from grpo_playground.child_process import free_port
from grpo_playground.config import load_recipe
from grpo_playground.contracts.shipped import RECIPES_DIR

ROOT = Path(__file__).resolve().parents[1]


def test_a_reply_that_has_not_begun_has_no_text():
    """Gradio drops the empty assistant message, so the pane ends with the question until the reply begins: the
    driver once took the question for the first token (0.1 s "to first token" beside an 86-s server start)."""
    question = {"role": "user", "content": "What is 3 + 4?"}
    assert reply_text([question]) == ""
    assert reply_text([question, {"role": "assistant", "content": [{"type": "text", "text": "<SOLUTION>7"}]}]) \
        == "<SOLUTION>7"
    assert reply_text([]) == "" and reply_text(None) == ""


# The quick demo with 20 of its 240 SFT steps and 8 of its GRPO steps, edits in the recipe that /start receives as a
# user makes them in the form: the same path (SFT, pre-flight, GRPO, stop and resume mid-GRPO, export, chats,
# evaluation); nothing here needs the format learned (120 SFT steps cost ~55 s more). The demo's own 5-minute promise,
# and the format its SFT teaches (the pre-flight's >= 90%), are checked by tests/browser/test_quick_browser.py.
SFT_STEPS, GRPO_STEPS = 20, 8
# The comparison step is left out here (it cost 1.5-3.5 minutes): a real one-round comparison of the same plan runs
# to its result in the session's finished_comparison (tests/shared_comparison.py, read by tests/test_compare.py), and
# /compare_start and /compare_status drive one through the app's API in tests/test_compare.py's gsm8k-sourced test.
SKIPPED = "compare"


@pytest.mark.slow
def test_the_space_end_to_end_through_its_api(tmp_path):
    out = tmp_path / "space_e2e.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("GRPO_PLAYGROUND_RUNS_DIR", None)  # the data root decides, as on a Space
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.space_e2e", "--out", str(out), "--data-root", str(tmp_path / "data"),
         "--port", str(free_port()), "--set", f"sft.max_steps={SFT_STEPS}", "--set", f"grpo.max_steps={GRPO_STEPS}",
         "--eval-n", "8", "--skip", SKIPPED, "--timeout", "900"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    result = json.loads(out.read_text())
    steps = {s["step"]: s for s in result["steps"]}
    failed = {name: s["detail"] for name, s in steps.items() if s["outcome"] != "ok"}
    assert not failed and done.returncode == 0, f"{failed}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert (tmp_path / "data" / "runs").is_dir()  # start.sh put the runs on the data root

    follow = steps["follow_to_grpo"]["detail"]
    assert follow["series"] == {k: True for k in follow["series"]}, "a chart series had no data during GRPO"
    assert len(follow["per_reward_means"]) == 3
    assert steps["samples"]["detail"]["completions"], "no sample group while GRPO ran"
    stopped = steps["stop_resume"]["detail"]
    finished = steps["train_finish"]["detail"]
    # the resumed run went on past its stop to the recipe's end (its steps, or grpo.max_minutes on a busy machine)
    quick = load_recipe(RECIPES_DIR / "quick.yaml")
    assert SFT_STEPS < quick.sft.max_steps and GRPO_STEPS < quick.grpo.max_steps  # the edits shorten the demo
    assert stopped["stage"] == "grpo" and stopped["stopped_at_step"] < finished["grpo_steps"] <= GRPO_STEPS
    assert any(name.endswith(".q8_0.gguf") for name in steps["export"]["detail"]["files"])
    for chat in ("chat", "chat_again", "chat_after_restart"):
        detail = steps[chat]["detail"]
        assert detail["replies"][0].strip(), f"{chat}: empty reply"
        # the first token comes after the server's last start message, never before
        assert detail["last_start_progress_s"] is None or detail["send_to_first_token_s"] >= detail["last_start_progress_s"]
    assert steps["app_restart"]["detail"]["was_running"]
    evaluated = steps["eval_transformers"]["detail"]["checkpoints"]
    assert len(evaluated) == 3 and all(row["n"] == 8 for row in evaluated.values())
    assert SKIPPED not in steps
    assert (out.with_suffix("") / "app-1.log").is_file() and (out.with_suffix("") / "app-2.log").is_file()
