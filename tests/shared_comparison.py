"""One real tiny "GRPO vs more SFT" comparison, run once per test session and read by every test of a finished one
(tests/test_compare.py's panel, tests/test_seed_regime.py's experiment): started from a run's recipe through the
panel as a user starts it, the experiment's real child training and scoring every arm. Tests that change what it
wrote copy it into their own folder first (`copy_into`).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The shipped tiny-cpu recipe with small batches and short completions: every arm takes seconds
TINY = ["name=compare-tiny", "sft.per_device_train_batch_size=4", "grpo.per_device_train_batch_size=8",
        "grpo.max_completion_length=32"]
# The panel's inputs (minutes, W, A, held-out, levels, steps per round, rounds, format target) for that run: T is the
# panel's least, 3 s (the arms and the control's checkpoints still take several steps each)
TINY_PLAN = (0.05, 16, 16, 8, "", 3, 1, 0.0)


def tiny_run() -> str:
    """A run folder (not trained) holding the tiny recipe, in the runs folder GRPO_PLAYGROUND_RUNS_DIR names."""
    from grpo_playground.config import apply_overrides, load_recipe
    from grpo_playground.jobs.control import create_run

    return create_run(apply_overrides(load_recipe(ROOT / "recipes" / "tiny-cpu.yaml"), TINY)).name


def wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.5)
    return predicate()


@dataclass(frozen=True)
class Comparison:
    runs: Path  # the runs folder it ran in (the run whose recipe it used, comparisons/<id>/)
    run_id: str  # that run
    id: str  # the comparison
    start_s: float  # how long the panel's Start took to answer

    @property
    def folder(self) -> Path:
        from grpo_playground.contracts.layout import COMPARISONS_DIR

        return self.runs / COMPARISONS_DIR / self.id

    def copy_into(self, runs: Path) -> Path:
        """Copy the runs folder (the run and the comparison) into `runs`; returns the copy's comparison folder."""
        shutil.copytree(self.runs, runs, dirs_exist_ok=True)
        return runs / self.folder.relative_to(self.runs)


@pytest.fixture(scope="session")
def finished_comparison(tmp_path_factory) -> Comparison:
    """TINY_PLAN on a run of TINY, started with the panel's Start and followed from disk until it finished."""
    from grpo_playground.jobs import comparisons as jobs
    from grpo_playground.ui import compare_panel as panel

    runs = tmp_path_factory.mktemp("shared-comparison")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(runs))
        run_id = tiny_run()
        started = time.monotonic()
        panel.run_start(f"run:{run_id}", "", *TINY_PLAN, "", "")  # the page sends every box, the sources empty
        start_s = time.monotonic() - started
        (comparison,) = jobs.list_comparisons()
        finished = wait_for(lambda: jobs.comparison_state(comparison)["state"] not in ("waiting", "running"), 600)
        state = jobs.comparison_state(comparison)
        if not finished:
            jobs.stop_comparison(comparison)
        assert state["state"] == "finished", state["log"]
    return Comparison(runs, run_id, comparison, start_s)
