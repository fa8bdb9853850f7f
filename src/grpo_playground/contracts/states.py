"""Job states and training stages. str enums, so a state is written to and read from JSON as the same string it
always was ("running", "sft"), and compares equal to it."""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    CREATED = "created"  # the run folder exists, nothing spawned yet
    QUEUED = "queued"  # waiting for the training slot
    RUNNING = "running"
    STOPPING = "stopping"  # a stop was asked: saving at the next step
    STOPPED = "stopped"
    FINISHED = "finished"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


ACTIVE_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.STOPPING)
FINAL_STATES = (JobState.STOPPED, JobState.FINISHED, JobState.FAILED)


class StepState(str, Enum):
    """One step of a background job (grpo_playground.jobs.record): an evaluation of one checkpoint, an export."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    STOPPED = "stopped"

    def __str__(self) -> str:
        return self.value


class Stage(str, Enum):
    SFT = "sft"
    GRPO = "grpo"

    def __str__(self) -> str:
        return self.value


TRAINED_STAGES = (Stage.SFT.value, Stage.GRPO.value)  # in training order; each leaves a LoRA folder of its name
JOB_STAGES = ("all", *TRAINED_STAGES, "preflight")  # pipelines.train --stage
