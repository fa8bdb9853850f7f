"""A run's settings as its checkpoints' consumers (eval, export, chat) need them, read from the run's own recipe:
the tags and prefill to prompt with, the reward weights to score with, the base model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpo_playground.config.recipe_io import load_recipe
from grpo_playground.run_layout import recipe_of
from grpo_playground.tags import Tags


@dataclass(frozen=True)
class RunSettings:
    """What a checkpoint's consumers (eval, export, chat) must prompt and score it with: the run's own choices."""

    tags: Tags
    prefill_reasoning: bool
    reward_weights: dict[str, float]
    base_model: str
    recipe: Path


def run_settings(model: str | Path) -> RunSettings | None:
    """The tags, prefill, reward weights and base model a run (or one of its stage folders) was trained with;
    None when `model` is not inside a run. A recipe that does not load raises ConfigError, naming the fix."""
    recipe = recipe_of(model)
    if recipe is None:
        return None
    config = load_recipe(recipe)
    return RunSettings(config.rewards.tags, config.data.prefill_reasoning, dict(config.rewards.weights),
                       config.model.name_or_path, recipe)
