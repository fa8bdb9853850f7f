"""RunConfig: shipped recipes load, round trips are lossless, bad values fail with the field, value and a fix."""

from __future__ import annotations

import re
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from grpo_playground.config import (
    LOSS_TYPES,
    SECTIONS,
    ConfigError,
    RunConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_recipe,
    recipe_from_text,
    save_recipe,
)

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))


def test_every_field_has_help_text():
    # The Training tab builds its form from these: a field without help is a blank label there.
    for cls in [RunConfig, *SECTIONS.values()]:
        for f in fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help text"


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_shipped_recipe_round_trips(path, tmp_path):
    cfg = load_recipe(path)
    save_recipe(cfg, tmp_path / "again.yaml")
    assert load_recipe(tmp_path / "again.yaml") == cfg
    assert config_from_dict(config_to_dict(cfg)) == cfg


def test_shipped_recipes_exist():
    assert {p.stem for p in RECIPES} >= {"qwen3-8b", "tiny-cpu", "smollm2"}


def test_seed_recipe_keeps_the_seed_numbers():
    cfg = load_recipe(next(p for p in RECIPES if p.stem == "qwen3-8b"))
    assert (cfg.sft.learning_rate, cfg.sft.num_train_epochs, cfg.sft.warmup_steps) == (2e-4, 2.0, 5)
    assert (cfg.grpo.learning_rate, cfg.grpo.beta, cfg.grpo.loss_type) == (5e-6, 0.04, "dr_grpo")
    assert (cfg.grpo.temperature, cfg.grpo.num_generations, cfg.grpo.max_completion_length) == (0.9, 8, 1024)
    assert (cfg.lora.r, cfg.lora.alpha, cfg.lora.seed, len(cfg.lora.target_modules)) == (32, 64, 3407, 7)
    assert cfg.model.load_in_4bit and not cfg.model.sft_load_in_4bit
    # the seed's fixed 0.7 of an 80 GB card gave way to the budget of a 24 GB card (vLLM's share is planned from it)
    assert cfg.model.gpu_memory_utilization is None and cfg.hardware.gpu_memory_gib == 22


def test_non_default_values_survive_the_round_trip(tmp_path):
    cfg = RunConfig(name="x")
    cfg.grpo.loss_type = "cispo"
    cfg.grpo.learning_rate = 3e-7
    cfg.data.sft_source = "generator:train?levels=2-3"
    cfg.data.n_sft = None
    cfg.rewards.weights = {"check_answer": 2.5}
    cfg.lora.target_modules = ["q_proj", "v_proj"]
    save_recipe(cfg, tmp_path / "r.yaml")
    assert load_recipe(tmp_path / "r.yaml") == cfg


@pytest.mark.parametrize("loss", LOSS_TYPES)
def test_all_trl_loss_types_accepted(loss):
    assert config_from_dict({"grpo": {"loss_type": loss}}).grpo.loss_type == loss


@pytest.mark.parametrize(
    "data, path, words",
    [
        # a typo in a key names the closest valid key
        ({"grpo": {"learnig_rate": 1e-5}}, "grpo.learnig_rate", "learning_rate"),
        ({"gpro": {}}, "gpro", "grpo"),
        # a value out of its choices lists them
        ({"grpo": {"loss_type": "ppo"}}, "grpo.loss_type", "dr_grpo"),
        ({"model": {"backend": "vllm"}}, "model.backend", "unsloth"),
        # numbers: wrong type, out of range
        ({"grpo": {"num_generations": 1}}, "grpo.num_generations", "at least 2"),
        ({"grpo": {"learning_rate": "fast"}}, "grpo.learning_rate", "number"),
        ({"sft": {"max_steps": 0}}, "sft.max_steps", "-1"),
        ({"grpo": {"temperature": 0}}, "grpo.temperature", "0.9"),
        ({"sft": {"save_minutes": 0}}, "sft.save_minutes", "leave it empty"),
        ({"grpo": {"save_minutes": -1.5}}, "grpo.save_minutes", "at least 0.001"),
        # cross-field: completion must leave room for the prompt
        ({"grpo": {"max_completion_length": 4096}}, "grpo.max_completion_length", "max_seq_length"),
        # an unregistered reward names the registry
        ({"rewards": {"weights": {"check_answr": 1.0}}}, "rewards.weights", "check_answer"),
        ({"rewards": {"weights": {"check_answer": 0.0}}}, "rewards.weights", "non-zero"),
        ({"rewards": {"tags": {"solution_start": ""}}}, "rewards.tags", "empty"),
        ({"sft": {"enabled": False}, "grpo": {"enabled": False}}, "sft.enabled", "at least one stage"),
        ({"name": "a/b"}, "name", "slashes"),
        # a bad data source spec carries the data module's own explanation
        ({"data": {"grpo_source": "generator:dev"}}, "data.grpo_source", "generator:test"),
    ],
)
def test_validation_errors_name_field_value_and_fix(data, path, words):
    with pytest.raises(ConfigError) as err:
        config_from_dict(data)
    assert err.value.path == path
    assert words in str(err.value)


def test_yaml_exponent_without_dot_is_a_number(tmp_path):
    # PyYAML reads 2e-4 as a string; users write it that way.
    (tmp_path / "r.yaml").write_text("sft:\n  learning_rate: 2e-4\n")
    assert load_recipe(tmp_path / "r.yaml").sft.learning_rate == 2e-4


