"""The job runner without the UI: supervisor, queue, stop, crash reasons, stale states, incremental reading.

Jobs here are small Python programs (the supervisor runs any command); the real training CLI is driven
through the app in tests/test_training_tab.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grpo_playground.contracts.process import group_members
from grpo_playground.jobs.control import spawn_job, stop_run
from grpo_playground.jobs.feed import JsonlTail, RunFeed
from grpo_playground.jobs.runs import list_runs, load_run, queue_line, reconcile
from grpo_playground.child_process import job_env
from grpo_playground.contracts.process import process_start_ticks
from grpo_playground.jobs.crash import crash_reason
from grpo_playground.jobs.record import read_record, start_job, step
from grpo_playground.owner import check_owner
from grpo_playground.run_layout import new_run_id, write_status


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("GRPO_PLAYGROUND_STOP_GRACE_S", "3")
    return tmp_path


def make_run(runs: Path, name: str = "t") -> Path:
    run_dir = runs / new_run_id(name)
    run_dir.mkdir()
    write_status(run_dir, state="created", step=0)
    return run_dir


def job(code: str) -> list[str]:
    """A job program; it gets the run folder as argv[1]."""
    return [sys.executable, "-c", textwrap.dedent(code)]


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def state(run_dir: Path) -> str:
    return reconcile(load_run(run_dir)).state


WRITES_METRICS = """
import json, sys, time, pathlib
run = pathlib.Path(sys.argv[1])
for step in range(1, 4):
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"stage": "grpo", "step": step, "reward": step / 2}) + "\\n")
    time.sleep(0.1)
