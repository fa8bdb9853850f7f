"""Where a training step's time goes: exclusive wall time per phase, one set of `timing/*` keys per step.

    timer = StepTimer(sync=torch.cuda.synchronize)     # sync: CUDA work is asynchronous, time it finished
    timer.wrap(trainer, "training_step", "forward_backward")   # nested wraps pause their parent's clock
    ... RunCallback calls timer.begin_step() / timer.end_step() around every optimizer step

Phases (each exclusive of the phases nested inside it, so they add up to the step):
  rollout           sampling the completions (HF generate, vLLM, Unsloth), without the weight sync
  weight_sync       pushing the updated policy into vLLM's copy (TRL's colocated vLLM)
  rewards           the reward functions over the batch
  logprobs          the rest of batch preparation: reference/old log-probs, tokenizing, advantages
  forward_backward  the loss's forward and backward passes
  optimizer         the optimizer step (between the Trainer's pre-/post-optimizer callbacks)
  callbacks         the product's own callback work (status, metrics, samples, doctor, tracker) of the step before
  other             the step's wall time minus all of the above (data loading, the Trainer's bookkeeping)
`timing/step_s` is their sum: the wall time of one optimizer step as the user waits for it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from functools import wraps

PHASES = ("rollout", "weight_sync", "rewards", "logprobs", "forward_backward", "optimizer", "callbacks", "other")
STEP_KEY = "timing/step_s"


def clock(seconds: float) -> str:
    """A duration as people read it: 4m05s, 1h20m (the Training tab's ETA and the CLI's say it the same way)."""
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def phase_key(phase: str) -> str:
    return f"timing/{phase}_s"


class StepTimer:
    def __init__(self, sync=None):
        self.sync = sync or (lambda: None)
        self.spent: dict[str, float] = {}
        self.counters: dict[str, float] = {}
        self._stack: list[list] = []  # [phase, started] of the phases open now, innermost last
        self._step_started: float | None = None
        self._carried_callbacks = 0.0

    @contextmanager
    def phase(self, name: str):
        self.sync()
        now = time.perf_counter()
        if self._stack:  # pause the enclosing phase: its time stays exclusive
            parent = self._stack[-1]
            self._add(parent[0], now - parent[1])
        self._stack.append([name, now])
        try:
            yield
        finally:
            self.sync()
            now = time.perf_counter()
            self._add(name, now - self._stack.pop()[1])
            if self._stack:
                self._stack[-1][1] = now

    def wrap(self, obj, method: str, name: str) -> bool:
        """Time every call of obj.method as phase `name`; False when obj has no such method (another backend)."""
        original = getattr(obj, method, None)
        if original is None:
            return False

        @wraps(original)
        def timed(*args, **kwargs):
            with self.phase(name):
                return original(*args, **kwargs)

        setattr(obj, method, timed)
        return True

    def count(self, name: str, value: float) -> None:
        self.counters[name] = self.counters.get(name, 0.0) + value

    def add_callbacks(self, seconds: float) -> None:
        """Time the product's callbacks spent after a step ended: it is shown with the next step."""
        self._carried_callbacks += seconds

    def begin_step(self) -> None:
        if self._step_started is None:  # once per optimizer step, whatever the gradient accumulation
            self.sync()
            self.spent, self.counters = {}, {}
            self._step_started = time.perf_counter()

    def end_step(self) -> dict[str, float]:
        """The step's `timing/*` keys (plus counters such as `rollout/tokens`); empty if no step was begun."""
        if self._step_started is None:
            return {}
        self.sync()
        wall = time.perf_counter() - self._step_started + self._carried_callbacks
        self._add("callbacks", self._carried_callbacks)
        self._carried_callbacks, self._step_started = 0.0, None
        known = sum(self.spent.values())
        row = {phase_key(p): round(self.spent.get(p, 0.0), 6) for p in PHASES if p != "other"}
        row[phase_key("other")] = round(max(wall - known, 0.0), 6)
        row[STEP_KEY] = round(wall, 6)
        row.update(self.counters)
        return row

    def _add(self, name: str, seconds: float) -> None:
        self.spent[name] = self.spent.get(name, 0.0) + seconds


def cuda_sync():
    """torch.cuda.synchronize when a GPU is in use, else None (CPU work is synchronous)."""
    import torch

    return torch.cuda.synchronize if torch.cuda.is_available() else None
