"""Every CLI's arguments but `data`'s (cli/data.py builds its own parser), defined once: one frozen dataclass per
CLI, each field with its help text.

From a dataclass come its argparse parser (`parser()`, `parse_args(argv)`), the argv that gives back the same
values (`to_argv()`: what the app runs as a child), and that command as one shell line (`shell()`: the UI's
"Equivalent CLI"). tests/test_cli_args.py round-trips each (to_argv() -> parse_args() == the same values).
Standard library and contracts only: the UI, the jobs and the CLIs all import it.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import typing
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import ClassVar

from grpo_playground.contracts.layout import GGUF_TYPES
from grpo_playground.contracts.states import JOB_STAGES, TRAINED_STAGES


def option(default=MISSING, *, help: str, flag: str | None = None, choices=None, metavar: str | None = None,
           many: str | None = None, group: str | None = None):
    """A CLI field. flag: default `--field-name`; many: "+" (one flag, several values) or "append" (a repeatable
    flag) for a tuple field; group: fields of one required, mutually exclusive group (exactly one is given)."""
    meta = {"help": help, "flag": flag, "choices": choices, "metavar": metavar, "many": many, "group": group}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class CliArgs:
    MODULE: ClassVar[str]  # what `python -m` runs
    COMMAND: ClassVar[str | None] = None  # its `grpo-playground COMMAND` console command, when it has one
    DESCRIPTION: ClassVar[str]

    @classmethod
    def _options(cls) -> list[tuple[dataclasses.Field, type, str]]:
        hints = typing.get_type_hints(cls)
        return [(f, hints[f.name], f.metadata["flag"] or "--" + f.name.replace("_", "-"))
                for f in dataclasses.fields(cls)]

    @classmethod
    def parser(cls, epilog: str | None = None) -> argparse.ArgumentParser:
        """The argparse parser; `epilog`: text after the options in --help, kept as written (e.g. the keys --set
        takes, which the CLI lists from the config without this module importing it)."""
        prog = f"grpo-playground {cls.COMMAND}" if cls.COMMAND else f"python -m {cls.MODULE}"
        parser = argparse.ArgumentParser(prog=prog, description=cls.DESCRIPTION, epilog=epilog,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
        for f, kind, flag in cls._options():
            meta = f.metadata
            target = parser
            if meta["group"]:
                if meta["group"] not in groups:
                    groups[meta["group"]] = parser.add_mutually_exclusive_group(required=True)
                target = groups[meta["group"]]
            kwargs = {"dest": f.name, "help": meta["help"]}
            if f.default is not MISSING:
                kwargs["default"] = f.default
            elif not meta["group"]:
                kwargs["required"] = True
            if kind is bool:
                kwargs["action"] = "store_true"
            elif kind == bool | None:
                kwargs["action"] = argparse.BooleanOptionalAction
            else:
                kwargs.update(type=_scalar(kind), choices=meta["choices"], metavar=meta["metavar"])
                if meta["many"] == "append":
                    kwargs.update(action="append", default=None)
                elif meta["many"]:
                    kwargs["nargs"] = meta["many"]
            target.add_argument(flag, **kwargs)
        return parser

    @classmethod
    def parse_args(cls, argv: list[str] | None = None, epilog: str | None = None):
        """The dataclass of `argv` (default sys.argv[1:]); argparse's usage error and exit 2 for bad arguments."""
        values = vars(cls.parser(epilog).parse_args(argv))
        for f, _, _ in cls._options():
            if f.metadata["many"]:
                values[f.name] = tuple(values[f.name] or f.default)
        return cls(**values)

    def to_argv(self) -> list[str]:
        """The arguments that give back these values: each value that differs from its default (and every
        required one)."""
        argv = []
        for f, kind, flag in self._options():
            value = getattr(self, f.name)
            if f.default is not MISSING and value == f.default:
                continue
            if kind is bool:
                argv.append(flag)
            elif kind == bool | None:
                argv.append(flag if value else "--no-" + flag[2:])
            elif f.metadata["many"] == "append":
                argv += [part for item in value for part in (flag, str(item))]
            elif f.metadata["many"]:
                argv += [flag, *map(str, value)]
            else:
                argv += [flag, str(value)]
        return argv

    def command(self) -> list[str]:
        """The child process's argv: this interpreter running the CLI."""
        return [sys.executable, "-m", self.MODULE, *self.to_argv()]

    def shell(self, env: str = "") -> str:
        """The command as one line to paste into a shell (`python` for this interpreter)."""
        return " ".join([*([env] if env else []), "python", "-m", self.MODULE, *map(shlex.quote, self.to_argv())])


def _scalar(kind) -> type:
    """The value type of an annotation such as `Path | None` or `tuple[str, ...]`."""
    parts = [a for a in typing.get_args(kind) if a is not type(None) and a is not Ellipsis] or [kind]
    return parts[0]


