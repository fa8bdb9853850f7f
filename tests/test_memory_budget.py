"""The memory budget (grpo_playground.memory_budget): what a run on a rented card will hold, what the plan changes to
fit, and a refusal whose suggested change really fits. Pure arithmetic over the published Qwen3 shapes: no GPU.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_memory_budget.py
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from grpo_playground.config import ConfigError, config_from_dict, config_to_dict, load_recipe
from grpo_playground.contracts.shipped import RECIPES_DIR, TINY_DIR
from grpo_playground.memory_budget import (GIB, BudgetError, apply, budget_note, plan_memory, planning_backend,
                                           stage_parts)
from grpo_playground.models.shapes import model_shape

QWEN3_RECIPES = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b")


def recipe(name: str):
    return load_recipe(RECIPES_DIR / f"{name}.yaml")


@pytest.mark.parametrize("name", QWEN3_RECIPES)
def test_each_qwen3_recipe_fits_the_budget_it_ships_with(name):
    cfg = recipe(name)
    assert cfg.hardware.gpu_memory_gib is not None, "a rented-card recipe says which card it is sized for"
    budget = int(cfg.hardware.gpu_memory_gib * GIB)
    plan = plan_memory(cfg, model_shape(cfg.model.name_or_path), budget, planning_backend(cfg), cfg.grpo.use_vllm)
    assert {s.stage for s in plan.stages} == {"sft", "grpo"}
    assert plan.peak <= budget
    # the settings the job will run are the plan's, and TRL still accepts GRPO's batch
    planned = apply(cfg, plan, card_bytes=80 * GIB)
    assert planned.grpo.generation_batch()[1] == "", "the planned micro-batch must divide by num_generations"


def test_the_seeds_8b_fits_a_24gb_card_by_loading_grpo_in_4bit_and_sharing_weights_with_vllm():
    cfg = recipe("qwen3-8b")
    plan = plan_memory(cfg, model_shape("qwen3-8b"), 22 * GIB, "unsloth", True)
    grpo = plan.stage("grpo")
    assert grpo.settings.four_bit and grpo.parts["weights"] == 0  # fast_inference: one copy, in vLLM
    assert 0 < grpo.vllm_bytes < 22 * GIB
    # the same recipe in 16-bit through TRL + PEFT (two copies of 16 GB of weights) cannot fit: refused, not tried
    trl = replace(cfg, model=replace(cfg.model, backend="trl"))
    with pytest.raises(BudgetError, match="model.backend: unsloth"):
        plan_memory(trl, model_shape("qwen3-8b"), 22 * GIB, "trl", True)


def test_the_plan_takes_the_first_saver_that_fits_and_says_what_it_changed():
    cfg = recipe("qwen3-1.7b")
    cfg = replace(cfg, model=replace(cfg.model, gradient_checkpointing=False))
    shape = model_shape("qwen3-1.7b")
    as_written = plan_memory(cfg, shape, 200 * GIB, "unsloth", True).stage("grpo")
    assert as_written.changed == () and not as_written.settings.checkpointing
    # a budget just under the recipe as written: checkpointing alone is enough, nothing leaner is chosen
    tight = plan_memory(cfg, shape, as_written.total - 1, "unsloth", True).stage("grpo")
    assert tight.settings.checkpointing and not tight.settings.four_bit
    assert tight.changed[0] == "gradient checkpointing on" and tight.total < as_written.total


def test_a_smaller_micro_batch_keeps_the_effective_batch():
    cfg = recipe("qwen3-1.7b")
    cfg = replace(cfg, grpo=replace(cfg.grpo, per_device_train_batch_size=16, num_generations=8,
                                    max_completion_length=1536),
                  model=replace(cfg.model, max_seq_length=2048, backend="trl"))
    shape = model_shape("qwen3-1.7b")
    roomy = plan_memory(cfg, shape, 500 * GIB, "trl", True).stage("grpo").settings
    plan = plan_memory(cfg, shape, 20 * GIB, "trl", True)
    s = plan.stage("grpo").settings
    assert s.micro_batch < roomy.micro_batch
    assert s.micro_batch * s.accumulation == roomy.micro_batch * roomy.accumulation
    planned = apply(cfg, plan, card_bytes=24 * GIB)
    assert planned.grpo.per_device_train_batch_size == s.micro_batch
    assert planned.grpo.gradient_accumulation_steps == s.accumulation
    assert 0 < planned.model.gpu_memory_utilization <= plan.budget / (24 * GIB)


@pytest.mark.parametrize("budget_gib", [4, 9, 12])
def test_a_refusal_names_a_change_that_really_fits(budget_gib):
    cfg = recipe("qwen3-8b")
    shape = model_shape("qwen3-8b")
    with pytest.raises(BudgetError) as refused:
        plan_memory(cfg, shape, budget_gib * GIB, "unsloth", True)
    message = str(refused.value)
    raised = re.search(r"raise hardware.gpu_memory_gib to (\d+)", message)
    assert raised, message
    plan_memory(cfg, shape, int(raised.group(1)) * GIB, "unsloth", True)  # the suggested budget fits
    shorter = re.search(r"lower (sft|grpo)\.(max_length|max_completion_length) to (\d+)", message)
    if shorter:
        stage, key, value = shorter.groups()
        trial = replace(cfg, **{stage: replace(getattr(cfg, stage), **{key: int(value)})})
        plan_memory(trial, shape, budget_gib * GIB, "unsloth", True, stages=(stage,))


def test_a_fixed_vllm_share_counts_as_that_share_of_the_card():
    cfg = recipe("qwen3-8b")
    seed = replace(cfg, model=replace(cfg.model, gpu_memory_utilization=0.7))  # the seed's 80 GB setting
    s = plan_memory(seed, model_shape("qwen3-8b"), 22 * GIB, stages=("sft",)).stage("sft").settings
    parts, engine = stage_parts(seed, model_shape("qwen3-8b"), "grpo", replace(s, four_bit=True), "unsloth", True,
                                card=80 * GIB)
    assert engine == int(0.7 * 80 * GIB)
    # 0.7 of an 80 GB card is far over a 22 GiB budget on it: refused, and the suggested change fits
    with pytest.raises(BudgetError, match="leave model.gpu_memory_utilization empty"):
        plan_memory(seed, model_shape("qwen3-8b"), 22 * GIB, card=80 * GIB)
    plan_memory(cfg, model_shape("qwen3-8b"), 22 * GIB, card=80 * GIB)


def test_the_budget_is_a_recipe_field_with_a_checked_range():
    cfg = recipe("qwen3-8b")
    assert config_from_dict(config_to_dict(cfg)).hardware.gpu_memory_gib == cfg.hardware.gpu_memory_gib
    data = config_to_dict(cfg)
    data["hardware"]["gpu_memory_gib"] = 0.5
    with pytest.raises(ConfigError, match="gpu_memory_gib"):
        config_from_dict(data).validate()


def test_the_training_form_says_what_the_plan_chose_or_why_it_cannot_fit():
    cfg = recipe("qwen3-8b")
    note = budget_note(cfg)
    assert "grpo:" in note and "4-bit base weights" in note and "22.0 GiB" in note
    tight = replace(cfg, hardware=replace(cfg.hardware, gpu_memory_gib=8.0))
    assert "Does not fit hardware.gpu_memory_gib" in budget_note(tight)
    assert budget_note(replace(cfg, hardware=replace(cfg.hardware, gpu_memory_gib=None))) == ""


def test_shapes_come_from_a_local_folder_first_then_the_published_table(tmp_path):
    assert model_shape("qwen3-8b")["hidden_size"] == 4096
    assert model_shape("Qwen/Qwen3-4B")["num_hidden_layers"] == 36
    assert model_shape("tiny") == json.loads((TINY_DIR / "config.json").read_text())  # the embedded model's own
    assert model_shape(str(tmp_path)) is None


MEASURED = Path(__file__).resolve().parents[1] / "results" / "gpu" / "h100_budget35" / "grpo_speed"  # issue 35's H100 lease


def measured_rows():
    """(recipe, log, result) of each finished row of the lease's `budget` suite."""
    rows = []
    for result_file in sorted((MEASURED / "results").glob("*.json")):
        result = json.loads(result_file.read_text())
        if result["state"] == "finished":
            rows.append((MEASURED / "recipes" / f"{result_file.stem}.yaml",
                         (MEASURED / "runs" / result_file.stem / "log.txt").read_text(), result))
    return rows


