"""Each CLI's arguments are defined once (grpo_playground.cli.args): the parser, the child's argv and the UI's
"Equivalent CLI" all come from one dataclass, so a builder and its parser cannot disagree.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_cli_args.py
"""

from __future__ import annotations

import dataclasses
import importlib
import shlex
from pathlib import Path

import pytest

from grpo_playground.cli.args import CLIS, CompareArgs, EvalArgs, ExportArgs, ScaleOutArgs, TrainArgs


# Values unlike every default (each field set), and the defaults with only what is required.
EVERY_FIELD_SET = [
    TrainArgs(Path("r.yaml"), run_dir=Path("runs/x y"), stage="grpo", resume=True, runs_dir=Path("/tmp/runs"),
              overrides=("grpo.max_steps=3", "rewards.weights={a: 1}")),
    EvalArgs(("runs/x/grpo", "tiny"), data="gsm8k:t.jsonl", n=7, batch_size=2, max_new_tokens=9, prefill=False,
             enable_thinking=True, seed=3, backend="vllm", device="cpu", out=(Path("a.json"), Path("b.json"))),
    ExportArgs(run="runs/x", stage="sft", gguf=("f16", "q8_0"), lora_gguf=True, out="o", push_to_hub="me/r",
               no_verify=True, verify_tokens=5),
    ScaleOutArgs(Path("out dir"), run=Path("runs/x"), overrides=("grpo.max_steps=9",), n_eval=7, archive=True),
    CompareArgs(recipe=Path("r.yaml"), worked="openmath:w.parquet", answers="dapo:a.parquet", eval_data="gsm8k:e",
                eval_seed=1, n_worked=2, n_answers=3, n_eval=4, minutes=0.25, round_steps=5, format_target=0.5,
                max_rounds=6, preflight_prompts=7, eval_backend="vllm", control_lr=1e-5, control_checkpoints=3,
                only_sft_w=True,
                work=Path("w"), out=Path("o"), overrides=("grpo.beta=0.1",), eval_data_2="generator:test",
                n_eval_2=8, n_pilot=9, pilots=("recipe", "lr:grpo.learning_rate=1e-5"), pilot_minutes=0.5,
                only_arms=("grpo_a", "fresh_sft"), sft_w_sha256="ab" * 32),
]
REQUIRED_ONLY = [TrainArgs(Path("r.yaml")), EvalArgs(("tiny",)), ExportArgs(model="tiny"),
                 ScaleOutArgs(Path("o"), config="quick"), CompareArgs()]


@pytest.mark.parametrize("args", EVERY_FIELD_SET + REQUIRED_ONLY, ids=lambda a: f"{type(a).__name__}")
def test_to_argv_parses_back_to_the_same_values(args):
    assert type(args).parse_args(args.to_argv()) == args
    assert type(args).parse_args(shlex.split(args.shell())[3:]) == args  # the UI's line, after `python -m MODULE`


def test_every_cli_is_round_tripped_with_every_field_set():
    assert {type(a) for a in EVERY_FIELD_SET} == set(CLIS)
    for args in EVERY_FIELD_SET:
        unset = [f.name for f in dataclasses.fields(args)  # of a group of exclusive flags, one is set
                 if getattr(args, f.name) == f.default and not f.metadata["group"]]
        assert not unset, f"{type(args).__name__} leaves {unset} at their defaults: set them here too"


def test_every_field_has_help():
    missing = [f"{cli.__name__}.{f.name}" for cli in CLIS for f in dataclasses.fields(cli) if not f.metadata["help"]]
    assert not missing


def test_bad_arguments_are_refused_with_the_flag_named(capsys):
    with pytest.raises(SystemExit) as exit_:
        TrainArgs.parse_args(["--config", "r.yaml", "--stage", "rl"])
    assert exit_.value.code == 2 and "--stage: invalid choice: 'rl'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ExportArgs.parse_args(["--run", "r", "--model", "tiny"])  # exactly one source
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_cli_parses_with_the_dataclass(capsys):
    # the module's own --help lists the dataclass's help text: the CLI and the builders share one definition
    module = importlib.import_module(TrainArgs.MODULE)
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "continue from the run folder's last checkpoint" in out and "SECTION.KEY=VALUE" in out


def test_the_console_script_names_its_commands_and_refuses_an_unknown_one(capsys):
    from grpo_playground.cli.main import main

    assert main(["--help"]) == 0 and "train" in capsys.readouterr().out
    assert main(["trian"]) == 2 and "unknown command 'trian': use one of train, eval, export, data" in \
        capsys.readouterr().err


def test_a_shipped_recipe_is_found_by_its_name(tmp_path, monkeypatch):
    from grpo_playground.contracts.shipped import RECIPES_DIR, recipe_path

    monkeypatch.chdir(tmp_path)  # outside the checkout, as an installed package runs
    assert recipe_path("quick") == recipe_path("quick.yaml") == RECIPES_DIR / "quick.yaml"
    (tmp_path / "quick.yaml").write_text("name: mine\n")
    assert recipe_path("quick.yaml") == Path("quick.yaml")  # a file of that name wins
    assert recipe_path("no-such") == Path("no-such")  # left for the loader to name


def test_an_epilog_is_printed_as_written_after_the_options(capsys):
    with pytest.raises(SystemExit):
        TrainArgs.parse_args(["--help"], epilog="keys --set takes:\n  grpo.max_steps   steps")
    out = capsys.readouterr().out
    assert out.index("--set") < out.index("keys --set takes:\n  grpo.max_steps   steps")