@dataclass(frozen=True)
class TrainArgs(CliArgs):
    MODULE: ClassVar[str] = "grpo_playground.cli.train"
    COMMAND: ClassVar[str] = "train"
    DESCRIPTION: ClassVar[str] = ("Train a run from a recipe: SFT then GRPO (or one stage), writing everything into "
                                  "the run's folder.")

    config: Path = option(help="recipe YAML, or the name of a shipped recipe (quick, tiny-cpu, ...)")
    run_dir: Path | None = option(None, help="use this run folder (required with --resume)")
    stage: str = option("all", choices=JOB_STAGES, help="all: SFT, then the pre-flight, then GRPO (default); sft or "
                                                          "grpo: that stage alone; preflight: only sample a few groups "
                                                          "from the model, score them, write preflight.json")
    resume: bool = option(False, help="continue from the run folder's last checkpoint")
    runs_dir: Path | None = option(None, help="where new run folders go (default: $GRPO_PLAYGROUND_RUNS_DIR or ./runs)")
    overrides: tuple[str, ...] = option((), flag="--set", many="append", metavar="SECTION.KEY=VALUE",
                                        help="override a recipe value, e.g. --set grpo.max_steps=20 (repeatable; "
                                             "every key is listed below)")


@dataclass(frozen=True)
class EvalArgs(CliArgs):
    MODULE: ClassVar[str] = "grpo_playground.cli.eval"
    COMMAND: ClassVar[str] = "eval"
    DESCRIPTION: ClassVar[str] = ("Evaluate a model on a data source: format rate, strict and lenient accuracy, "
                                  "length, re-check rate.")

    model: tuple[str, ...] = option(many="append", help="registry name, local model folder, or run adapter folder; "
                                    "repeat it to evaluate several in turn (with --backend vllm a base and its "
                                    "adapters share one engine start)")
    data: str = option("generator:test", help="source spec (default generator:test)")
    n: int = option(100, help="number of examples (default 100)")
    batch_size: int = option(16, help="prompts generated together (default 16)")
    max_new_tokens: int = option(256, help="tokens generated per completion at most (default 256)")
    prefill: bool | None = option(None, help="prefill the opening reasoning tag (default: the run's recipe, else on)")
    enable_thinking: bool = option(False, help="Qwen3 templates: leave the thinking switch on")
    seed: int = option(0, help="generator seed")
    backend: str = option("transformers", help="transformers, llama.cpp or vllm (default transformers)")
    device: str | None = option(None, help="cpu, cuda, ... (default: cuda when available)")
    out: tuple[Path, ...] = option((), many="append", help="write the full results (every completion) as JSON; "
                                                         "one per --model, in the same order")


@dataclass(frozen=True)
class ExportArgs(CliArgs):
    MODULE: ClassVar[str] = "grpo_playground.cli.export"
    COMMAND: ClassVar[str] = "export"
    DESCRIPTION: ClassVar[str] = ("Export a trained run (or a plain model) to GGUF for llama.cpp / Ollama, fully "
                                  "offline.")

    run: str | None = option(None, group="source", help="run folder with sft/ and grpo/ LoRA adapters")
    model: str | None = option(None, group="source",
                               help="registry name (e.g. tiny, smollm2-135m) or a HF model folder")
    stage: str | None = option(None, choices=TRAINED_STAGES, help="which adapter of the run (default: grpo, else sft)")
    gguf: tuple[str, ...] = option(("q4_k_m",), many="+", metavar="TYPE",
                                   help=f"GGUF types to write (f16 always); choices: {', '.join(GGUF_TYPES)}")
    lora_gguf: bool = option(False, help="also write the LoRA as a GGUF adapter (+ base f16)")
    out: str | None = option(None, help="output folder (default RUN/export/STAGE or exports/MODEL)")
    push_to_hub: str | None = option(None, metavar="REPO", help="upload the folder to this hub repo (needs HF_TOKEN)")
    no_verify: bool = option(False, help="skip the greedy f16-vs-HF and q4 answer checks")
    verify_tokens: int = option(24, help="greedy tokens compared per prompt")