@pytest.mark.parametrize("row", measured_rows(), ids=lambda row: row[0].stem)
def test_the_plan_bounds_the_peak_nvidia_smi_measured_on_the_gpu(row):
    """The settings each GPU row ran (its log's `memory:` line), estimated by today's plan: at or above the peak
    nvidia-smi recorded, and not so far above that a card's room is wasted. Fails with a 1 GiB CUDA-context term."""
    from grpo_playground.memory_budget import ladder

    recipe_file, log, result = row
    cfg = load_recipe(recipe_file)
    shape = model_shape("Qwen/Qwen3-1.7B" if "1.7b" in recipe_file.stem else "Qwen/Qwen3-8B")
    backend = "unsloth" if "unsloth" in recipe_file.stem or cfg.model.backend == "unsloth" else "trl"
    ran = [s for s, _ in ladder(cfg, "grpo", backend, True) if s.describe(True) in log]
    assert len(ran) == 1, "the log names the settings the row ran with"
    estimate = sum(stage_parts(cfg, shape, "grpo", ran[0], backend, True, card=int(79.18 * GIB))[0].values()) / GIB
    assert result["smi_peak_gib"] <= estimate <= result["smi_peak_gib"] + 2.5, (estimate, result["smi_peak_gib"])


def test_smaller_micro_batches_come_before_4bit_weights():
    """4-bit weights make vLLM's rollouts 3.7x slower (the lease's 1.7B rows), so a 16-bit plan that fits by
    halving the micro-batch is taken first; the seed's 8B, which no 16-bit micro-batch fits, still goes 4-bit."""
    cfg = load_recipe(MEASURED / "recipes" / "qwen3-1.7b-shape_unsloth-vllm_L512_p8_g1_b22.yaml")
    plan = plan_memory(cfg, model_shape("Qwen/Qwen3-1.7B"), 22 * GIB, "unsloth", True, stages=("grpo",))
    grpo = plan.stage("grpo")
    assert not grpo.settings.four_bit and grpo.settings.micro_batch < 32, grpo.settings
    eight = recipe("qwen3-8b")
    assert plan_memory(eight, model_shape(eight.model.name_or_path), 22 * GIB, "unsloth", True,
                       stages=("grpo",)).stage("grpo").settings.four_bit


