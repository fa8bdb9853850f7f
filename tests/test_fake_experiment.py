"""The fake experiment (tests/fake_experiment.py) holds to the real one: run on the plan of the session's shared
comparison (tests/shared_comparison.py: the real experiment in the panel's job), it writes the same files in its
work folder and beside it, and the same keys, nested, in the result, in progress.json and in every evaluation.
Plumbing tests that start the fake rely on this; when the experiment or the eval CLI changes what it writes, this
test names the difference to bring into the fake."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_playground.experiments.plan import ComparisonPlan
from grpo_playground.jobs import comparisons as jobs
from grpo_playground.contracts.layout import (
    COMPARISON_JOB, COMPARISON_RESULT, COMPARISON_WORK, PROGRESS_FILE, RECIPE_FILE,
)
from grpo_playground.contracts.process import read_json

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def folders(finished_comparison, tmp_path_factory) -> dict[str, Path]:
    """{"real": the shared comparison's folder, "fake": one with its recipe and plan, run by the fake}."""
    real = finished_comparison.folder
    fake = tmp_path_factory.mktemp("fake-comparison")
    shutil.copyfile(real / RECIPE_FILE, fake / RECIPE_FILE)
    plan = ComparisonPlan(**read_json(real / COMPARISON_JOB)["meta"]["plan"])
    argv = jobs.experiment_command(fake, plan)[3:]  # python -m MODULE ARGS
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "fake_experiment.py"), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"real": real, "fake": fake}


def shape(value):
    """The keys of every dict, nested (a list by its first item's), without the values."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return None


def named(path: Path, root: Path) -> str:
    """A path relative to `root`, a checkpoint's step left out: how many steps fit in T differs."""
    return re.sub(r"checkpoint-\d+", "checkpoint-N", str(path.relative_to(root)))


def test_the_same_files(folders):
    def files(folder: Path) -> set[str]:
        work = folder / COMPARISON_WORK
        return {*(p.name for p in folder.glob(f"{COMPARISON_RESULT}.*")),
                *(named(p, work) for p in [*work.iterdir(), *work.glob("data/*")])}

    assert sorted(files(folders["fake"])) == sorted(files(folders["real"]))


def test_the_same_keys_in_the_result_and_the_progress_file(folders):
    real, fake = (folders[kind] for kind in ("real", "fake"))
    result = {kind: json.loads((folder / f"{COMPARISON_RESULT}.json").read_text()) for kind, folder in folders.items()}
    assert shape(result["fake"]) == shape(result["real"])
    assert shape(read_json(fake / COMPARISON_WORK / PROGRESS_FILE)) == \
        shape(read_json(real / COMPARISON_WORK / PROGRESS_FILE))


def test_the_same_keys_in_every_evaluation(folders):
    def evaluations(folder: Path) -> dict:
        work = folder / COMPARISON_WORK
        return {named(p, work): shape(read_json(p)) for p in work.glob("eval*.json")}

    real = evaluations(folders["real"])
    assert len(real) >= 5 and evaluations(folders["fake"]) == real
