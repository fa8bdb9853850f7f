"""Warm starts (jobs.warm_start): a job whose supervisor and step are forked from the launcher, which imported the
training stack once, does what a job of fresh interpreters does: the same adapter from the same recipe, the same
reason when its step fails, Stop reaching the step and its whole group. A step is never forked where a fresh
interpreter could differ. The jobs run the real training CLI on the embedded `tiny` model, a few short steps.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from test_resume import adapter, assert_same_adapter
from test_train_cli import RECIPE, SMALL

from grpo_playground.config import apply_overrides, load_recipe
from grpo_playground.contracts.layout import LOG_FILE
from grpo_playground.contracts.process import group_members
from grpo_playground.child_process import job_env
from grpo_playground.jobs import warm_start
from grpo_playground.jobs.control import create_run, spawn_job, stop_run, train_command
from grpo_playground.jobs.runs import load_run, reconcile
from grpo_playground.run_layout import adapter_dir, read_status

@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("GRPO_PLAYGROUND_STOP_GRACE_S", "5")
    return tmp_path


@pytest.fixture
def launcher(runs, monkeypatch):
    """A launcher of this test's own, ready (done importing): every job started while it lives is forked."""
    monkeypatch.delenv(warm_start.WARM_ENV, raising=False)
    monkeypatch.setattr(warm_start, "_launcher_failed", False)
    ours = warm_start._Launcher(job_env())
    monkeypatch.setattr(warm_start, "_launcher", ours)
    deadline = time.monotonic() + 180
    while not ours.usable():
        assert ours.proc.returncode is None, f"the launcher exited ({ours.proc.returncode}) before it was ready"
        assert time.monotonic() < deadline, "the launcher was not ready in 180 s"
        time.sleep(0.2)
    yield ours
    ours.close()


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def start(overrides: list[str], stage: str = "sft") -> Path:
    run_dir = create_run(apply_overrides(load_recipe(RECIPE), [*SMALL, *overrides]), "warm")
    spawn_job(run_dir, train_command(run_dir, stage), stage)
    return run_dir


def wait_state(run_dir: Path, states: set[str], timeout: float = 300.0) -> str:
    """The run's state once it is one of `states` and its supervisor has written its record's end (the trainer
    says it finished first)."""
    deadline = time.monotonic() + timeout
    while (state := reconcile(load_run(run_dir)).state) not in states or not load_run(run_dir).job.get("ended"):
        assert time.monotonic() < deadline, f"{run_dir.name} still {state} after {timeout:.0f} s"
        time.sleep(0.2)
    return state


@pytest.mark.slow  # trains, after the launcher imports torch
def test_a_forked_job_trains_the_adapter_a_fresh_interpreter_trains(runs, launcher, monkeypatch):
    warm = start(["sft.warmup_steps=1"])
    supervisor = load_run(warm).job["pid"]
    assert parent_of(supervisor) == launcher.proc.pid, "the job's supervisor was not forked by the launcher"
    command = Path(f"/proc/{supervisor}/cmdline").read_bytes().replace(b"\0", b" ")  # what ps shows
    assert b" -m grpo_playground.jobs.supervisor " in command, command
    assert wait_state(warm, {"finished", "failed"}) == "finished", (warm / LOG_FILE).read_text()[-3000:]
    assert load_run(warm).job["steps"][0]["warm"], "the training step was not forked from the warm supervisor"

    monkeypatch.setenv(warm_start.WARM_ENV, "0")  # the same recipe, every process a fresh interpreter
    cold = start(["sft.warmup_steps=1"])
    assert parent_of(load_run(cold).job["pid"]) != launcher.proc.pid
    assert wait_state(cold, {"finished", "failed"}) == "finished", (cold / LOG_FILE).read_text()[-3000:]
    assert load_run(cold).job["steps"][0]["warm"] is False
    assert_same_adapter(adapter(adapter_dir(warm, "sft")), adapter(adapter_dir(cold, "sft")), "warm vs cold")


