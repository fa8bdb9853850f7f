"""The comparison's steps and arms in the order they run, and the progress file (<work>/progress.json) that says
which one runs now: the experiment writes it, the app's panel reads it while it is written."""

from __future__ import annotations

import time
from pathlib import Path

from grpo_playground.contracts.layout import PROGRESS_FILE
from grpo_playground.contracts.process import read_json, write_json_atomic

ARMS = ("sft_w", "sft_w+grpo_a", "sft_w+more_sft_w", "sft_w+fresh_sft")
STEPS = ("data", *ARMS, "eval")  # in the order they run
TUNED = "sft_w+tuned_sft_w"  # not trained: the more-SFT control's best checkpoint on the pilot slice
SCORED = (*ARMS[:3], TUNED, ARMS[3])  # the order of the report's rows


def mark(work: Path, step: str, state: str, run_dir: Path | None = None, **facts) -> None:
    """Record in <work>/progress.json that `step` is now running or done (and where it trains, and `facts` such as
    sft-W's rounds so far), atomically: the app reads the file while this process writes it."""
    path = work / PROGRESS_FILE
    progress = read_json(path) or {"order": list(STEPS), "steps": {}}
    entry = {**progress["steps"].get(step, {}), "state": state, "time": time.time(), **facts}  # "done" keeps run_dir
    if run_dir:
        entry["run_dir"] = str(run_dir)
    progress["steps"][step] = entry
    work.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, progress)
