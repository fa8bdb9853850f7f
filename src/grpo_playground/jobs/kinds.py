"""The app's five kinds of background job and the one status each is read as.

A `JobKind` says what is particular to a kind: where its record, log and traceback file live in its folder, the CLI
arguments class its steps run, and how its own result file reads. Everything else is the same for every kind:
`start` writes the record and starts its supervisor (grpo_playground.jobs.record), and `status` reads it back as one
`JobStatus`: the record says whether the job still runs, the child's result file whether it finished, and a failed
job's reason comes from that result or from the step's traceback file (the supervisor copies its last line into the
record), never from the log's text. Adding a kind is one `JobKind` here (its files are named from its name:
contracts.layout.job_record, job_log) and the module that starts it; a kind that trains also adds its records to
record.SLOT_RECORDS, the training slot's queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable

from grpo_playground.cli.args import CliArgs, CompareArgs, EvalArgs, ExportArgs, ScaleOutArgs, TrainArgs
from grpo_playground.contracts.process import is_alive
from grpo_playground.contracts.states import ACTIVE_STATES, JobState
from grpo_playground.jobs.record import job_running, job_state, read_record, start_job
from grpo_playground.contracts.layout import (
    COMPARISON_RESULT, COMPARISON_STEM, JOB_FILE, LOG_FILE, SCALE_OUT_DIR, SCALE_OUT_RESULT,
    TRACEBACK_FILE, job_log, job_record, traceback_of,
)
from grpo_playground.contracts.process import read_json
from grpo_playground.run_layout import read_status

MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class Outcome:
    """What a job's own result says: whether it finished, the error it wrote, and the result itself."""

    ok: bool
    error: str = ""
    data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class JobStatus:
    """One job as the app shows it, the same for every kind."""

    kind: str
    state: str  # "none" (never started), or a JobState: created, queued, running, stopping, finished, stopped, failed
    reason: str = ""  # why it failed or stopped
    result: dict = field(default_factory=dict)  # its result file, this attempt's ({} when it wrote none)
    record: dict = field(default_factory=dict)

    @property
    def running(self) -> bool:
        """Starting, waiting for the training slot or running."""
        return self.state in (JobState.CREATED, *ACTIVE_STATES)


@dataclass(frozen=True)
class JobKind:
    name: str  # the record's "kind"
    args: type[CliArgs]  # the CLI its steps run (a child's argv comes only from this class: cli.args)
    read_result: Callable[[dict, Path], Outcome]  # (record, folder) -> what the job's own result file says
    stem: str = ""  # its files in its folder are STEM_job.json, STEM.log (default: its name, "-" as "_")...
    record_file: str = ""  # ...unless named here
    log_file: str = ""
    traceback_file: str = ""  # where the step's CLI writes why it failed (contracts.process.keep_traceback, fail)

    def __post_init__(self) -> None:
        stem = self.stem or self.name.replace("-", "_")
        object.__setattr__(self, "record_file", self.record_file or job_record(stem))
        object.__setattr__(self, "log_file", self.log_file or job_log(stem))
        object.__setattr__(self, "traceback_file", self.traceback_file or traceback_of(self.record_file))

    def record(self, folder: Path) -> Path:
        return Path(folder) / self.record_file

    def start(self, folder: Path, steps: list[dict], log: BinaryIO, env: dict[str, str], **kwargs) -> dict:
        """Write the record of a job of this kind in `folder` and start its supervisor (record.start_job)."""
        return start_job(self.record(folder), self.name, steps, log, env,
                         traceback=Path(folder) / self.traceback_file, **kwargs)

    def status(self, folder: Path) -> JobStatus:
        record = read_record(self.record(folder))
        if not record:
            return JobStatus(self.name, "none")
        state = job_state(record)
        if job_running(record):
            return JobStatus(self.name, state, record=record)
        if is_alive(record.get("pid"), record.get("start_ticks")):  # it wrote its end; a run's status.json comes last
            return JobStatus(self.name, JobState.RUNNING.value, record=record)
        outcome = self.read_result(record, Path(folder))
        if outcome.ok:
            return JobStatus(self.name, JobState.FINISHED.value, result=outcome.data, record=record)
        if state == JobState.STOPPED:
            reason = outcome.error or record.get("reason") or "stopped on request"
            return JobStatus(self.name, state, reason, outcome.data, record)
        # the child's own error, else the supervisor's: the step's traceback line and exit, a time limit, a death
        reason = outcome.error or (f"the {self.name} process ended without a result "
                                   f"({record.get('reason') or 'no exit status recorded'})")
        return JobStatus(self.name, JobState.FAILED.value, reason[:MAX_REASON_CHARS], outcome.data, record)


def this_attempt(record: dict, path: Path) -> dict:
    """A result file written by the record's attempt: {} when missing, or left by an earlier attempt."""
    result = read_json(path)
    return result if float(result.get("started") or 0) >= float(record.get("started") or 0) else {}


def _train_result(record: dict, folder: Path) -> Outcome:
    status = read_status(folder)  # the job keeps it; the supervisor writes how it ended if it could not
    return Outcome(status.get("state") == JobState.FINISHED, str(status.get("reason") or ""), status)


def _eval_result(record: dict, folder: Path) -> Outcome:
    # it ran to its end when it was not stopped: each checkpoint's result file says whether that one was written
    ended = record.get("state") == JobState.FINISHED or (bool(record.get("ended"))
                                                         and record.get("state") != JobState.STOPPED)
    return Outcome(ended, data={item["out"]: Path(item["out"]).is_file() for item in record["meta"]["items"]})


def _export_result(record: dict, folder: Path) -> Outcome:
    result = this_attempt(record, Path(record.get("result") or ""))  # export/<stage>/export.json
    return Outcome(result.get("state") == JobState.FINISHED, str(result.get("error") or ""), result)


def scale_out_archive(run_dir: Path) -> Path:
    """The download: the scale-out folder zipped beside it."""
    return Path(run_dir) / f"{SCALE_OUT_DIR}.zip"


def _scale_out_result(record: dict, folder: Path) -> Outcome:
    result = read_json(folder / SCALE_OUT_DIR / SCALE_OUT_RESULT)  # the folder is removed before each attempt
    archive = scale_out_archive(folder)
    return Outcome(bool(result) and archive.is_file(), data={**result, "zip": str(archive)} if result else {})


def _comparison_result(record: dict, folder: Path) -> Outcome:
    result = read_json(folder / f"{COMPARISON_RESULT}.json")  # written last, by the experiment
    return Outcome(bool(result), data=result)


TRAIN = JobKind("train", TrainArgs, _train_result, record_file=JOB_FILE, log_file=LOG_FILE,
                traceback_file=TRACEBACK_FILE)  # the run folder's own names
EVAL = JobKind("eval", EvalArgs, _eval_result)  # in <runs>/evals/
EXPORT = JobKind("export", ExportArgs, _export_result)  # in the run folder, as SCALE_OUT
SCALE_OUT = JobKind("scale-out", ScaleOutArgs, _scale_out_result, stem=SCALE_OUT_DIR)
COMPARE = JobKind("compare", CompareArgs, _comparison_result, stem=COMPARISON_STEM)  # in <runs>/comparisons/<id>/
KINDS = {kind.name: kind for kind in (TRAIN, EVAL, EXPORT, SCALE_OUT, COMPARE)}