def test_the_seeds_8b_with_fp8_weights_is_planned_in_fp8_and_never_goes_4bit():
    """load_in_fp8 (Unsloth, H100+): one FP8 copy of the weights for training and vLLM, half of 16-bit's bytes; the plan
    fits it by halving the micro-batch, never by adding 4-bit (the two are exclusive)."""
    eight = recipe("qwen3-8b")
    fp8 = replace(eight, model=replace(eight.model, load_in_4bit=False, load_in_fp8=True))
    shape = model_shape(eight.model.name_or_path)
    plan = plan_memory(fp8, shape, 22 * GIB, "unsloth", True, stages=("grpo",))
    grpo = plan.stage("grpo")
    assert grpo.settings.fp8 and not grpo.settings.four_bit, grpo.settings
    assert "FP8 base weights" in plan.summary()[1]
    assert not apply(fp8, plan).model.load_in_4bit
    sixteen = replace(fp8, model=replace(fp8.model, load_in_fp8=False))
    four = plan_memory(eight, shape, 200 * GIB, "unsloth", True, stages=("grpo",)).stage("grpo")
    fp8_roomy = plan_memory(fp8, shape, 200 * GIB, "unsloth", True, stages=("grpo",)).stage("grpo")
    bf16_roomy = plan_memory(sixteen, shape, 200 * GIB, "unsloth", True, stages=("grpo",)).stage("grpo")
    # vLLM holds the one copy (fast_inference): FP8 between 4-bit and 16-bit, about half of 16-bit's linear weights
    assert four.vllm_bytes < fp8_roomy.vllm_bytes < bf16_roomy.vllm_bytes
    # too small a budget for FP8 at one row: refused, not silently loaded in 4-bit
    with pytest.raises(BudgetError):
        plan_memory(fp8, shape, 12 * GIB, "unsloth", True, stages=("grpo",))


@pytest.mark.parametrize("change, field", [({"load_in_4bit": True}, "load_in_4bit"), ({"backend": "trl"}, "backend")])
def test_fp8_loading_is_refused_beside_4bit_or_on_trl_with_the_fix(change, field):
    cfg = recipe("qwen3-8b")
    bad = replace(cfg, model=replace(cfg.model, load_in_fp8=True, **{"load_in_4bit": False, **change}))
    with pytest.raises(ConfigError, match=r"model\.load_in_fp8") as error:
        bad.validate()
    assert field in str(error.value)