@pytest.mark.slow  # trains, after the launcher imports torch
def test_a_forked_step_that_fails_says_why_as_a_fresh_one_does(runs, launcher, monkeypatch):
    broken = ["data.sft_source=gsm8k:/nonexistent/problems.jsonl"]  # the CLI raises once it reads its data
    warm = start(broken)
    assert parent_of(load_run(warm).job["pid"]) == launcher.proc.pid
    assert wait_state(warm, {"finished", "failed"}) == "failed"
    assert load_run(warm).job["steps"][0]["warm"]
    monkeypatch.setenv(warm_start.WARM_ENV, "0")
    cold = start(broken)
    assert wait_state(cold, {"finished", "failed"}) == "failed"
    warm_reason, cold_reason = read_status(warm)["reason"], read_status(cold)["reason"]
    assert "/nonexistent/problems.jsonl" in warm_reason
    assert warm_reason.replace(warm.name, "RUN") == cold_reason.replace(cold.name, "RUN")


@pytest.mark.slow  # trains, after the launcher imports torch
def test_stop_reaches_a_forked_step_and_its_whole_group(runs, launcher):
    run_dir = start(["sft.max_steps=500", "sft.save_steps=1000"])
    supervisor = load_run(run_dir).job["pid"]
    deadline = time.monotonic() + 120
    while read_status(run_dir).get("step", 0) < 1:  # the forked trainer is past its first step
        assert time.monotonic() < deadline, (run_dir / LOG_FILE).read_text()[-3000:]
        time.sleep(0.2)
    assert load_run(run_dir).job["steps"][0]["warm"]
    members = group_members(supervisor)
    assert len(members) >= 2, "the step is not in the job's process group"
    stop_run(run_dir.name)
    assert wait_state(run_dir, {"stopped", "failed", "finished"}, timeout=60) == "stopped"
    deadline = time.monotonic() + 30
    while group_members(supervisor):
        assert time.monotonic() < deadline, f"left running after Stop: {group_members(supervisor)}"
        time.sleep(0.2)


def test_a_step_is_forked_only_where_a_fresh_interpreter_would_do_the_same(tmp_path, monkeypatch):
    cli = [sys.executable, "-m", "grpo_playground.cli.train", "recipe.yaml"]
    assert warm_start.start_step(cli) is None  # this process never imported the stack for forking
    assert warm_start.is_cli(cli)
    assert not warm_start.is_cli([sys.executable, "-c", "print(1)"])
    assert not warm_start.is_cli([sys.executable, "-m", "os", "x"])
    assert not warm_start.is_cli(["/usr/bin/python2", "-m", "grpo_playground.cli.train"])  # another interpreter

    def no_fork():
        raise AssertionError("forked where a fresh interpreter was due")

    monkeypatch.setattr(os, "fork", no_fork)
    launcher_env = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "GRPO_PLAYGROUND_RUNS_DIR": "/a"}
    monkeypatch.setattr(warm_start, "_preloaded_env", warm_start.import_time_env(launcher_env))
    assert not warm_start.needs_fresh_interpreter({**launcher_env, "GRPO_PLAYGROUND_RUNS_DIR": "/b"})
    for changed in ({"HF_HOME": "/elsewhere"}, {"OMP_NUM_THREADS": "2"}, {"PYTHONPATH": "/x"}, {"HOME": "/h"}):
        assert warm_start.needs_fresh_interpreter({**launcher_env, **changed}), changed
        assert warm_start.start_step(cli, {**launcher_env, **changed}) is None, changed  # Popen: a fresh one
    assert warm_start.needs_fresh_interpreter({k: v for k, v in launcher_env.items() if k != "HF_HUB_OFFLINE"})

    monkeypatch.delenv(warm_start.WARM_ENV, raising=False)
    monkeypatch.setattr(warm_start, "DEVICES", tmp_path)
    assert warm_start.enabled() == (sys.platform == "linux")
    (tmp_path / "nvidia0").touch()  # CUDA must not be initialised before a fork: a GPU machine starts fresh ones
    assert not warm_start.enabled()
    (tmp_path / "nvidia0").unlink()
    monkeypatch.setenv(warm_start.WARM_ENV, "0")
    assert not warm_start.enabled()
    steps = [{"argv": cli}]
    assert warm_start.fork_supervisor(tmp_path / "job.json", steps, 1, dict(os.environ)) is None
