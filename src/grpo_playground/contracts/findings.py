"""A finding: one problem a check found, in plain words, with the setting to turn."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Finding:
    """What the doctor's rules over the metrics and the reward design check (rewards.design_check) both report."""

    severity: str  # "info" | "warning" | "error"
    message: str
    rule: str = ""  # the rule's name in docs/doctor.md (the design check's findings have none)
    knob: str = ""  # the setting to turn
    step: int = 0
    stage: str = "grpo"

    def to_dict(self) -> dict:
        return asdict(self)
