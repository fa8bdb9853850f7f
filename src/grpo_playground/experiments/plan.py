"""A comparison as the app lets a user choose it (ComparisonPlan): every size bounded, every data file checked and
resolved before the job starts. The panel's form, its API and the job's command line all derive from it: its fields
are the form's inputs, `from_form` checks what a form or an API call sent, and `args` gives the CLI's arguments
(`grpo-playground compare`, which takes larger runs and every data format).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path

from grpo_playground.cli.args import CompareArgs
from grpo_playground.data import load_examples
from grpo_playground.data.generator import LEVELS
from grpo_playground.data.spec import parse_levels, parse_spec

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
                         "generated problems); the CLI, grpo-playground compare, takes other kinds")
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
                                 "(the CLI, grpo-playground compare, takes larger runs)")
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

    @classmethod
    def from_form(cls, values: dict) -> ComparisonPlan:
        """The plan of a form's or an API call's values (by field name; a missing one keeps its default): numbers
        must be finite numbers, whole where the field is, before the bounds are checked."""
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown comparison settings {sorted(unknown)}: use {form_fields()}")
        typed = {}
        for f in dataclasses.fields(cls):
            if f.name not in values:
                continue
            value = values[f.name]
            if f.type == "str":
                typed[f.name] = str(value or "").strip()
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{f.name} must be a number, got {value!r}")
            if f.type == "int" and value != int(value):
                raise ValueError(f"{f.name} must be a whole number, got {value!r}")
            typed[f.name] = int(value) if f.type == "int" else float(value)
        return cls(**typed)

    def args(self, recipe: Path, work: Path, out: Path) -> CompareArgs:
        """The CLI's arguments that run this plan on `recipe`, in `work`, writing <out>.json and <out>.md."""
        sources = self.sources()
        second = {"eval_data_2": sources["eval_2"], "n_eval_2": self.n_eval} if "eval_2" in sources else {}
        return CompareArgs(recipe=recipe, worked=sources["worked"], answers=sources["answers"],
                           eval_data=sources["eval"], **second, n_worked=self.n_worked, n_answers=self.n_answers,
                           n_eval=self.n_eval, n_pilot=self.pilot(), minutes=self.minutes,
                           round_steps=self.round_steps, max_rounds=self.max_rounds,
                           format_target=self.format_target, work=work, out=out)


def form_fields() -> list[str]:
    """The plan's settings in the form's order (the panel's inputs, the API's parameters after the recipe)."""
    return [f.name for f in dataclasses.fields(ComparisonPlan)]
