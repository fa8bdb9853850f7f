"""A stand-in for the comparison job's child (`grpo-playground compare`) that takes seconds: the
real experiment driver (its data sets, sft-W's rounds, the arms in order, progress.json, the steps a rerun skips, the
result and its report) with only the model's parts replaced. Each training step runs tests/fake_trainer.py (the real
training job without a model) in a child process where the driver runs the training CLI; each evaluation runs the
eval CLI's own code in this process (the held-out prompts loaded, graded, summarized and written) over FakeEngine's
fixed completions instead of a model's.

    python tests/fake_experiment.py ARGS   (the experiment's own arguments)

For tests of plumbing (the comparison panel, its job, stop and resume as the app sees them), never of a result: its
accuracies say nothing. tests/test_fake_experiment.py holds it to a real comparison (tests/shared_comparison.py):
the same files, the same keys in the result, the progress file and every evaluation. Tests start it with the
`fake_experiment` fixture (conftest.py).
"""

from __future__ import annotations

import sys
import types
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

TESTS = Path(__file__).resolve().parent
if str(TESTS.parent / "src") not in sys.path:  # run as a script by the job's supervisor
    sys.path.insert(0, str(TESTS.parent / "src"))

from grpo_playground.cli.args import EvalArgs, TrainArgs  # noqa: E402
from grpo_playground.eval.generation import Generation  # noqa: E402
# the real one, kept here: install() replaces it in its module
from grpo_playground.experiments.children import run as run_child  # noqa: E402

FAKE_TRAINER = TESTS / "fake_trainer.py"
# completions in the recipe's format, in turn; graded against the held-out answers, they score what they score
COMPLETIONS = ("7 + 5 = 12<end_working_out><SOLUTION>12</SOLUTION>",
               "7 + 5 = 13<end_working_out><SOLUTION>13</SOLUTION>")


class FakeEngine:
    """An eval backend (grpo_playground.eval.generation.Backend) that generates the fixed completions."""

    name = "fake"
    tokenizer = None

    def generate(self, prompts: list[str], max_new_tokens: int) -> list[Generation]:
        return [Generation(COMPLETIONS[i % len(COMPLETIONS)], 16, False) for i in range(len(prompts))]


def render_prompt(tokenizer, messages: list[dict], *settings) -> str:
    """The prompt as text without a tokenizer's chat template (there is no model to load one from)."""
    return "\n".join(message["content"] for message in messages)


def run(command: list[str], log: Path) -> None:
    """experiments.children.run, which runs each step's CLI: the training CLI as tests/fake_trainer.py in a child, the
    eval CLI's main in this process, its output in the step's log either way."""
    from grpo_playground.cli import eval as eval_cli

    python, _, module, *args = command  # python -m MODULE ARGS
    if module == TrainArgs.MODULE:
        return run_child([python, str(FAKE_TRAINER), *args], log)
    assert module == EvalArgs.MODULE, command
    print(f"$ {' '.join(command)}", flush=True)
    with open(log, "a") as f, redirect_stdout(f), redirect_stderr(f):
        code = eval_cli.main(args)
    if code:
        raise SystemExit(f"failed ({code}): {' '.join(command)}; see {log}")


def stand_ins() -> dict[tuple[str, str], object]:
    """(module, attribute) -> the stand-in: everything of the experiment that trains or loads a model."""
    torch = types.ModuleType("torch")  # the eval CLI sets torch's threads: nothing here computes with it
    torch.set_num_threads = lambda n: None
    return {("sys.modules", "torch"): torch,
            ("grpo_playground.experiments.children", "run"): run,  # what train() and evaluate_together() call
            ("grpo_playground.eval.runner", "make_backend"): lambda *args, **options: FakeEngine(),
            ("grpo_playground.eval.runner", "render_prompt"): render_prompt}


def install() -> None:
    import importlib

    for (module, name), value in stand_ins().items():
        if module == "sys.modules":
            sys.modules[name] = value
        else:
            setattr(importlib.import_module(module), name, value)


if __name__ == "__main__":
    install()
    from grpo_playground.experiments.seed_regime import main

    sys.exit(main())
