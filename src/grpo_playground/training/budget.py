"""The job's side of the memory budget (grpo_playground.memory_budget): plan on this card, say it, keep it.

With hardware.gpu_memory_gib set, the plan's settings are applied to the run's config, PyTorch is capped at the budget
(vLLM's colocated engine allocates through PyTorch, so the cap holds it too) and a recipe that cannot fit is refused
before any weight loads. Without it the plan is computed against the card's free memory and only logged: the recipe
runs as written, as it did before budgets existed.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from grpo_playground.config import RunConfig
from grpo_playground.memory_budget import BudgetError, apply, budget_bytes, gib, plan_memory
from grpo_playground.contracts.states import TRAINED_STAGES
from grpo_playground.training.backend import choose_backend, cuda_available, vllm_rollouts


def keep_budget(cfg: RunConfig, stages: list[str], log: Callable[[str], None]) -> RunConfig:
    """`cfg` as the job should run it within the budget; BudgetError (with the change that fits) when it cannot."""
    explicit = cfg.hardware.gpu_memory_gib is not None
    trained = tuple(s for s in stages if s in TRAINED_STAGES)
    if not cuda_available() or not trained:
        if explicit and trained:
            log("memory: hardware.gpu_memory_gib applies on a CUDA GPU; none here, so nothing is capped")
        return cfg
    import torch

    from grpo_playground.models.shapes import model_shape

    free, total = torch.cuda.mem_get_info()
    budget = budget_bytes(cfg) if explicit else free
    if budget > total:
        raise BudgetError(f"hardware.gpu_memory_gib {cfg.hardware.gpu_memory_gib} is more than this card's "
                          f"{gib(total)}: lower it, or leave it empty for the card's free memory")
    shape = model_shape(cfg.model.name_or_path) or _loaded_shape(cfg)
    if shape is None:
        log(f"memory: {cfg.model.name_or_path}'s shape is unknown before loading: no plan")
        return cfg
    try:
        plan = plan_memory(cfg, shape, budget, choose_backend(cfg), vllm_rollouts(cfg), trained, total)
    except BudgetError as exc:
        if explicit:
            raise
        log(f"memory: {exc} (no budget set: the recipe runs as written)")
        return cfg
    for line in plan.summary():
        log(f"memory: {line}")
    if not explicit:
        return cfg
    torch.cuda.set_per_process_memory_fraction(budget / total)
    from grpo_playground import gpu_share

    gpu_share.record(gpu_share.JOB, os.getpid(), f"the job of run {cfg.name} (budget)", budget)
    return apply(cfg, plan, total)


def _loaded_shape(cfg: RunConfig) -> dict | None:
    """A hub model's config.json from the local Hugging Face cache (downloaded when the hub is reachable)."""
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(cfg.model.name_or_path).to_dict()
    except (OSError, ValueError):
        return None
