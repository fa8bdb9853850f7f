"""The UI process never imports the heavy ML stack nor eval/export internals, and builds the demo fast.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_ui_imports.py

Runs `import app` (which builds the whole demo) in a fresh interpreter: this test process has probably
imported torch already through other tests, so its own sys.modules proves nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ["torch", "transformers", "trl", "peft", "datasets", "unsloth", "vllm"]
# The "app start to ready in under 5 s". Gradio's own import (2-12 s on 2 shared cores) is not
# ours to speed up and is left out; torch alone would take 3+ s more.
MAX_BUILD_SECONDS = 5.0

PROBE = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT)!r})
import gradio
start = time.perf_counter()
import app
seconds = time.perf_counter() - start
heavy = sorted(name for name in sys.modules if name.split(".")[0] in {HEAVY!r})
child_side = sorted(n for n in sys.modules if n.startswith(("grpo_playground.eval.", "grpo_playground.export.")))
print(json.dumps({{"seconds": seconds, "heavy": heavy, "child_side": child_side, "demo": type(app.demo).__name__}}))
"""


@pytest.mark.slow  # a fresh interpreter imports the app
def test_import_app_builds_the_demo_without_heavy_libraries_and_fast():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"`import app` failed:\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["demo"] == "Blocks"
    heavy_roots = sorted({name.split(".")[0] for name in report["heavy"]})
    assert not heavy_roots, (f"the UI process imported {heavy_roots} (e.g. {report['heavy'][:5]}): import them "
                             "inside the functions that need them, in the child process")
    # tests/test_import_graph.py's entry points: the eval runner and the export pipeline load in their CLIs only
    assert not report["child_side"], (
        f"the UI process loaded eval/export internals {report['child_side']}: what the app needs of them lives in "
        "jobs.eval_results and rewards.grading")
    assert report["seconds"] < MAX_BUILD_SECONDS, f"building the demo took {report['seconds']:.1f} s"