@dataclass(frozen=True)
class ScaleOutArgs(CliArgs):
    MODULE: ClassVar[str] = "grpo_playground.cli.scale_out"
    COMMAND: ClassVar[str] = "scale-out"
    DESCRIPTION: ClassVar[str] = ("Write a recipe, or a run's SFT checkpoint, as a verl or OpenRLHF GRPO job, scored "
                                  "by the same reward functions (for when one GPU is not enough).")

    out: Path = option(help="a new (or empty) folder to write")
    config: str | None = option(None, group="source",
                                help="a recipe file or a shipped recipe's name (quick, tiny-cpu, smollm2, qwen3-8b)")
    run: Path | None = option(None, group="source", help="a run folder: its recipe, GRPO from its SFT adapter")
    overrides: tuple[str, ...] = option((), flag="--set", many="append", metavar="SECTION.KEY=VALUE",
                                        help="override a recipe key, e.g. grpo.max_steps=500 (repeatable)")
    n_eval: int = option(500, help="held-out prompts written (from data.eval_source)")
    archive: bool = option(False, flag="--zip", help="also write OUT.zip beside the folder (what the app offers)")


@dataclass(frozen=True)
class CompareArgs(CliArgs):
    MODULE: ClassVar[str] = "grpo_playground.experiments.seed_regime"
    COMMAND: ClassVar[str] = "compare"
    DESCRIPTION: ClassVar[str] = ("GRPO in the seed's own data regime (worked solutions scarce, final answers "
                                  "plentiful): GRPO on answer-only problems vs more SFT on the few worked ones.")

    recipe: Path | None = option(None, help="the recipe every arm trains with (default: the shipped tiny-cpu)")
    worked: str = option("generator:train",
                         help="source of W (worked solutions): generator:..., openmath:PATH, gsm8k:PATH")
    answers: str = option("generator:train", help="source of A (answers only): generator:..., dapo:PATH, gsm8k:PATH")
    eval_data: str = option("generator:test", help="held-out source spec")
    eval_seed: int = option(0, help="seed of the held-out prompts")
    eval_data_2: str | None = option(None, help="a second held-out source, reported as its own column (W, A and "
                                                "the fresh problems skip its prompts too)")
    n_worked: int = option(200, help="W: worked problems")
    n_answers: int = option(4000, help="A: answer-only problems")
    n_pilot: int = option(0, help="problems of --answers held out from A as the pilot slice (`pilot.jsonl`): "
                                  "GRPO's settings are tuned on it, never on the held-out sets")
    pilots: tuple[str, ...] = option((), flag="--pilot", many="append", metavar="NAME[:grpo.KEY=VALUE,...]",
                                     help="a short GRPO pilot from sft-W (repeatable; list the recipe's own settings "
                                          "first): the one most accurate on the pilot slice sets the GRPO arm's")
    pilot_minutes: float = option(2.0, help="each pilot's GRPO time")
    n_eval: int = option(600, help="held-out prompts every arm is scored on")
    n_eval_2: int = option(600, help="prompts of --eval-data-2")
    minutes: float = option(10.0, help="T: the time each arm trains after sft-W")
    round_steps: int = option(40, help="SFT steps between two format checks")
    format_target: float = option(0.95, help="sampled format rate that ends sft-W")
    max_rounds: int = option(10, help="at most this many SFT rounds; the arms then start from the last one, "
                                      "target met or not")
    preflight_prompts: int = option(8, help="prompts each format check samples")
    eval_backend: str = option("transformers", choices=("transformers", "vllm"),
                               help="how the four checkpoints are evaluated (vllm: GPU only, adapters without "
                                    "registered tags)")
    control_lr: float | None = option(None, help="peak lr of the two SFT continuations (default: a tenth of the "
                                                 "recipe's SFT lr)")
    control_checkpoints: int = option(4, help="with a pilot slice (--n-pilot): the more-SFT control saves this many "
                                              "checkpoints evenly spaced in its planned steps and as many in its time "
                                              "(one every T / (k + 1) minutes), and the one most accurate on the pilot "
                                              "slice is scored as the tuned control (0: none)")
    only_sft_w: bool = option(False, help="stop after the data and sft-W (a later run without it goes on from there)")
    only_arms: tuple[str, ...] = option((), many="append", metavar="ARM",
                                        choices=("grpo_a", "more_sft_w", "fresh_sft"),
                                        help="train and score only these arms (repeatable) and write no report: "
                                             "a later run in the same --work, these arms' folders carried there, "
                                             "goes on with the rest")
    sft_w_sha256: str | None = option(None, help="refuse to start unless sft-W's adapter in --work has this hash "
                                                 "(one carried from an earlier lease: every arm from the same checkpoint)")
    work: Path | None = option(None, help="the experiment's folder: data, run folders, progress.json "
                                          "(default: runs/seed_regime)")
    out: Path | None = option(None, help="the result files <out>.json and <out>.md "
                                         "(default: results/learning_seed_regime_cpu)")
    overrides: tuple[str, ...] = option((), flag="--set", many="append", metavar="SECTION.KEY=VALUE",
                                        help="recipe override passed to every training run "
                                             "(e.g. grpo.learning_rate=1e-4)")


CLIS = (TrainArgs, EvalArgs, ExportArgs, ScaleOutArgs, CompareArgs)
