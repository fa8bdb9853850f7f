"""One job model (grpo_playground.jobs.kinds): every kind of job is read as one JobStatus, and a failure's reason
comes from the child's result or the error it wrote for its supervisor (contracts.process.TRACEBACK_ENV), never
from its log's text. Before, a failed scale-out was its log's last "error:" line and a failed export its log's last
line: a library's stray line became the reason, and a killed child said only "see the log".

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_job_kinds.py
"""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from grpo_playground.cli.args import ExportArgs, ScaleOutArgs
from grpo_playground.jobs.exports import export_state, start_export
from grpo_playground.jobs.control import spawn_job
from grpo_playground.child_process import python_child_env
from grpo_playground.jobs.kinds import KINDS, TRAIN, JobKind, Outcome, this_attempt
from grpo_playground.jobs.record import step
from grpo_playground.jobs.scale_outs import scale_out_state, start_scale_out
from grpo_playground.contracts.layout import RECIPE_FILE
from grpo_playground.run_layout import new_run_id, write_status

STRAY = "error: a line some library printed, which says nothing of how the job ended"

# children that play the CLI's part of the contract: the error file their supervisor names in the environment
CRASHES = f"""
    import sys
    from grpo_playground.contracts.process import keep_traceback
    keep_traceback()
    print({STRAY!r}, file=sys.stderr, flush=True)
    raise RuntimeError("the real cause")
"""
KILLED = f"""
    import os, signal, sys
    print({STRAY!r}, file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the out-of-memory killer, say: no word from the child at all
"""
REFUSES = f"""
    import sys
    from grpo_playground.contracts.process import fail, keep_traceback
    keep_traceback()
    print({STRAY!r}, file=sys.stderr, flush=True)
    sys.exit(fail("verl cannot start from this adapter"))
"""
CASES = [(CRASHES, "exit 1: RuntimeError: the real cause"), (KILLED, "killed by SIGKILL"),
         (REFUSES, "exit 2: verl cannot start from this adapter")]


@pytest.fixture
def trained_run(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    monkeypatch.delenv("GRPO_PLAYGROUND_OWNER_TOKEN", raising=False)
    run = tmp_path / new_run_id("kinds")
    (run / "sft").mkdir(parents=True)
    (run / "sft" / "adapter_config.json").write_text("{}")
    write_status(run, state="finished")
    return run


def ended(read, run: Path) -> dict:
    deadline = time.monotonic() + 60
    while read(run)["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    return read(run)


# scale-out and export, each read through the one job model: (its CLI arguments class, start, state)
CHILD_JOBS = {"scale-out": (ScaleOutArgs, start_scale_out, scale_out_state), "export": (ExportArgs, start_export,
                                                                                       export_state)}


@pytest.mark.parametrize("job", CHILD_JOBS)
@pytest.mark.parametrize("code, reason", CASES, ids=["crash", "killed", "refused"])
def test_a_failed_child_job_says_why_from_the_child_not_from_its_log(trained_run, monkeypatch, job, code, reason):
    args_class, start, read_state = CHILD_JOBS[job]
    monkeypatch.setattr(args_class, "command", lambda self: [sys.executable, "-c", textwrap.dedent(code)])
    start(trained_run.name)
    state = ended(read_state, trained_run)
    assert state["state"] == "failed" and reason in state["reason"], state
    assert "some library" not in state["reason"]  # the log holds that line; it is no reason
    if job == "export":
        assert STRAY in state["log"]  # the panel still shows the log, for people


def test_a_grandchild_s_error_is_not_the_job_s_reason(trained_run, monkeypatch):
    """A job's own children (the comparison's evaluations, a trainer's workers) do not write its reason."""
    grandchild = "from grpo_playground.contracts.process import fail, keep_traceback; keep_traceback(); fail('inner')"
    parent = ("import subprocess, sys; from grpo_playground.contracts.process import keep_traceback; keep_traceback(); "
              f"subprocess.run([sys.executable, '-c', {grandchild!r}]); sys.exit(3)")
    monkeypatch.setattr(ExportArgs, "command", lambda self: [sys.executable, "-c", parent])
    start_export(trained_run.name)
    state = ended(export_state, trained_run)
    assert state["reason"] == "the export process ended without a result (exit 3)", state
    assert "error: inner" in state["log"]  # it ran, and failed, inside the job


def test_the_scale_out_cli_writes_its_refusal_where_the_job_reads_it(trained_run):
    """The real CLI, refused before any heavy import: a run folder without its recipe."""
    (trained_run / RECIPE_FILE).unlink(missing_ok=True)
    start_scale_out(trained_run.name)
    state = ended(scale_out_state, trained_run)
    assert state["state"] == "failed" and f"has no {RECIPE_FILE}" in state["reason"], state


def test_every_kind_reads_as_one_status(trained_run):
    """No record: "none", the same shape for all five kinds."""
    assert sorted(KINDS) == ["compare", "eval", "export", "scale-out", "train"]
    for kind in KINDS.values():
        status = kind.status(trained_run / "nothing-here")
        assert (status.kind, status.state, status.reason, status.running) == (kind.name, "none", "", False)


def test_a_crashed_training_job_reads_as_the_same_status(trained_run):
    """The fifth kind: its result is the run's status.json, where the supervisor writes the crash's reason."""
    spawn_job(trained_run, [sys.executable, "-c", textwrap.dedent(CRASHES)])
    deadline = time.monotonic() + 60
    while TRAIN.status(trained_run).running and time.monotonic() < deadline:
        time.sleep(0.1)
    status = TRAIN.status(trained_run)
    assert (status.kind, status.state) == ("train", "failed") and "RuntimeError: the real cause" in status.reason
    assert "some library" not in status.reason and status.result["state"] == "failed"


def test_a_new_kind_of_job_is_one_job_kind(tmp_path):
    """Issue 37's target: a new kind is its JobKind and the module that starts it; the record, the supervisor, the
    layout (its files are named from its name) and the status are the same for it, failures included."""
    def read_quantized(record: dict, folder: Path) -> Outcome:
        result = this_attempt(record, folder / "quantized.json")
        return Outcome(bool(result.get("files")), data=result)

    quantize = JobKind("quantize", ExportArgs, read_quantized)
    writes = ("import json, sys, time; from grpo_playground.contracts.process import fail, keep_traceback; "
              "keep_traceback(); sys.exit(fail('q3 is no GGUF type')) if sys.argv[1] == 'q3' else "
              "open(sys.argv[2], 'w').write(json.dumps({'started': time.time(), 'files': ['m.q4.gguf']}))")
    for gguf in ("q4", "q3"):
        with open(tmp_path / quantize.log_file, "wb") as log:
            argv = [sys.executable, "-c", writes, gguf, str(tmp_path / "quantized.json")]
            quantize.start(tmp_path, [step("quantize", argv)], log, python_child_env())
        deadline = time.monotonic() + 30
        while quantize.status(tmp_path).running and time.monotonic() < deadline:
            time.sleep(0.1)
        status = quantize.status(tmp_path)
        if gguf == "q4":
            assert (status.state, status.result["files"]) == ("finished", ["m.q4.gguf"])
            assert (tmp_path / "quantize_job.json").is_file() and (tmp_path / "quantize.log").is_file()
        else:  # the earlier attempt's result is not this one's
            assert status.state == "failed" and "exit 2: q3 is no GGUF type" in status.reason, status
