"""How far a stage is, for whoever watches the job's output: a progress bar with ETA on a terminal, plain lines
when the output is a file or a pipe (the app's log.txt, CI).

`terminal_progress` gives a TrainerCallback drawing a tqdm bar per stage, only when stdout is a terminal, so log
files never fill with carriage returns. `step_note` is the "42% · ETA 1m20s" that every logged line carries either
way. While a bar is open, `say` prints a line above it instead of through it.
"""

from __future__ import annotations

import sys
import time

from grpo_playground.step_timing import clock

_bar = None  # the bar on screen now, if any: lines go above it through tqdm.write


def say(line: str, file=None) -> None:
    """Print one line of the job's output, above the progress bar when one is drawn."""
    if _bar is not None:
        from tqdm import tqdm

        tqdm.write(line, file=file or sys.stdout)
    else:
        print(line, file=file or sys.stdout, flush=True)


def eta_seconds(step: int, max_steps: int, first_step: int, started: float, now: float | None = None,
                budget_s: float | None = None) -> float | None:
    """The time left at the pace of the steps done since `first_step` (a resumed stage counts only its own), or
    what is left of the stage's time budget (grpo.max_minutes) when that ends it first: a budgeted run that asks
    for 10^6 steps (the seed regime's arms) said "ETA 1719h" for a stage ending in minutes."""
    now = time.time() if now is None else now
    done = step - first_step
    left = (now - started) / done * max(0, max_steps - step) if done > 0 and max_steps else None
    if budget_s:
        by_budget = max(0.0, started + budget_s - now)
        left = by_budget if left is None else min(left, by_budget)
    return left


def step_note(step: int, max_steps: int, eta: float | None) -> str:
    """'42% · ETA 1m20s' ('42%' before the pace is known)."""
    note = f"{step / max_steps:.0%}" if max_steps else ""
    return note + (f" · ETA {clock(eta)}" if eta is not None else "")


def on_terminal(stream=None) -> bool:
    stream = stream or sys.stdout
    return hasattr(stream, "isatty") and stream.isatty()


def terminal_progress(stage: str) -> list:
    """The bar's callback when stdout is a terminal, else none (the logged lines carry the progress)."""
    if not on_terminal():
        return []
    # imported here: the job's bookkeeping (run_folder's `say`) runs without transformers, whose import takes
    # seconds (tests' stand-in trainer, tests/fake_trainer.py, is a child that never loads a model)
    from transformers import TrainerCallback

    class TerminalProgress(TrainerCallback):
        """One tqdm bar for a stage's steps, with its own ETA (tqdm's, from the pace of the steps)."""

        def __init__(self, stage: str):
            self.stage = stage

        def on_train_begin(self, args, state, control, **kwargs):
            global _bar
            from tqdm import tqdm

            _bar = tqdm(total=state.max_steps, initial=state.global_step, desc=self.stage, unit="step",
                        dynamic_ncols=True, file=sys.stdout)

        def on_step_end(self, args, state, control, **kwargs):
            if _bar is not None:
                _bar.update(state.global_step - _bar.n)

        def on_train_end(self, args, state, control, **kwargs):
            global _bar
            if _bar is not None:
                _bar.close()
                _bar = None

    return [TerminalProgress(stage)]
