""""GRPO vs more SFT" comparisons from the UI: `python -m pipelines.experiments.seed_regime` as a background job.

Each comparison has its own folder, <runs>/comparisons/<id>/: the recipe it runs (a copy: editing the original
later changes nothing), comparison_job.json (its job record: grpo_playground.jobs.record), comparison.log (a file,
never a pipe), work/ (the experiment's data, run folders and progress.json) and comparison_result.json/.md when it
is done. Like an evaluation job it outlives the browser and the app; its state is read back from its record: waiting (for the training slot) or
running while its supervisor lives, then finished (the result exists), stopped (Stop was pressed) or failed. A
stopped or failed comparison resumes in its folder (resume_comparison): the finished steps are kept.

It trains, so it takes the training slot: its supervisor holds the flock on <runs>/.gpu.lock (the lock training
jobs' supervisors take), in its turn among them (first come, first served), so it waits for a training run to end
and training runs wait for it. One comparison at a time;
sizes and minutes are bounded (ComparisonPlan) and the experiment runs under a time limit (MAX_JOB_S), so even the
owner token cannot start a job that runs for days. Stop signals the whole process group.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from grpo_playground.child_process import job_env
from grpo_playground.cli.args import CompareArgs
from grpo_playground.contracts.process import log_tail
from grpo_playground.contracts.states import JobState
from grpo_playground.data import load_examples
from grpo_playground.data.generator import LEVELS
from grpo_playground.data.spec import parse_levels, parse_spec
from grpo_playground.jobs.kinds import COMPARE
from grpo_playground.jobs.record import step, stop_job
from grpo_playground.run_layout import (
    COMPARISON_JOB,
    COMPARISON_RESULT,
    COMPARISON_WORK,
    GPU_LOCK,
    PROGRESS_FILE,
    RECIPE_FILE,
    RUN_ID_RE,
    STATUS_FILE,
    comparisons_dir,
    new_run_id,
    read_json,
    runs_dir,
)

MAX_JOB_S = 4 * 3600  # the whole chain: SFT rounds, three arms of at most MAX_MINUTES, four evaluations
LOG_TAIL_LINES = 40
LOG_TAIL_BYTES = 16_000
LEVELS_RE = re.compile(r"^\d(-\d)?(,\d(-\d)?){0,9}$")  # single digits: "1-999999999" would build a huge range
MAX_DATA_FILE_BYTES = 50 * 2**20  # GSM8K's train split is ~4 MB; a bigger file is a mistake, or the CLI's job
DATA_KINDS = ("generator", "gsm8k")  # the panel's sources; the CLI takes every kind


def checked_source(name: str, spec: str, n: int) -> str:
    """A plan's data source: "" (the generated problems), a generator spec as typed, or a gsm8k .jsonl file, its path
    resolved, that the loader reads n problems from now (a malformed file is refused here, not minutes into the job)."""
    spec = (spec or "").strip()
    if not spec:
        return ""
    try:
        source = parse_spec(spec)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
    if source.kind not in DATA_KINDS:
        raise ValueError(f"{name} {spec!r}: the panel takes gsm8k:/path/to/file.jsonl (or leave it empty for the "
                         "generated problems); the CLI, python -m pipelines.experiments.seed_regime, takes other kinds")
    if source.kind == "generator":
        return str(source)
    resolved = f"gsm8k:{data_file(name, source.target)}"
    try:
        loaded = load_examples(resolved, n=n)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
    if len(loaded.examples) < n:
        raise ValueError(f"{name} {spec!r}: {loaded.summary()}, {n} wanted: lower the number or use a larger file")
    return resolved


def data_file(name: str, target: str) -> Path:
    """The resolved path of a data file the owner typed: an existing regular .jsonl file (after symlinks) of at most
    MAX_DATA_FILE_BYTES, so the job reads exactly the file that was checked."""
    path = Path(target).resolve()
    if path.suffix.lower() != ".jsonl":
        raise ValueError(f"{name}: {target!r} is not a .jsonl file: give gsm8k:/path/to/file.jsonl "
                         "(GSM8K's own format: one {\"question\", \"answer\"} object per line)")
    if not path.is_file():
        raise ValueError(f"{name}: no file {str(path)!r}: check the path (relative paths start in the app's folder, "
                         f"{Path.cwd()})")
    size = path.stat().st_size
    if size > MAX_DATA_FILE_BYTES:
        raise ValueError(f"{name}: {str(path)!r} is {size / 2**20:.0f} MB, over the panel's "
                         f"{MAX_DATA_FILE_BYTES // 2**20} MB: cut it to the rows you need, or run the CLI")
    return path


PILOT_PROBLEMS = 30  # the panel's pilot slice for the tuned control


@dataclass(frozen=True)
class ComparisonPlan:
    """What the app lets a user choose, each bounded (an owner's typo must not start a day-long job)."""
    minutes: float = 3.0  # T: each arm's training time after sft-W
    n_worked: int = 100  # W: worked solutions (the CLI's default is 200)
    n_answers: int = 1000  # A: answer-only problems (CLI: 4000)
    n_eval: int = 200  # held-out prompts every arm is scored on (CLI: 600)
    levels: str = "1-2"  # generator levels of every set ("" = all); `tiny` learns little above level 2
    round_steps: int = 40  # SFT steps between two format checks
    max_rounds: int = 5  # the arms start from sft-W after at most this many rounds
    format_target: float = 0.95  # sampled format rate that ends sft-W
    answers: str = ""  # A's source: "" = the generator's train split, or gsm8k:PATH.jsonl (stored resolved)
    eval_data: str = ""  # the held-out set: "" = the generator's test split, or gsm8k:PATH.jsonl (then the generated
    # held-out set is scored too, as a second column: the accuracy per source)

    LIMITS = {"minutes": (0.05, 15), "n_worked": (1, 500), "n_answers": (1, 4000), "n_eval": (2, 600),
              "round_steps": (1, 200), "max_rounds": (1, 10), "format_target": (0, 1)}

    def __post_init__(self):
        for name, (low, high) in self.LIMITS.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"{name} = {value:g} is out of range: use {low:g} to {high:g} here "
                                 "(the CLI, python -m pipelines.experiments.seed_regime, takes larger runs)")
        if self.levels and not (LEVELS_RE.match(self.levels) and set(parse_levels(self.levels)) <= set(LEVELS)):
            raise ValueError(f"levels {self.levels!r}: write levels from {LEVELS[0]} to {LEVELS[-1]} such as 1-2 "
                             "or 1,3 (or leave it empty for all levels)")
        # frozen: the checked, resolved specs replace what was typed (a resume checks its stored plan again)
        # A and the pilot slice come from the same source
        object.__setattr__(self, "answers", checked_source("answer-only problems (A)", self.answers,
                                                           self.n_answers + self.pilot()))
        object.__setattr__(self, "eval_data", checked_source("held-out set", self.eval_data, self.n_eval))

    def pilot(self) -> int:
        """Problems of A's source held out as the pilot slice the tuned control's checkpoint is picked on (never a
        held-out one): PILOT_PROBLEMS, or a quarter of A when A is small."""
        return min(PILOT_PROBLEMS, self.n_answers // 4)

    def sources(self) -> dict[str, str]:
        """Specs of W, A, the held-out set and, when that is a file, the generated held-out set ("eval_2")."""
        query = f"?levels={self.levels}" if self.levels else ""
        generated = f"generator:test{query}"
        sources = {"worked": f"generator:train{query}", "answers": self.answers or f"generator:train{query}",
                   "eval": self.eval_data or generated}
        if self.eval_data.startswith("gsm8k:"):
            sources["eval_2"] = generated
        return sources


def comparison_path(comparison_id: str) -> Path:
    """The folder of an existing comparison; the id is checked so that no one points outside the folder."""
    if not isinstance(comparison_id, str) or not RUN_ID_RE.match(comparison_id):
        raise ValueError(f"comparison id {comparison_id!r} is not valid: pick one from the list")
    path = comparisons_dir() / comparison_id
    if not (path / COMPARISON_JOB).is_file():
        raise FileNotFoundError(f"no comparison {comparison_id!r}: pick one from the list")
    return path


def experiment_command(folder: Path, plan: ComparisonPlan) -> list[str]:
    """The CLI the job runs (and the panel shows, to rerun it by hand or with larger sizes)."""
    sources = plan.sources()
    second = {"eval_data_2": sources["eval_2"], "n_eval_2": plan.n_eval} if "eval_2" in sources else {}
    return CompareArgs(recipe=folder / RECIPE_FILE, worked=sources["worked"], answers=sources["answers"],
                       eval_data=sources["eval"], **second, n_worked=plan.n_worked, n_answers=plan.n_answers,
                       n_eval=plan.n_eval, n_pilot=plan.pilot(), minutes=plan.minutes, round_steps=plan.round_steps,
                       max_rounds=plan.max_rounds, format_target=plan.format_target,
                       work=folder / COMPARISON_WORK, out=folder / COMPARISON_RESULT).command()


def comparison_state(comparison_id: str) -> dict:
    """{"id", "state": waiting|running|finished|stopped|failed, "plan", "recipe_name", "command", "resumes", "order" and
    "steps" (progress.json's), "current" (the running step's training status, if any), "result" (when finished),
    "log"}."""
    folder = comparison_path(comparison_id)
    job = COMPARE.status(folder)
    meta = job.record.get("meta", {})
    log = log_tail(folder / COMPARE.log_file, LOG_TAIL_BYTES, lines=LOG_TAIL_LINES)
    progress_file = read_json(folder / COMPARISON_WORK / PROGRESS_FILE)
    progress = progress_file.get("steps", {})
    if job.running:  # queued: its supervisor waits for the training slot
        state = "waiting" if job.state == JobState.QUEUED else "running"
    else:
        state = job.state
    running = [step for step, s in progress.items() if s.get("state") == "running"]
    current = {}
    if state == "running" and running and progress[running[-1]].get("run_dir"):
        current = read_json(Path(progress[running[-1]]["run_dir"]) / STATUS_FILE)
    return {"id": comparison_id, "state": state, "plan": meta.get("plan", {}), "recipe_name": meta.get("recipe_name"),
            "command": meta.get("command", ""), "started": job.record.get("started"), "resumes": meta.get("resumes", 0),
            "order": progress_file.get("order", []), "steps": progress,
            "current": current, "result": job.result or None, "reason": job.reason, "log": log}


def list_comparisons() -> list[str]:
    """Ids of every comparison, newest first (ids start with their creation time)."""
    return sorted((p.name for p in comparisons_dir().iterdir() if (p / COMPARISON_JOB).is_file()), reverse=True)


def running_comparison() -> str | None:
    for comparison_id in list_comparisons():
        if COMPARE.status(comparisons_dir() / comparison_id).running:
            return comparison_id
    return None


def _refuse_while_one_runs() -> None:
    busy = running_comparison()
    if busy:
        raise RuntimeError(f"comparison {busy} is still running: wait for it or press Stop")


def _launch(folder: Path, plan: ComparisonPlan, meta: dict, log_mode: str) -> dict:
    """Start the experiment job of `folder` (its recipe copied in) with `plan`; `meta` beside its record."""
    command = experiment_command(folder, plan)
    env = job_env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    # the supervisor holds the training slot (the lock training jobs take) for the whole experiment; past the time
    # limit it stops the experiment and kills what is left of its group (a training child)
    with open(folder / COMPARE.log_file, log_mode) as log:
        COMPARE.start(folder, [step("experiment", command, MAX_JOB_S)], log, env,
                      slot=runs_dir() / GPU_LOCK, result=folder / f"{COMPARISON_RESULT}.json",
                      meta={**meta, "plan": asdict(plan),
                            "command": "OMP_NUM_THREADS=1 " + shlex.join(["python", *command[1:]])})
    return comparison_state(folder.name)


def start_comparison(recipe: Path, recipe_name: str, plan: ComparisonPlan) -> dict:
    """Start the experiment on `recipe` (already checked; `recipe_name` says where it came from) with `plan`;
    refuses while another comparison runs."""
    _refuse_while_one_runs()
    folder = comparisons_dir() / new_run_id("compare")
    folder.mkdir()
    shutil.copyfile(recipe, folder / RECIPE_FILE)
    return _launch(folder, plan, {"recipe_name": recipe_name}, "wb")


def resume_comparison(comparison_id: str) -> dict:
    """Run a stopped or cut (failed: its supervisor was killed, the machine restarted) comparison again in its own
    folder, with its own recipe copy and plan: the experiment skips the steps it finished (their run folders and
    evaluations stay as they are) and starts the interrupted one over. The log continues."""
    folder = comparison_path(comparison_id)
    state = comparison_state(comparison_id)["state"]
    if state in ("waiting", "running"):
        raise RuntimeError(f"comparison {comparison_id} is still running: nothing to resume")
    if state == "finished":
        raise RuntimeError(f"comparison {comparison_id} has finished: start a new one to run it again")
    _refuse_while_one_runs()
    meta = COMPARE.status(folder).record.get("meta", {})
    return _launch(folder, ComparisonPlan(**meta.get("plan", {})),
                   {**meta, "resumes": meta.get("resumes", 0) + 1}, "ab")


def stop_comparison(comparison_id: str) -> str:
    pid = stop_job(COMPARE.record(comparison_path(comparison_id)))
    return f"Comparison {comparison_id} is not running." if pid is None else \
        f"Stopped comparison {comparison_id} (pid {pid})."
