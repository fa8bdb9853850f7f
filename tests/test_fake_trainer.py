"""The fake trainer (tests/fake_trainer.py) holds to the real one's run-folder contract: one scenario (a stop asked
before the first step, then a resume to the end of SFT and GRPO) run by the real training CLI and by the fake, each
in this process so that every status.json write is seen, gives the same files, the same keys in every file and the
same state transitions. Plumbing tests that start the fake rely on this; when TRL or the job changes what it
writes, this test names the difference to bring into the fake."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

import fake_trainer
from grpo_playground.contracts.layout import (
    ADAPTER_CONFIG,
    DOCTOR_FILE,
    METRICS_FILE,
    PREFLIGHT_FILE,
    SAMPLES_FILE,
    STOP_FILE,
)

ROOT = Path(__file__).resolve().parents[1]
TINY_READY = (ROOT / "assets" / "tiny" / "config.json").exists()
pytestmark = [pytest.mark.slow,  # the real trainer, in this process: TRL's import and a few steps
              pytest.mark.skipif(not TINY_READY, reason="assets/tiny is missing: python -m pipelines.build_tiny")]
# the shipped tiny recipe, a few steps of each stage, a checkpoint every 2 SFT steps and every GRPO step
OVERRIDES = ["tracking.swanlab=disabled", "data.n_sft=64", "data.n_grpo=16", "sft.max_steps=4", "sft.logging_steps=2",
             "sft.save_steps=2", "sft.per_device_train_batch_size=8", "grpo.max_steps=2", "grpo.logging_steps=1",
             "grpo.save_steps=1", "grpo.per_device_train_batch_size=8", "grpo.num_generations=4",
             "grpo.max_completion_length=16", "grpo.preflight_prompts=1", "grpo.on_preflight_error=continue"]


def run_scenario(run_dir: Path, fake: bool) -> list[dict]:
    """Stop before the first step, then resume to the end; every status.json as it was written, in order."""
    from grpo_playground.cli.train import main
    from grpo_playground.training import run_folder

    writes = []
    real_write = run_folder.write_status

    def recorded(path, **updates):
        status = real_write(path, **updates)
        writes.append(dict(status))
        return status

    environ, handler = dict(os.environ), signal.getsignal(signal.SIGTERM)
    with pytest.MonkeyPatch.context() as patch:
        if fake:
            fake_trainer.install(patch)
        patch.setattr(run_folder, "write_status", recorded)
        patch.setattr(sys, "excepthook", sys.excepthook)  # the CLI keeps its traceback file through it
        try:
            argv = ["--config", str(ROOT / "recipes" / "tiny-cpu.yaml"), "--run-dir", str(run_dir)]
            argv += [arg for override in OVERRIDES for arg in ("--set", override)]
            run_dir.mkdir()
            (run_dir / STOP_FILE).write_text("stop")
            assert main(argv) == 0
            assert writes[-1]["state"] == "stopped"
            (run_dir / STOP_FILE).unlink()  # as the app's resume does
            assert main([*argv, "--resume"]) == 0
        finally:
            signal.signal(signal.SIGTERM, handler)  # the job's own: a flag for its trainer
            os.environ.clear()
            os.environ.update(environ)
    return writes


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{"real": (run folder, status writes), "fake": (...)}: the real one first, before the fake's stand-ins."""
    root = tmp_path_factory.mktemp("contract")
    return {kind: (root / kind, run_scenario(root / kind, fake=kind == "fake")) for kind in ("real", "fake")}



def transitions(writes: list[dict]) -> list[tuple]:
    """(state, stage, step) each time one of them changed."""
    seen = [(w.get("state"), w.get("stage"), w.get("step")) for w in writes]
    return [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]


def test_the_same_state_transitions_and_status_keys(runs):
    (_, real), (_, fake) = runs["real"], runs["fake"]
    assert transitions(fake) == transitions(real)
    assert [sorted(w) for w in fake] == [sorted(w) for w in real]


def layout(run: Path) -> set[str]:
    """The run folder's files, and of checkpoint and adapter folders what the job's readers open (the weights
    are not the fake's to write); the doctor's file only exists when its rules fire on the values."""
    read = (ADAPTER_CONFIG, fake_trainer.TRAINER_STATE)
    return {str(path.relative_to(run)) for path in run.rglob("*")
            if path.parent == run and path.name != DOCTOR_FILE or path.name.startswith("checkpoint-")
            or path.name in read and (path.parent.parent == run or path.parent.name.startswith("checkpoint-"))}


def test_the_same_files(runs):
    (real, _), (fake, _) = runs["real"], runs["fake"]
    assert sorted(layout(fake)) == sorted(layout(real))


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_same_rows_with_the_same_keys(runs):
    (real, _), (fake, _) = runs["real"], runs["fake"]
    for name in (METRICS_FILE, SAMPLES_FILE):
        assert [(r["stage"], r["step"], sorted(r)) for r in rows(fake / name)] == \
            [(r["stage"], r["step"], sorted(r)) for r in rows(real / name)], name
    for name in (DOCTOR_FILE,):  # what a finding holds, where both runs have one
        assert {tuple(sorted(r)) for r in rows(fake / name)} <= {tuple(sorted(r)) for r in rows(real / name)}
    real_report, fake_report = (json.loads((run / PREFLIGHT_FILE).read_text()) for run in (real, fake))
    assert sorted(fake_report) == sorted(real_report)
    assert sorted(fake_report["groups"][0]) == sorted(real_report["groups"][0])
    for stage in ("sft", "grpo"):
        assert json.loads((fake / stage / ADAPTER_CONFIG).read_text())["peft_type"] == \
            json.loads((real / stage / ADAPTER_CONFIG).read_text())["peft_type"]
