"""Loading the policy for a stage: Unsloth on CUDA when installed, else TRL + PEFT (CPU included).

Both paths end in the same thing: a PEFT model with LoRA on the configured projections, and its tokenizer
with the format tags registered as ordinary added tokens. GRPO continues from the SFT adapter when there is
one. The reference policy is never a second copy of the weights: TRL 1.14.2, given a PEFT model and beta > 0,
computes reference log-probs with a frozen copy of the starting adapter (the SFT policy) or, for a fresh
adapter, with the adapter disabled (the base model).
"""

from __future__ import annotations

import importlib.util
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_playground.config import RunConfig
from grpo_playground.data import tag_tokens
from grpo_playground.gpu_share import engine_start


@dataclass
class Policy:
    model: Any  # a peft.PeftModel
    tokenizer: Any
    backend: str  # "unsloth" | "trl"
    device: str
    notes: list[str]
    start_adapter: Path | None = None  # the adapter training continues from (None: a fresh LoRA)
    rollouts: str = "generate"  # how GRPO samples: "vllm" or "generate" (HF / Unsloth generate)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def choose_backend(cfg: RunConfig) -> str:
    unsloth_installed = importlib.util.find_spec("unsloth") is not None
    if cfg.model.backend == "unsloth":
        if not cuda_available():
            raise RuntimeError("model.backend=unsloth needs a CUDA GPU (none found): set model.backend to trl or auto")
        if not unsloth_installed:
            raise RuntimeError("model.backend=unsloth but unsloth is not installed: pip install -r requirements-gpu.txt, "
                               "or set model.backend to trl")
        return "unsloth"
    if cfg.model.backend == "auto" and unsloth_installed and cuda_available():
        return "unsloth"
    return "trl"


def vllm_rollouts(cfg: RunConfig) -> bool:
    """Whether GRPO samples with vLLM: a GPU, vllm installed and grpo.use_vllm (on Unsloth also model.fast_inference).

    Decided once for the whole run, because it also decides the tags: vLLM's copy of the base model has no
    embedding rows for added tokens, so a run with vLLM rollouts keeps the format tags as ordinary text (SFT
    still teaches them; the pre-flight shows how they tokenize). It does not look at grpo.enabled: an SFT-only run
    (the comparison's sft-W, `--stage sft` first) must keep the tags its later GRPO stage can sample with.
    """
    if not cfg.grpo.use_vllm or importlib.util.find_spec("vllm") is None or not cuda_available():
        return False
    return choose_backend(cfg) == "trl" or cfg.model.fast_inference


def adapter_registered_tags(adapter: Path | None) -> bool:
    """Whether an adapter was trained with the tags registered (PEFT's trainable_token_indices: a grown vocabulary)."""
    import json

    config = adapter / "adapter_config.json" if adapter else None
    if config is None or not config.is_file():
        return False
    return bool(json.loads(config.read_text()).get("trainable_token_indices"))


def vllm_memory_share(cfg: RunConfig, model_config: dict, weights_loaded: bool = True) -> float:
    """model.gpu_memory_utilization when the recipe sets it, else sized from the model and the GRPO batch; then
    the job's whole need is checked against what is free (gpu_share.GpuBusy names the chat servers to stop) and
    recorded, so a chat server started later leaves it room."""
    from grpo_playground.gpu_share import claim_for_training
    from grpo_playground.memory_budget import budget_bytes
    from grpo_playground.vllm_memory import memory_share, shape_from_config

    rows, _ = cfg.grpo.generation_batch()
    shape = shape_from_config(model_config)
    return claim_for_training(cfg.model.gpu_memory_utilization, lambda total: memory_share(
        shape, rows, cfg.model.max_seq_length, total, cfg.model.load_in_4bit, cfg.model.load_in_fp8),
        shape, model_config["vocab_size"], rows, cfg.model.max_seq_length, weights_loaded,
        f"the GRPO job of run {cfg.name}", budget_bytes(cfg))


VLLM_TAGS_NOTE = ("format tags kept as ordinary text (data.register_tags ignored): vLLM rollouts sample from a copy "
                  "of the base model, which has no embedding rows for added tokens")


def resolve_optim(name: str) -> tuple[str, str]:
    """The optimizer to use, and a note when the recipe's 8-bit optimizer cannot run here."""
    if "8bit" in name and (importlib.util.find_spec("bitsandbytes") is None or not cuda_available()):
        return "adamw_torch", f"optim {name} needs bitsandbytes on a GPU: using adamw_torch"
    return name, ""