def test_bad_files_have_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_recipe(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_recipe(tmp_path / "bad.yaml")
    (tmp_path / "big.yaml").write_text("#" * 300_000)
    with pytest.raises(ConfigError, match="larger than"):
        load_recipe(tmp_path / "big.yaml")


def test_generation_batch_adjusted_to_num_generations():
    cfg = RunConfig()
    cfg.grpo.per_device_train_batch_size, cfg.grpo.num_generations = 1, 8
    per_device, note = cfg.grpo.generation_batch()
    assert per_device == 8 and "does not divide" in note
    cfg.grpo.per_device_train_batch_size, cfg.grpo.gradient_accumulation_steps = 3, 2
    per_device, note = cfg.grpo.generation_batch(num_processes=2)
    assert (per_device * 2 * 2) % 8 == 0 and per_device == 4
    cfg.grpo.per_device_train_batch_size, cfg.grpo.gradient_accumulation_steps = 16, 1
    assert cfg.grpo.generation_batch() == (16, "")


def test_overrides():
    cfg = apply_overrides(RunConfig(), ["grpo.max_steps=7", "grpo.learning_rate=1e-4", "name=abc"])
    assert (cfg.grpo.max_steps, cfg.grpo.learning_rate, cfg.name) == (7, 1e-4, "abc")
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides(RunConfig(), ["max_steps"])


def test_config_module_does_not_import_torch():
    import subprocess

    code = "import sys, grpo_playground.config as c; c.RunConfig().validate(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert out.stdout.strip() == "False"


def test_old_key_names_load_as_trls_with_a_warning_naming_the_new_one():
    # epochs, lr_scheduler and grad_accum were renamed to TRL's num_train_epochs, lr_scheduler_type and
    # gradient_accumulation_steps: recipes saved before (results/ holds dozens) must still load, saying so
    with pytest.warns(FutureWarning, match=r"sft\.epochs is now sft\.num_train_epochs.*did you mean num_train_epochs"):
        cfg = recipe_from_text("sft:\n  epochs: 3\n  lr_scheduler: cosine\ngrpo:\n  grad_accum: 2\n")
    assert (cfg.sft.num_train_epochs, cfg.sft.lr_scheduler_type, cfg.grpo.gradient_accumulation_steps) == (3, "cosine", 2)
    with pytest.warns(FutureWarning):
        assert apply_overrides(RunConfig(), ["sft.epochs=4"]).sft.num_train_epochs == 4
    with pytest.raises(ConfigError, match="is the old name of sft.num_train_epochs, which is set too"):
        recipe_from_text("sft:\n  epochs: 3\n  num_train_epochs: 2\n")
    with pytest.warns(FutureWarning):
        load_recipe(ROOT / "results" / "gpu" / "h200_seed_regime" / "grpo_a" / "recipe.yaml")


# The form shows the run's own keys as a "run" section; a recipe written the way the form reads must load.
RUN_SECTION_RECIPE = "run:\n  name: from-the-form\ngrpo:\n  max_steps: 3\n"


def test_a_run_section_loads_from_a_file_the_cli_and_round_trips_through_the_form(tmp_path, capsys):
    from grpo_playground.cli.train import main as train_main
    from grpo_playground.config import dump_recipe
    from grpo_playground.ui.config_form import config_from_values, form_fields, values_from_config

    recipe = tmp_path / "from-form.yaml"
    recipe.write_text(RUN_SECTION_RECIPE)
    cfg = load_recipe(recipe)
    assert (cfg.name, cfg.grpo.max_steps) == ("from-the-form", 3)
    assert [spec.key for spec in form_fields() if spec.section is None] == ["name"]  # every key the run section shows
    # --config: the recipe loads (the error that follows is about --resume, checked only after loading)
    assert train_main(["--config", str(recipe), "--resume"]) == 2
    assert "--resume needs --run-dir" in capsys.readouterr().err
    # form -> YAML (Save recipe) -> form: the same values
    specs = form_fields()
    values = values_from_config(specs, cfg)
    saved = tmp_path / "saved.yaml"
    saved.write_text(dump_recipe(config_from_values(specs, values)))
    assert values_from_config(specs, load_recipe(saved)) == values
    assert apply_overrides(cfg, ["run.name=renamed"]).name == "renamed"


@pytest.mark.parametrize("text, words", [
    ("run:\n  nmae: x\n", "run.nmae='x': unknown key (did you mean 'name'?); valid: name"),
    ("name: a\nrun:\n  name: b\n", "run.name='b': is set top-level too"),
    ("run: [x]\n", "run=['x']: must be a mapping of the run's own keys"),
    ("runn:\n  name: x\n", "unknown section (did you mean 'run'?)"),
])
def test_a_bad_run_section_says_what_to_fix(tmp_path, capsys, text, words):
    from grpo_playground.cli.train import main as train_main

    with pytest.raises(ConfigError, match=re.escape(words)):
        recipe_from_text(text)
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(text)
    assert train_main(["--config", str(recipe)]) == 2
    assert words in capsys.readouterr().err
    with pytest.raises(ConfigError, match=re.escape("run.nam='x': unknown key (did you mean 'name'?)")):
        apply_overrides(RunConfig(), ["run.nam=x"])


def test_every_unknown_key_is_named_at_once():
    # issue 39 item 9: a recipe with three typos was refused three times, one key per upload
    with pytest.raises(ConfigError) as info:
        recipe_from_text("grpo:\n  learning_rat: 1e-5\n  num_generation: 4\nsft:\n  epochs: 2\nrewardz: {}\n")
    message = str(info.value)
    assert "3 unknown keys" in message
    for key, close in (("grpo.learning_rat", "learning_rate"), ("grpo.num_generation", "num_generations"),
                       ("rewardz", "rewards")):
        assert key in message and f"did you mean '{close}'" in message
    assert "sft.epochs" not in message  # an old name of a TRL key is still read (with its warning)
