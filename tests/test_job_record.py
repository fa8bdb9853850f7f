"""One job record, one supervisor, one Stop for the app's background jobs (evaluation, export, comparison): states
come from the record the supervisor writes, never from the log.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_job_record.py
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_playground.child_process import python_child_env
from grpo_playground.contracts.process import group_members, is_alive, process_start_ticks, write_json_atomic
from grpo_playground.jobs.record import job_state, read_record, start_job, step, stop_job


def wait_for(predicate, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def start(tmp_path: Path, steps: list[dict], **kwargs) -> dict:
    with open(tmp_path / "job.log", "wb") as log:
        return start_job(tmp_path / "job.json", "test", steps, log, python_child_env(), **kwargs)


def finished(tmp_path: Path) -> bool:
    return job_state(read_record(tmp_path / "job.json")) not in ("queued", "running")


def test_each_step_ends_done_failed_or_over_its_limit_and_the_next_one_runs(tmp_path):
    start(tmp_path, [step("ok", python("print('[eval] FAILED: a line that must not matter')")),
                     step("exits 3", python("raise SystemExit(3)")),
                     step("hangs", python("import time; time.sleep(60)"), timeout_s=1),
                     step("after", python("pass"))])
    assert wait_for(lambda: finished(tmp_path))
    record = read_record(tmp_path / "job.json")
    assert [(s["state"], s["reason"]) for s in record["steps"]] == [
        ("done", ""), ("failed", "exit 3"), ("failed", f"over its {1 / 3600:g} h limit: stopped"), ("done", "")]
    assert record["state"] == "failed" and record["reason"] == "exit 3" and record["ended"]
    assert "[job]" in (tmp_path / "job.log").read_text()  # the log is for people: what ran, how it ended


def test_stop_ends_the_whole_group_and_marks_the_rest_stopped(tmp_path):
    record = start(tmp_path, [step("sleeps", python("import subprocess, time; subprocess.Popen(['sleep', '60']); "
                                                    "time.sleep(60)")),
                              step("never runs", python("pass"))])
    assert wait_for(lambda: len(group_members(record["pid"])) >= 3)  # supervisor, the step, its own child
    assert stop_job(tmp_path / "job.json") == record["pid"]
    assert wait_for(lambda: not group_members(record["pid"])), group_members(record["pid"])
    record = read_record(tmp_path / "job.json")
    assert record["state"] == "stopped" and [s["state"] for s in record["steps"]] == ["stopped", "stopped"]
    assert stop_job(tmp_path / "job.json") is None


def test_stop_pressed_again_while_the_supervisor_exits_says_nothing_is_running(tmp_path):
    """The supervisor records its end, then exits: a Stop in between must not read its own group as leftovers."""
    exiting = subprocess.Popen(["sleep", "30"], start_new_session=True)  # stands for the supervisor, not yet gone
    try:
        write_json_atomic(tmp_path / "job.json", {"kind": "test", "state": "stopped", "ended": time.time(),
                                                  "pid": exiting.pid, "start_ticks": process_start_ticks(exiting.pid),
                                                  "steps": []})
        assert stop_job(tmp_path / "job.json") is None
        assert exiting.poll() is None  # not killed
    finally:
        exiting.kill()
        exiting.wait()


def test_a_record_whose_supervisor_died_reads_failed(tmp_path):
    record = start(tmp_path, [step("sleeps", python("import time; time.sleep(60)"))])
    assert job_state(read_record(tmp_path / "job.json")) in ("queued", "running")
    assert wait_for(lambda: len(group_members(record["pid"])) >= 2)  # its step started (a loaded CPU is slow to)
    os.kill(record["pid"], signal.SIGKILL)  # only the supervisor: its step lives on
    assert wait_for(lambda: not is_alive(record["pid"], record["start_ticks"]))
    assert job_state(read_record(tmp_path / "job.json")) == "failed"
    assert group_members(record["pid"])
    assert stop_job(tmp_path / "job.json") == record["pid"]  # Stop still ends what is left
    assert wait_for(lambda: not group_members(record["pid"]))


def test_a_job_that_needs_the_training_slot_waits_queued_until_it_is_free(tmp_path):
    lock = tmp_path / ".gpu.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a training run holds the slot
    try:
        start(tmp_path, [step("trains", python("pass"))], slot=lock)
        time.sleep(1)
        assert read_record(tmp_path / "job.json")["state"] == "queued"
    finally:
        os.close(fd)
    assert wait_for(lambda: finished(tmp_path))
    assert read_record(tmp_path / "job.json")["state"] == "finished"


def test_a_supervisor_that_cannot_start_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="supervisor did not start"):
        start(tmp_path, [step("x", python("pass"))])


def test_an_evaluation_step_of_several_checkpoints_reports_each_from_its_record(tmp_path, monkeypatch):
    # a vLLM job evaluates base, SFT and GRPO in one step: done is a written result, the next one is running
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    from grpo_playground.jobs.evals import eval_job_state
    from grpo_playground.jobs.record import write_record
    from grpo_playground.contracts.layout import EVAL_JOB
    from grpo_playground.run_layout import evals_dir

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        outs = [evals_dir() / f"{name}.json" for name in ("base", "sft", "grpo")]
        outs[0].write_text("{}")
        items = [{"label": o.stem, "model": o.stem, "out": str(o), "step": 0} for o in outs]
        record = {"kind": "eval", "steps": [step("all three", ["x"])], "pid": sleeper.pid, "state": "running",
                  "meta": {"items": items}}
        record["steps"][0]["state"] = "running"
        write_record(evals_dir() / EVAL_JOB, record)
        state = eval_job_state()
        assert state["state"] == "running" and [i["state"] for i in state["items"]] == ["done", "running", "pending"]
    finally:
        sleeper.kill()
        sleeper.wait()
    state = eval_job_state()  # its supervisor is gone: what was not written failed
    assert state["state"] == "failed" and [i["state"] for i in state["items"]] == ["done", "failed", "failed"]


def test_a_job_read_while_its_supervisor_starts_is_running_and_one_that_never_started_failed(tmp_path, monkeypatch):
    """Before: a UI tick between start_job's first write and its supervisor's pid read the job as ended, so a
    finishing export said "ended without a result" and a scale-out "failed" (CI, 2026-12-04; the jobs finished)."""
    from grpo_playground.contracts.layout import EXPORT_JOB, SCALE_OUT_JOB
    from grpo_playground.jobs import record as record_module
    from grpo_playground.jobs.exports import export_state
    from grpo_playground.jobs.scale_outs import scale_out_state

    seen, real_popen = [], subprocess.Popen

    def popen_after_a_look(*args, **kwargs):  # the record on disk as a tick finds it before the supervisor runs
        (tmp_path / SCALE_OUT_JOB).write_text((tmp_path / EXPORT_JOB).read_text())
        seen.append((export_state(tmp_path)["state"], scale_out_state(tmp_path)["state"],
                     stop_job(tmp_path / EXPORT_JOB)))
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(record_module.subprocess, "Popen", popen_after_a_look)
    with open(tmp_path / "export.log", "wb") as log:
        record = start_job(tmp_path / EXPORT_JOB, "export", [step("export", python("pass"))], log,
                           python_child_env(), result=tmp_path / "export.json")
    assert seen == [("running", "running", None)]  # and Stop has nothing to signal yet
    assert wait_for(lambda: job_state(read_record(tmp_path / EXPORT_JOB)) == "finished")
    write_json_atomic(tmp_path / EXPORT_JOB, {**record, "pid": None, "state": "created", "started": time.time() - 60})
    assert export_state(tmp_path)["state"] == "failed"  # start_job gave up on it long ago
    assert "without a result" in export_state(tmp_path)["reason"]