def torch_dtype(cfg: RunConfig):
    import torch

    if cfg.model.dtype != "auto":
        return getattr(torch, cfg.model.dtype)
    if cuda_available():
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def lora_config(cfg: RunConfig, **extra):
    """LoRA on the configured projections; `extra` carries the tag registration's trainable_token_indices."""
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=list(cfg.lora.target_modules), task_type="CAUSAL_LM", bias="none", **extra)


def register_tags(model, tokenizer, cfg: RunConfig) -> tuple[dict, str]:
    """The data module's tag registration (ordinary added tokens); returns LoRA kwargs and a note for the log."""
    if not cfg.data.register_tags:
        return {}, ""
    if vllm_rollouts(cfg):
        return {}, VLLM_TAGS_NOTE
    registered = tag_tokens.register_tags(model, tokenizer, cfg.rewards.tags)
    if not registered.new_ids:
        return {}, "format tags are already single tokens"
    return registered.peft_kwargs(), f"registered the format tags as added tokens {registered.new_ids} (rows trained)"


def _check_target_modules(model, cfg: RunConfig) -> None:
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    absent = [m for m in cfg.lora.target_modules if m not in names]
    if absent:
        raise ValueError(f"lora.target_modules {absent} do not exist in {cfg.model.name_or_path}; "
                         f"its linear layers include {sorted(n for n in names if n.endswith('proj'))[:12]}")


def load_policy(cfg: RunConfig, stage: str, start_adapter: Path | None = None) -> Policy:
    """The trainable PEFT policy for `stage` ("sft" or "grpo"), starting from `start_adapter` when given.

    model.name_or_path may itself be an adapter folder (e.g. another run's sft/): training then continues
    that adapter on its base model, which is how an experiment branches GRPO and more SFT from one SFT.
    """
    from grpo_playground.models import resolve_model

    base = resolve_model(cfg.model.name_or_path)
    if base.source == "adapter":
        start_adapter = start_adapter or Path(base.location)
        base = base.base
    if stage == "grpo" and vllm_rollouts(cfg):  # before Unsloth's fast_inference starts its engine in the load
        from grpo_playground.serving.backends import compile_cache_env

        for key, value in compile_cache_env().items():  # shared with the chat servers and evaluations
            os.environ.setdefault(key, value)
    if choose_backend(cfg) == "unsloth":
        policy = _load_unsloth(cfg, stage, base, start_adapter)
    else:
        policy = _load_trl(cfg, base, start_adapter)
    if start_adapter is not None:
        _check_continues(policy.model, start_adapter)
    if stage == "grpo" and vllm_rollouts(cfg) and not adapter_registered_tags(start_adapter):
        policy.rollouts = "vllm"
    elif stage == "grpo" and vllm_rollouts(cfg):
        policy.notes.append(f"vLLM rollouts off: the adapter in {start_adapter} registered the format tags (a grown "
                            "vocabulary vLLM cannot load); retrain SFT on this GPU to get vLLM rollouts")
    return policy


def _check_continues(model, adapter: Path) -> None:
    """The policy a stage starts from is the adapter it continues, tensor for tensor (a GRPO stage from SFT, an
    experiment's arm from sft-W): a load that missed some of it would train on from another policy, unannounced."""
    from grpo_playground.training.resume import adapter_differences

    problems = adapter_differences(model, adapter)
    if problems:
        raise ValueError(f"the policy loaded from {adapter} is not that adapter ({len(problems)} tensors: "
                         f"{'; '.join(problems[:3])}): retrain it with this model and backend, or pick another")


def adapter_lora(adapter: Path) -> dict:
    """The LoRA an adapter folder was trained with. Continuing it in a LoRA built from the recipe's lora section
    instead would load its tensors into other shapes, or scale them by another alpha: another policy."""
    from peft import LoraConfig

    found = LoraConfig.from_pretrained(str(adapter))
    lora = dict(r=found.r, lora_alpha=found.lora_alpha, lora_dropout=found.lora_dropout,
                target_modules=sorted(found.target_modules))
    return lora | ({"trainable_token_indices": found.trainable_token_indices} if found.trainable_token_indices else {})


