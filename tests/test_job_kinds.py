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
from grpo_playground.jobs.kinds import KINDS
from grpo_playground.jobs.scale_outs import scale_out_state, start_scale_out
from grpo_playground.run_layout import RECIPE_FILE, new_run_id, write_status

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
    from grpo_playground.contracts.process import fail
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


@pytest.mark.parametrize("code, reason", CASES, ids=["crash", "killed", "refused"])
def test_a_failed_scale_out_says_why_from_the_child_not_from_its_log(trained_run, monkeypatch, code, reason):
    monkeypatch.setattr(ScaleOutArgs, "command", lambda self: [sys.executable, "-c", textwrap.dedent(code)])
    start_scale_out(trained_run.name)
    state = ended(scale_out_state, trained_run)
    assert state["state"] == "failed" and reason in state["reason"], state
    assert "some library" not in state["reason"]  # the log holds that line; it is no reason


@pytest.mark.parametrize("code, reason", CASES, ids=["crash", "killed", "refused"])
def test_a_failed_export_says_why_from_the_child_not_from_its_log(trained_run, monkeypatch, code, reason):
    monkeypatch.setattr(ExportArgs, "command", lambda self: [sys.executable, "-c", textwrap.dedent(code)])
    start_export(trained_run.name)
    state = ended(export_state, trained_run)
    assert state["state"] == "failed" and reason in state["reason"], state
    assert "some library" not in state["reason"]
    assert STRAY in state["log"]  # the panel still shows the log, for people


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
