"""`save_minutes`: when a stage saves a checkpoint because time, not a step count, has passed.

The job's RunCallback asks the Trainer to save (TrainerControl.should_save) when `due` says so; the tests' fake
trainer asks the same clock. No torch here: the fake trainer imports it.
"""

from __future__ import annotations


class SaveClock:
    """A checkpoint each time another `minutes` of the stage have passed since `start` (None: never). A step that
    outlasts several periods saves once: the count catches up with the time instead of saving at every next step."""

    def __init__(self, minutes: float | None):
        self.period_s = minutes * 60 if minutes else None
        self.started = 0.0
        self.saved = 0  # periods passed at the last save

    def start(self, now: float) -> None:
        self.started, self.saved = now, 0

    def _passed(self, now: float) -> int:
        return int((now - self.started) // self.period_s)

    def due(self, now: float) -> bool:
        return self.period_s is not None and self._passed(now) > self.saved

    def saving(self, now: float) -> None:
        """The stage saves now (also when another GPU's process found it due first: this one's period counts too)."""
        self.saved = max(self.saved + 1, self._passed(now))
