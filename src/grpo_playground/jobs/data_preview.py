"""The Training tab's data preview, run as a short child process (`python -m grpo_playground.data.preview`): it
loads the model's tokenizer, which the app never imports. Owner only, like Start: a source spec names files on the
server, and the preview shows their rows. Bounded in time and output; one at a time per app process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.config import RunConfig, dump_recipe
from grpo_playground.jobs.control import check_model_loads
from grpo_playground.owner import check_owner
from grpo_playground.contracts.layout import RECIPE_FILE
from grpo_playground.contracts.states import TRAINED_STAGES

TIMEOUT_S = 120  # importing transformers and reading a tokenizer takes ~5-15 s on 2 busy cores
MAX_OUTPUT_BYTES = 1_000_000  # the child cuts every text at 4,000 characters: 10 rows stay far under this
_ONE_AT_A_TIME = threading.Lock()


def run_preview(config: RunConfig, stage: str, token: str | None = None, rows: int | None = None) -> dict:
    """The preview's JSON (`data.preview.DataPreview.to_dict()`), or a ValueError/RuntimeError saying what is wrong."""
    check_owner(token, "previewing data")
    if stage not in TRAINED_STAGES:
        raise ValueError(f"stage {stage!r}: preview the data of 'sft' or 'grpo'")
    check_model_loads(config)  # a hub id offline: said at once, not after the child's timeout
    if not _ONE_AT_A_TIME.acquire(blocking=False):
        raise RuntimeError("a data preview is already running: wait for it and press Preview again")
    try:
        with tempfile.TemporaryDirectory(prefix="preview-") as folder:
            recipe = Path(folder) / RECIPE_FILE
            recipe.write_text(dump_recipe(config), encoding="utf-8")
            command = [sys.executable, "-m", "grpo_playground.data.preview", str(recipe), "--stage", stage]
            if rows is not None:
                command += ["--rows", str(rows)]
            try:
                done = subprocess.run(command, capture_output=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
                                      env=job_env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1")))
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"the data preview took over {TIMEOUT_S} s (loading the tokenizer or reading the "
                                   "source): check data source and model, or start the run and read its log") from None
    finally:
        _ONE_AT_A_TIME.release()
    try:
        if len(done.stdout) > MAX_OUTPUT_BYTES:
            raise ValueError("output too large")
        result = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the data preview failed: {tail[0][:300]}") from None
    if "error" in result:
        raise ValueError(f"{stage} data: {result['error']}")
    return result["preview"]
