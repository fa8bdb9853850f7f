"""Recipes speak TRL: `sft:` / `grpo:` take SFTConfig / GRPOConfig fields by TRL's names, passed through to the configs
the job builds; old keys still load with a warning; a TRL option the product never names works from a recipe, `--set`
and the Training form with no code change.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_trl_options.py
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpo_playground.config import (ConfigError, RunConfig, apply_overrides, config_to_dict, load_recipe,
                                    recipe_from_text)
from grpo_playground.config.trl_fields import Expression, coerce_trl, trl_fields
from grpo_playground.contracts.shipped import RECIPES_DIR, shipped_recipes

ROOT = Path(__file__).resolve().parents[1]
# What today's code built for each shipped recipe before the sections spoke TRL (tests/fixtures/, written once from
# main at eb7e400 by building both configs the way the job does, on CPU, less the two folder paths; quick's GRPO
# lr, beta, temperature and max_steps changed since with the recipe: results/quick_grpo_rise.md).
BEFORE = json.loads((ROOT / "tests" / "fixtures" / "trl_args_by_recipe.json").read_text())
# Real GRPOConfig fields (TRL 1.14.2) that the product's code and docs never name: no code change made them work.
UNNAMED = {"importance_sampling_level": ("sequence", "sequence"), "off_policy_mask_threshold": ("0.25", 0.25),
           "epsilon_high": (0.28, 0.28)}


def _policy():
    """What the stages read of a loaded policy to build TRL's configs: a CPU model whose output head is a Linear."""
    import torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm_head = torch.nn.Linear(2, 3)

        def get_output_embeddings(self):
            return self.lm_head

    return SimpleNamespace(device="cpu", model=Model(), rollouts="generate", backend="trl")


def _configs(cfg: RunConfig, tmp_path: Path):
    from grpo_playground.training.run_folder import RunFolder
    from grpo_playground.training.stages import grpo_config, sft_config

    folder, policy = RunFolder(tmp_path / cfg.name), _policy()
    return sft_config(cfg, folder, policy), grpo_config(cfg, folder, policy, [1.0] * len(cfg.rewards.weights))


def _as_before(args) -> dict:
    # the fixture's form: TrainingArguments.to_dict, enums as values, anything else not JSON as its str
    return json.loads(json.dumps({k: v for k, v in args.to_dict().items() if k not in ("output_dir", "logging_dir")},
                                 sort_keys=True, default=str))


@pytest.mark.parametrize("recipe", shipped_recipes())
def test_every_shipped_recipe_builds_the_same_trl_configs_as_before(recipe, tmp_path):
    sft, grpo = _configs(load_recipe(RECIPES_DIR / f"{recipe}.yaml"), tmp_path)
    for stage, args in (("sft", sft), ("grpo", grpo)):
        now, before = _as_before(args), BEFORE[recipe][stage]
        changed = {k: (before.get(k), now.get(k)) for k in before.keys() | now.keys() if before.get(k) != now.get(k)}
        assert not changed, f"{recipe} {stage}: TRL arguments changed (before, now): {changed}"


def test_the_fields_read_from_trls_sources_are_the_dataclasses_fields():
    # The UI process may not import TRL, so config/trl_fields.py reads the sources; here the classes themselves judge.
    from trl import GRPOConfig, SFTConfig

    for stage, cls in (("sft", SFTConfig), ("grpo", GRPOConfig)):
        real = [f for f in dataclasses.fields(cls) if f.init]
        read = trl_fields(stage)
        assert list(read) == [f.name for f in real]
        for f in real:
            if read[f.name].help:  # empty where TRL builds the text with code (log_level's lists the levels)
                assert read[f.name].help == f.metadata["help"], f.name
            if not isinstance(read[f.name].default, Expression):  # a variable's value (optim's) is shown as written
                assert read[f.name].default == f.default, f.name
    assert trl_fields("grpo")["num_generations"].types == ("int", "None")
    assert trl_fields("grpo")["learning_rate"].default == 1e-6  # GRPOConfig's own, not TrainingArguments' 5e-5