"""


def test_job_runs_in_its_own_session_and_finishes(runs):
    run_dir = make_run(runs)
    info = spawn_job(run_dir, job(WRITES_METRICS) + [str(run_dir)])
    assert info.job["pid"] == os.getpgid(info.job["pid"]) != os.getpgid(0)  # its own process group, not ours
    wait_for(lambda: state(run_dir) == "finished", what="finished")
    feed = RunFeed(run_dir)
    feed.poll()
    assert [m["step"] for m in feed.metrics] == [1, 2, 3]
    assert "got the training slot" in (run_dir / "log.txt").read_text()  # output goes to the file
    wait_for(lambda: not group_members(info.job["pid"]), what="no process left")


CRASHES = """
import pathlib, sys
from grpo_playground.contracts.process import keep_traceback
keep_traceback(pathlib.Path(sys.argv[1], "traceback.txt"))  # as the training CLI does
print("ValueError: a line in the log that must not matter", flush=True)
raise ValueError("reward weights are all zero")
"""


def test_crash_marks_failed_with_the_exception_from_its_traceback_file(runs):
    run_dir = make_run(runs)
    spawn_job(run_dir, job(CRASHES) + [str(run_dir)])
    wait_for(lambda: state(run_dir) == "failed", what="failed")
    assert load_run(run_dir).status["reason"] == "ValueError: reward weights are all zero"
    assert "Traceback" in (run_dir / "log.txt").read_text()  # still printed for people


def test_a_crash_without_a_traceback_file_is_told_by_its_exit_code(runs):
    run_dir = make_run(runs)
    spawn_job(run_dir, job("print('RuntimeError: CUDA error: device-side assert triggered'); raise SystemExit(3)"))
    wait_for(lambda: state(run_dir) == "failed", what="failed")
    assert load_run(run_dir).status["reason"] == "exited with code 3: see log.txt"  # the log's text is not read


@pytest.mark.parametrize("traceback, rc, expected", [
    # a GPU crash is diagnosed, not left as a stack trace; the frames say whether it was sampling (NaN logits) or an
    # embedding lookup (an id past its rows)
    ("Traceback (most recent call last):\nRuntimeError: CUDA error: device-side assert triggered\n", 1,
     "a CUDA kernel's own check failed"),
    ('Traceback (most recent call last):\n  File "transformers/generation/utils.py", line 3083, in _sample\n'
     "RuntimeError: CUDA error: device-side assert triggered\n", 1, "NaN logits ('device-side assert triggered' in"),
    ('Traceback (most recent call last):\n  File "torch/nn/functional.py", line 2567, in embedding\n'
     "    return torch.embedding(weight, input)\nRuntimeError: CUDA error: device-side assert triggered\n", 1,
     "a token id past the model's embedding rows"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n", 1, "lower grpo.num_generations"),
    # the exception that ended it wins over the one it was handling (a retried step)
    ("KeyError: 'a'\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback "
     "(most recent call last):\nTypeError: bad\n", 1, "TypeError: bad"),
    # SIGKILL without a traceback, and no OOM count to go by: only what is known
    (None, -9, "killed by SIGKILL"),
    (None, 3, "exited with code 3: see log.txt"),
])
def test_crash_reason(tmp_path, traceback, rc, expected):
    if traceback is not None:
        (tmp_path / "traceback.txt").write_text(traceback)
    assert expected in crash_reason(tmp_path, rc)


IGNORES_SIGTERM_WITH_GRANDCHILD = """
import signal, subprocess, sys, time, pathlib
signal.signal(signal.SIGTERM, signal.SIG_IGN)
# a grandchild that outlives a careless kill (like a vLLM worker holding GPU memory)
subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
pathlib.Path(sys.argv[1], "started").write_text("1")
time.sleep(600)
"""


def test_stop_kills_the_whole_group_after_the_grace_period(runs):
    run_dir = make_run(runs)
    info = spawn_job(run_dir, job(IGNORES_SIGTERM_WITH_GRANDCHILD) + [str(run_dir)])
    wait_for(lambda: (run_dir / "started").exists(), what="job start")
    assert len(group_members(info.job["pid"])) == 3  # supervisor, job, grandchild
    stop_run(run_dir.name)
    assert (run_dir / "stop.request").exists()
    wait_for(lambda: state(run_dir) == "stopped", timeout=20, what="stopped")
    assert "killed 3 s after the stop request" in load_run(run_dir).status["reason"]
    wait_for(lambda: not group_members(info.job["pid"]), what="no orphan")


def test_the_queue_shown_is_the_line_the_slot_is_taken_in_comparisons_included(runs):
    """A comparison waiting for the training slot stands in the same line as the runs (the supervisors take the slot
    first come first): the Training tab's queue and a run's queue position count it."""
    from grpo_playground.contracts.layout import COMPARISON_JOB, COMPARISONS_DIR
    from grpo_playground.contracts.layout import GPU_LOCK

    holder, later = make_run(runs, "holder"), make_run(runs, "later")
    spawn_job(holder, job(STOPS_CLEANLY) + [str(holder)])
    wait_for(lambda: (holder / "started").exists(), what="the slot taken")
    comparison = runs / COMPARISONS_DIR / "20000101-000000-compare-x"
    comparison.mkdir(parents=True)
    with open(comparison / "comparison.log", "wb") as log:  # queued behind the holder, before the later run
        start_job(comparison / COMPARISON_JOB, "comparison", [step("arms", job("pass"))], log, job_env(),
                  slot=runs / GPU_LOCK)
    spawn_job(later, job(STOPS_CLEANLY) + [str(later)])
    wait_for(lambda: state(later) == "queued", what="the later run queued")
    assert queue_line() == ["comparison 20000101-000000-compare-x", later.name]
    stop_run(later.name)
    stop_run(holder.name)
    wait_for(lambda: read_record(comparison / COMPARISON_JOB)["state"] == "finished", what="the comparison ran")
    assert queue_line() == []


STOPS_CLEANLY = """
import json, pathlib, signal, sys, time
run = pathlib.Path(sys.argv[1])
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
(run / "started").write_text("1")
while not stop and not (run / "stop.request").exists():
    time.sleep(0.05)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)  # saving takes this long