def _load_trl(cfg: RunConfig, base, start_adapter: Path | None) -> Policy:
    from peft import PeftModel, get_peft_model
    from transformers import set_seed

    from grpo_playground.models import load_model_and_tokenizer

    device = "cuda" if cuda_available() else "cpu"
    model, tokenizer = load_model_and_tokenizer(base, dtype=torch_dtype(cfg), device=device)
    _check_target_modules(model, cfg)
    notes = []
    if start_adapter is not None:
        # The adapter folder's tokenizer holds any tags the previous stage registered.
        if (start_adapter / "tokenizer_config.json").is_file():
            tokenizer = _tokenizer_from(start_adapter)
        tag_tokens.fit_embeddings(model, tokenizer)
        model = PeftModel.from_pretrained(model, str(start_adapter), is_trainable=True)
        notes.append(f"continuing from the adapter in {start_adapter}")
    else:
        extra, note = register_tags(model, tokenizer, cfg)
        notes += [note] if note else []
        set_seed(cfg.lora.seed)  # the LoRA's random init is lora.seed's (Unsloth's random_state), not the process's
        model = get_peft_model(model, lora_config(cfg, **extra))
    return Policy(model, tokenizer, "trl", device, notes, start_adapter)


def _tokenizer_from(folder: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_unsloth(cfg: RunConfig, stage: str, base, start_adapter: Path | None) -> Policy:
    """Unsloth's FastLanguageModel (CUDA only; proven on the GPU machine, not runnable here)."""
    from unsloth import FastLanguageModel  # imported first by the job on this path, so its patches apply

    from grpo_playground.training.unsloth_fp8 import (hand_lora_to_vllm_without_inference_mode,
                                                      unsloth_counts_fp8_weights)

    from grpo_playground.models import hf_dir
    from grpo_playground.vllm_memory import read_config

    use_vllm = stage == "grpo" and vllm_rollouts(cfg) and not adapter_registered_tags(start_adapter)
    lora = adapter_lora(start_adapter) if start_adapter is not None else dict(
        r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
        target_modules=list(cfg.lora.target_modules))
    share = vllm_memory_share(cfg, read_config(hf_dir(base)), weights_loaded=False) if use_vllm else 0.5
    fp8 = stage == "grpo" and cfg.model.load_in_fp8  # the GRPO stage's weights only, as load_in_4bit
    # its fast_inference engine starts in the load: alone on the GPU meanwhile (gpu_share.engine_start)
    with (engine_start(f"the GRPO job of run {cfg.name}", print) if use_vllm else nullcontext(),
          unsloth_counts_fp8_weights() if fp8 and use_vllm else nullcontext()):
        model, tokenizer = FastLanguageModel.from_pretrained(
            model_name=str(hf_dir(base)),
            max_seq_length=cfg.model.max_seq_length,
            load_in_4bit=cfg.model.load_in_4bit if stage == "grpo" else cfg.model.sft_load_in_4bit,
            load_in_fp8=fp8,
            dtype=None if cfg.model.dtype == "auto" else torch_dtype(cfg),
            fast_inference=use_vllm,
            max_lora_rank=lora["r"],
            gpu_memory_utilization=share,
        )
    notes = [f"unsloth with vLLM rollouts (fast_inference, gpu_memory_utilization {share})" if use_vllm
             else "unsloth without vLLM"] + (["FP8 base weights (load_in_fp8)"] if fp8 else [])
    engine_len = model.vllm_engine.model_config.max_model_len if use_vllm else cfg.model.max_seq_length
    if engine_len < cfg.model.max_seq_length:
        notes.append(f"warning: vLLM's context is {engine_len} tokens, under model.max_seq_length "
                     f"{cfg.model.max_seq_length} (Unsloth fits it to the KV cache that gpu_memory_utilization "
                     "leaves): rollouts longer are cut; raise hardware.gpu_memory_gib or lower max_completion_length")
    if start_adapter is not None and (start_adapter / "tokenizer_config.json").is_file():
        tokenizer = _tokenizer_from(start_adapter)
        tag_tokens.fit_embeddings(model, tokenizer)
    elif start_adapter is None:
        extra, note = register_tags(model, tokenizer, cfg)
        notes += [note] if note else []
        lora |= extra
    model = FastLanguageModel.get_peft_model(
        model, **lora, bias="none", use_gradient_checkpointing="unsloth" if cfg.model.gradient_checkpointing else False,
        random_state=cfg.lora.seed,
    )
    if fp8 and use_vllm:
        hand_lora_to_vllm_without_inference_mode(model)
    if start_adapter is not None:
        # The GRPO stage reloads the base (4-bit, vLLM) and puts the SFT adapter's weights into the fresh LoRA.
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        loaded = set_peft_model_state_dict(model, load_file(str(start_adapter / "adapter_model.safetensors")))
        if loaded.unexpected_keys:
            raise ValueError(f"the adapter in {start_adapter} does not fit this model (trained on another?): "
                             f"unexpected keys such as {loaded.unexpected_keys[:3]}")
        notes.append(f"continuing from the adapter in {start_adapter}")
    return Policy(model, tokenizer, "unsloth", "cuda", notes, start_adapter)
