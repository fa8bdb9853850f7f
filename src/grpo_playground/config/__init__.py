"""The run configuration (dataclasses with help text) and its YAML recipe round trip. No torch: the UI imports it.

    from grpo_playground.config import RunConfig, load_recipe, save_recipe
    cfg = load_recipe("recipes/tiny-cpu.yaml"); cfg.grpo.max_steps = 20; save_recipe(cfg.validate(), "x.yaml")
"""

from grpo_playground.config.recipe_io import (
    apply_overrides,
    config_from_dict,
    config_to_dict,
    dump_recipe,
    load_recipe,
    override_keys_help,
    recipe_from_text,
    save_recipe,
)
from grpo_playground.config.run_config import (
    ALL_PROJECTIONS,
    LOSS_TYPES,
    SECTIONS,
    SWANLAB_MODES,
    ConfigError,
    DataConfig,
    GRPOStage,
    Hardware,
    LoraSettings,
    ModelConfig,
    RewardSettings,
    RunConfig,
    SFTStage,
    Tracking,
)

__all__ = [
    "ALL_PROJECTIONS", "LOSS_TYPES", "SECTIONS", "SWANLAB_MODES", "ConfigError", "DataConfig", "GRPOStage",
    "Hardware", "LoraSettings", "ModelConfig", "RewardSettings", "RunConfig", "SFTStage", "Tracking",
    "apply_overrides", "config_from_dict", "config_to_dict", "dump_recipe", "load_recipe", "override_keys_help",
    "recipe_from_text", "save_recipe",
]