status = json.loads((run / "status.json").read_text()); status["state"] = "stopped"
(run / "status.tmp").write_text(json.dumps(status))  # atomic, as the product writes it: a reader never sees half
(run / "status.tmp").replace(run / "status.json")
"""


def test_queue_is_fifo_and_a_queued_job_can_be_cancelled(runs):
    first, second, third = make_run(runs, "a"), make_run(runs, "b"), make_run(runs, "c")
    spawn_job(first, job(STOPS_CLEANLY) + [str(first)])
    wait_for(lambda: (first / "started").exists(), what="first job start")
    spawn_job(second, job(STOPS_CLEANLY) + [str(second)])
    spawn_job(third, job(STOPS_CLEANLY) + [str(third)])
    time.sleep(1.5)
    assert state(second) == state(third) == "queued"  # one job at a time
    assert queue_line() == [second.name, third.name]
    stop_run(third.name)  # leaving the queue
    wait_for(lambda: state(third) == "stopped", what="queued job cancelled")
    assert load_run(third).status["reason"] == "stopped while queued"
    stop_run(first.name)
    wait_for(lambda: (second / "started").exists(), what="second job takes the slot")
    assert state(first) == "stopped" and state(second) == "running"
    assert not (third / "started").exists()
    stop_run(second.name)
    wait_for(lambda: state(second) == "stopped", what="second stopped")


def test_at_most_eight_jobs_wait_for_the_slot_and_the_ninth_is_refused_before_anything_is_made(runs):
    """A runaway script (or a visitor with the token) cannot pile up jobs: start and resume are refused while
    MAX_QUEUED wait, and neither writes a run folder."""
    from grpo_playground.config import RunConfig
    from grpo_playground.jobs.control import MAX_QUEUED, resume_run, start_run

    holder = make_run(runs, "holder")
    spawn_job(holder, job(STOPS_CLEANLY) + [str(holder)])
    wait_for(lambda: (holder / "started").exists(), what="the slot's job start")
    waiting = [make_run(runs, f"wait{i}") for i in range(MAX_QUEUED)]
    stopped = make_run(runs, "stopped")
    write_status(stopped, state="stopped", reason="stopped")
    try:
        for run_dir in waiting:
            spawn_job(run_dir, job(STOPS_CLEANLY) + [str(run_dir)])
        wait_for(lambda: len(queue_line()) == MAX_QUEUED, what=f"{MAX_QUEUED} jobs in line")
        folders = sorted(runs.iterdir())
        with pytest.raises(RuntimeError, match=f"{MAX_QUEUED} jobs are already waiting for the training slot"):
            start_run(RunConfig())
        with pytest.raises(RuntimeError, match="already waiting"):
            resume_run(stopped.name)
        assert sorted(runs.iterdir()) == folders and state(stopped) == "stopped"
    finally:
        for run_dir in [*waiting, holder]:
            stop_run(run_dir.name)
        wait_for(lambda: all(state(r) == "stopped" for r in [*waiting, holder]), what="every job stopped")


def test_a_comparison_waits_behind_training_runs_queued_before_it(runs):
    # Before: a waiting comparison's supervisor took the slot as soon as it was free, ahead of runs queued earlier
    # (it only tried the lock; the training launcher kept to its queue of runs)
    first, second = make_run(runs, "a"), make_run(runs, "b")
    spawn_job(first, job(STOPS_CLEANLY) + [str(first)])
    wait_for(lambda: (first / "started").exists(), what="first job start")
    spawn_job(second, job(STOPS_CLEANLY) + [str(second)])
    folder = runs / "comparisons" / new_run_id("compare")
    folder.mkdir(parents=True)
    ran = folder / "ran"
    with open(folder / "comparison.log", "wb") as log:
        start_job(folder / "comparison_job.json", "compare",
                  [step("experiment", job(f"import pathlib; pathlib.Path({str(ran)!r}).write_text('1')"))], log,
                  job_env(), slot=runs / ".gpu.lock")
    stop_run(first.name)
    wait_for(lambda: (second / "started").exists(), what="the run queued first takes the slot")
    assert not ran.exists() and read_record(folder / "comparison_job.json")["state"] == "queued"
    stop_run(second.name)
    wait_for(lambda: ran.exists(), what="the comparison takes the slot after it")
    wait_for(lambda: read_record(folder / "comparison_job.json")["state"] == "finished", what="comparison done")


def test_a_run_of_an_earlier_version_is_listed_and_stopped(runs):
    # job.json as the launcher of earlier versions wrote it; that launcher (here a stand-in that stops cleanly
    # on SIGTERM, and only then) still runs the job
    run_dir = make_run(runs)
    stops_on_sigterm = STOPS_CLEANLY.replace(' and not (run / "stop.request").exists()', "")
    launcher = subprocess.Popen(job(stops_on_sigterm) + [str(run_dir)], start_new_session=True)
    wait_for(lambda: (run_dir / "started").exists(), what="job start")
    (run_dir / "job.json").write_text(json.dumps({
        "launcher_pid": launcher.pid, "pgid": launcher.pid, "start_ticks": process_start_ticks(launcher.pid),
        "queued_at": time.time(), "stage": "sft", "command": ["python", "-m", "grpo_playground.cli.train"]}))
    write_status(run_dir, state="running", pid=launcher.pid)
    [info] = list_runs()
    assert (info.state, info.stage, info.job["pid"]) == ("running", "sft", launcher.pid)
    # this stand-in stops as soon as SIGTERM arrives: by the time stop_run reads the state back it may be done
    assert stop_run(run_dir.name).state in ("stopping", "stopped")
    assert launcher.wait(timeout=20) == 0
    assert state(run_dir) == "stopped"


def test_stop_reaches_a_run_started_from_the_cli(runs):
    run_dir = make_run(runs)
    # no supervisor, no job.json; its save takes 2 s (an instant one could confirm "stopped" before stop_run answers)
    proc = subprocess.Popen(job(STOPS_CLEANLY) + [str(run_dir), "2"])
    wait_for(lambda: (run_dir / "started").exists(), what="job start")
    write_status(run_dir, state="running", pid=proc.pid)
    assert stop_run(run_dir.name).state == "stopping"  # asked, not assumed: the job is still saving
    assert proc.wait(timeout=20) == 0
    assert state(run_dir) == "stopped"


def test_a_run_whose_supervisor_is_starting_stays_queued(runs):
    # Before: a look at the runs between the record's first write and its supervisor's pid marked the run failed
    run_dir = make_run(runs)
    write_status(run_dir, state="queued", pid=None)
    (run_dir / "job.json").write_text(json.dumps({"kind": "train", "pid": None, "state": "created",
                                                  "started": time.time()}))
    assert state(run_dir) == "queued"
    (run_dir / "job.json").write_text(json.dumps({"kind": "train", "pid": None, "state": "created",
                                                  "started": time.time() - 60}))  # it never started
    assert state(run_dir) == "failed"


def test_dead_job_is_marked_failed(runs):
    run_dir = make_run(runs)
    info = spawn_job(run_dir, job("import time; time.sleep(600)"))
    wait_for(lambda: state(run_dir) == "running", what="running")
    os.killpg(info.job["pid"], signal.SIGKILL)  # the machine's OOM killer, say: nobody writes a status
    wait_for(lambda: not group_members(info.job["pid"]), what="group gone")
    assert [r.state for r in list_runs()] == ["failed"]
    assert load_run(run_dir).status["reason"] == "process died"


def test_jsonl_tail_keeps_a_partly_written_line_for_later(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')
    tail = JsonlTail(path)
    assert [r["step"] for r in tail.read_new()[0]] == [1, 2]
    with open(path, "a") as f:
        f.write('ard": 0.5}\n')
    assert tail.read_new() == ([{"step": 3, "reward": 0.5}], False)
    assert tail.read_new() == ([], False)  # nothing new: nothing read
    path.write_text('{"step": 1}\n')  # rewritten (a new attempt): start over
    assert tail.read_new() == ([{"step": 1}], True)


def test_owner_token(monkeypatch):
    monkeypatch.delenv("GRPO_PLAYGROUND_OWNER_TOKEN", raising=False)
    check_owner(None)  # no token configured: everyone may start jobs (a local app)
    monkeypatch.setenv("GRPO_PLAYGROUND_OWNER_TOKEN", "s3cret")
    check_owner("s3cret")
    for wrong in (None, "", "s3cre", "s3cret "):
        with pytest.raises(PermissionError, match="owner token"):
            check_owner(wrong)


def test_run_ids_cannot_escape_the_runs_dir(runs):
    with pytest.raises(ValueError, match="not valid"):
        stop_run("../etc")
    with pytest.raises(FileNotFoundError, match="no run"):
        stop_run("nope")


def test_status_is_written_atomically(runs):
    run_dir = make_run(runs)
    write_status(run_dir, state="running", step=7)
    assert json.loads((run_dir / "status.json").read_text())["step"] == 7
    assert not list(run_dir.glob(".*tmp"))


def test_export_state_is_read_back_from_export_json(tmp_path):
    from grpo_playground.jobs.exports import export_state
    from grpo_playground.contracts.layout import EXPORT_JOB, EXPORT_RESULT
    from grpo_playground.run_layout import export_dir

    assert export_state(tmp_path)["state"] == "none"
    result_file = export_dir(tmp_path, "grpo") / EXPORT_RESULT
    result_file.parent.mkdir(parents=True)
    gguf = result_file.parent / "tiny.q4_k_m.gguf"
    gguf.write_bytes(b"GGUF")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    (tmp_path / EXPORT_JOB).write_text(json.dumps({"pid": ended.pid, "state": "running", "started": 100.0,
                                                   "result": str(result_file)}))  # its supervisor died
    # no export.json, or an earlier attempt's: this attempt ended without a result
    assert export_state(tmp_path)["state"] == "failed"
    result_file.write_text(json.dumps({"state": "finished", "started": 50.0, "files": {"gguf_q4_k_m": str(gguf)}}))
    assert "without a result (no exit status recorded)" in export_state(tmp_path)["reason"]
    # a crash before export.json: the record's reason (its supervisor's: the exit and the traceback file's last
    # line) says why, whatever the log's last line is
    (tmp_path / EXPORT_JOB).write_text(json.dumps({"pid": ended.pid, "state": "failed", "started": 100.0,
                                                   "reason": "exit 1: ValueError: no adapter",
                                                   "result": str(result_file)}))
    (tmp_path / "export.log").write_text("[ui] export 2026-12-05: --run x\n[job] 08:00:00 export: python -m ...\n"
                                         "error: a stray line\n[job] 08:00:01 export: failed (exit 1)\n")
    assert export_state(tmp_path)["reason"] == ("the export process ended without a result (exit 1: ValueError: "
                                                "no adapter)")
    (tmp_path / EXPORT_JOB).write_text(json.dumps({"pid": ended.pid, "state": "running", "started": 100.0,
                                                   "result": str(result_file)}))
    greedy = {"match": True, "max_new_tokens": 16, "cases": [{"match": True}]}
    result_file.write_text(json.dumps({"state": "finished", "started": 101.0, "errors": ["q4 answer off"],
                                       "stage": "grpo", "checks": {"greedy_f16": greedy},
                                       "files": {"gguf_q4_k_m": str(gguf), "merged": str(gguf.parent)}}))
    state = export_state(tmp_path)
    assert (state["state"], state["files"], state["problems"]) == ("finished", [str(gguf)], ["q4 answer off"])
    assert (state["stage"], state["checks"]) == ("grpo", {"greedy_f16": greedy})  # the panel says the checks
    result_file.write_text(json.dumps({"state": "failed", "started": 101.0, "error": "RuntimeError: quantize failed"}))
    assert export_state(tmp_path) | {"log": ""} == {"state": "failed", "files": [], "problems": [], "checks": {},
                                                    "stage": None, "reason": "RuntimeError: quantize failed", "log": ""}
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / EXPORT_JOB).write_text(json.dumps({"pid": sleeper.pid, "state": "running",
                                                       "result": str(result_file)}))
        assert export_state(tmp_path)["state"] == "running"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_export_names_the_stage_it_cannot_export(tmp_path, monkeypatch):
    """The tab exports either stage; a stage the run did not train is refused, naming the ones it did."""
    from grpo_playground.jobs.exports import start_export

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    run = tmp_path / new_run_id("exp")
    (run / "sft").mkdir(parents=True)
    (run / "sft" / "adapter_config.json").write_text("{}")
    write_status(run, state="finished")
    with pytest.raises(RuntimeError, match=r"has no grpo adapter: export one of its trained stages \(sft\)"):
        start_export(run.name, ["q4_k_m"], stage="grpo")
    with pytest.raises(RuntimeError, match="has no ../x adapter"):
        start_export(run.name, ["q4_k_m"], stage="../x")