def test_the_product_names_only_its_own_meaning_beside_trls_fields():
    # A stage field that is not TRL's must be the product's own idea; a TRL rename would show up here, not silently
    # stop reaching the trainer.
    from grpo_playground.config import GRPOStage, SFTStage

    own = {stage: {f.name for f in dataclasses.fields(cls)} - set(trl_fields(stage))
           for stage, cls in (("sft", SFTStage), ("grpo", GRPOStage))}
    assert own == {"sft": {"enabled", "max_minutes", "save_minutes", "trl_options"},
                   "grpo": {"enabled", "max_minutes", "save_minutes", "trl_options", "preflight_prompts",
                            "on_preflight_error", "logprobs", "weight_sync"}}


def test_a_trl_option_the_product_never_names_reaches_grpo_config_from_a_recipe_and_the_cli(tmp_path):
    for name in UNNAMED:  # the premise: nothing in the product's code or docs knows these fields
        assert name in trl_fields("grpo")
        hits = [p for p in [*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").glob("*.md")] if name in p.read_text()]
        assert not hits, f"{name} is named in {hits}: pick a field the product does not mention"
    text = (RECIPES_DIR / "quick.yaml").read_text().replace(
        "grpo:\n", "grpo:\n" + "".join(f"  {k}: {raw}\n" for k, (raw, _) in UNNAMED.items()))
    from_recipe = recipe_from_text(text)
    from_cli = apply_overrides(load_recipe(RECIPES_DIR / "quick.yaml"),
                               [f"grpo.{k}={raw}" for k, (raw, _) in UNNAMED.items()])
    assert from_recipe == from_cli
    _, grpo = _configs(from_cli, tmp_path)
    assert {k: getattr(grpo, k) for k in UNNAMED} == {k: value for k, (_, value) in UNNAMED.items()}
    # the recipe keeps them where they were written: in the section, by TRL's names, and they load back the same
    assert config_to_dict(from_cli)["grpo"]["importance_sampling_level"] == "sequence"
    assert recipe_from_text(json.dumps(config_to_dict(from_cli))) == from_cli


def test_an_sft_option_the_product_never_names_reaches_sft_config(tmp_path):
    cfg = apply_overrides(RunConfig(), ["sft.neftune_noise_alpha=5", "sft.packing=true"])
    sft, _ = _configs(cfg, tmp_path)
    assert (sft.neftune_noise_alpha, sft.packing) == (5.0, True)


@pytest.mark.parametrize("item, message", [
    ("grpo.top_kk=5", r"grpo\.top_kk=5: unknown key \(did you mean 'top_k'\?\).*or any field of TRL's GRPOConfig"),
    ("grpo.importance_sampling_levle=token", r"did you mean 'importance_sampling_level'"),
    ("grpo.top_k=many", r"grpo\.top_k='many': give a whole number \(TRL's int\)"),
    ("grpo.top_k=true", r"give a whole number"),
    ("sft.packing=maybe", r"sft\.packing='maybe': give true or false"),
    ("grpo.off_policy_mask_threshold=.nan", r"finite number"),
    ("grpo.seed=1", r"grpo\.seed=1: the product sets this TRL field: set lora\.seed"),
    ("sft.output_dir=/tmp/x", r"the product sets this TRL field: the run folder decides it"),
    ("grpo.trl_options={top_k: 5}", r"unknown key"),  # the holder is no key: its fields sit in the section
    ("sft.num_generations=4", r"sft\.num_generations=4: unknown key"),  # a GRPO field is not SFT's
])
def test_a_bad_trl_key_or_value_is_refused_with_the_field_and_a_fix(item, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(RunConfig(), [item])


def test_coercion_follows_trls_annotations():
    fields = trl_fields("grpo")
    assert coerce_trl("x", "2e-4", fields["learning_rate"]) == 2e-4  # PyYAML's text for 2e-4
    assert coerce_trl("x", None, fields["max_completion_length"]) is None  # int | None
    assert coerce_trl("x", "steps", fields["save_strategy"]) == "steps"  # an enum class takes its value
    assert coerce_trl("x", {"a": 1}, fields["generation_kwargs"]) == {"a": 1}
    with pytest.raises(ConfigError, match="give a number"):
        coerce_trl("x", [1], fields["beta"])


def test_old_per_device_batch_size_loads_as_trls_name_with_one_warning_per_key():
    new = (RECIPES_DIR / "quick.yaml").read_text()
    old = new.replace("per_device_train_batch_size", "per_device_batch_size")
    assert old != new
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own filter: each warning once per place
        for _ in range(3):
            cfg = recipe_from_text(old)
    messages = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert sorted(messages) == sorted(f"{s}.per_device_batch_size is now {s}.per_device_train_batch_size (TRL's "
                                      f"name): the old key is read for this release; did you mean "
                                      f"per_device_train_batch_size? Rename it in the recipe" for s in ("sft", "grpo"))
    assert cfg == recipe_from_text(new)


def test_the_form_lists_the_other_trl_options_and_its_yaml_box_goes_into_the_recipe(tmp_path):
    from grpo_playground.ui.config_form import config_from_values, form_fields, form_problems, trl_options_table, \
        values_from_config
    from grpo_playground.ui.training_form import overrides_between

    specs = form_fields()
    box = [(s.section, s.name) for s in specs].index(("grpo", "trl_options"))
    # the list: every GRPOConfig field the form does not show and the product does not set, with TRL's help and type
    rows = {row[0]: row for row in trl_options_table("grpo")}
    assert set(UNNAMED) <= set(rows) and "learning_rate" not in rows and "seed" not in rows
    assert rows["importance_sampling_level"][1] == "str" and "sequence" in rows["importance_sampling_level"][3]
    assert len(rows) > 100  # the rest of GRPOConfig and TrainingArguments
    base = load_recipe(RECIPES_DIR / "quick.yaml")
    values = values_from_config(specs, base)
    assert values[box] == ""  # quick.yaml sets none: the box starts empty
    values[box] = "importance_sampling_level: sequence\noff_policy_mask_threshold: 0.25\n"
    edited = config_from_values(specs, values)
    assert edited.grpo.trl_options == {"importance_sampling_level": "sequence", "off_policy_mask_threshold": 0.25}
    # the box shows what a loaded recipe sets, and the equivalent CLI carries the options as --set
    assert values_from_config(specs, edited)[box] == values[box]
    assert sorted(overrides_between(base, edited)) == ["grpo.importance_sampling_level=sequence",
                                                       "grpo.off_policy_mask_threshold=0.25"]
    _, grpo = _configs(edited, tmp_path)
    assert (grpo.importance_sampling_level, grpo.off_policy_mask_threshold) == ("sequence", 0.25)
    # a typo or a field shown above is named, not silently dropped
    values[box] = "importance_sampling_levle: sequence\n"
    assert any("did you mean 'importance_sampling_level'" in p for p in form_problems(specs, values))
    values[box] = "learning_rate: 1e-5\n"
    with pytest.raises(ConfigError, match=r"grpo\.learning_rate.*a field of the form above"):
        config_from_values(specs, values)
    values[box] = "- not a mapping\n"
    with pytest.raises(ConfigError, match="one `key: value` a line"):
        config_from_values(specs, values)


def test_scale_out_says_which_trl_options_it_does_not_carry_to_verl_or_openrlhf():
    from grpo_playground.export.scale_out import _loss_notes

    cfg = apply_overrides(RunConfig(), ["grpo.epsilon_high=0.28"])
    assert any("epsilon_high" in note and "not written" in note for note in _loss_notes(cfg))
    assert not any("other TRL options" in note for note in _loss_notes(RunConfig()))
