"""The product's GRPOTrainer on TRL + PEFT (TRL 1.14.2): no forward twice, log-probs in chunks, a lighter vLLM sync.

What TRL 1.14.2 does and what changes here (the Unsloth backend keeps Unsloth's own trainer):
- Reference log-probs: TRL already skips their forward when beta is 0 (`if self.beta != 0.0`); nothing to do.
- Old-policy log-probs: TRL skips their forward when the step is on-policy (num_iterations 1, generation aligned
  with the optimizer step), EXCEPT with vLLM, where it always runs it for the importance-sampling correction
  (trainer log-probs against vLLM's sampling log-probs). On-policy those old log-probs are the training forward's
  own log-probs, detached: here the correction is computed from them inside the loss, and the extra no-grad
  forward over the whole batch is gone.
- Log-probs from hidden states: TRL's full path materializes rows x length x vocabulary logits (float32 in its
  log-softmax). TRL 1.14.2 carries a chunked path (`_chunked_logps`: the backbone, then the LM head in chunks of
  8,192 vocabulary rows and 2,048 tokens, with its own backward) but enables it only through `use_liger_kernel`,
  which also makes transformers patch the model with Liger's Triton kernels (no CPU, another dependency). Here
  it is called directly (`grpo.logprobs: chunked`), whenever the output head is a plain Linear.
- vLLM weight sync: `grpo.weight_sync: deltas` replaces TRL's merge / load every weight / unmerge with
  grpo_playground.training.vllm_sync (only the LoRA layers' W + B@A x scale, written into vLLM's tensors);
  `lora` serves the adapter from a vLLM LoRA slot instead (the engine built with enable_lora).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil

import torch
from trl import GRPOTrainer
from trl.models.utils import _ForwardRedirection
from trl.trainer.utils import nanmax, nanmin


def plain_output_head(model) -> bool:
    """Whether the output head is a plain Linear (not PEFT-wrapped): chunked log-probs read its weight directly."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return type(base.get_output_embeddings()) is torch.nn.Linear


class PlaygroundGRPOTrainer(GRPOTrainer):
    def __init__(self, *args, logprobs: str = "chunked", weight_sync: str = "merge", **kwargs):
        from grpo_playground.training import vllm_sync

        lora_slot = weight_sync == "lora" and kwargs["args"].use_vllm  # TRL builds its engine in __init__
        with (vllm_sync.lora_engine(kwargs["model"].peft_config[vllm_sync.ADAPTER].r) if lora_slot
              else contextlib.nullcontext()):
            super().__init__(*args, **kwargs)
        self.chunked_logprobs = logprobs == "chunked" and plain_output_head(self.model)
        if self.chunked_logprobs and not hasattr(self, "_forward_redirection"):
            self._forward_redirection = _ForwardRedirection()  # TRL sets it only with use_liger_kernel (DDP needs it)
        self._pending_is_inputs = None  # the loss inputs whose importance-sampling ratio waits for the training forward
        if getattr(self, "vllm_generation", None) is not None and weight_sync == "deltas":
            self.vllm_generation.sync_weights = vllm_sync.DeltaSync(self.vllm_generation)
        elif getattr(self, "vllm_generation", None) is not None and weight_sync == "lora":
            folder = vllm_sync.shared_memory_folder(f"grpo_playground_adapter_{os.getpid()}")
            atexit.register(shutil.rmtree, folder, True)
            self.vllm_generation.sync_weights = vllm_sync.AdapterSync(self.vllm_generation, folder)

    # ------------------------------------------------------------------ old-policy log-probs
    def old_logps_redundant(self) -> bool:
        """On-policy with vLLM's importance-sampling correction: TRL's old-policy forward would equal the training
        forward (TRL's own condition for skipping it, plus the vLLM case it always runs)."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        return (self.use_vllm and self.vllm_importance_sampling_correction
                and self.args.gradient_accumulation_steps % generate_every == 0)

    def _generate_and_score_completions(self, inputs):
        if not self.old_logps_redundant():
            return super()._generate_and_score_completions(inputs)
        self.vllm_importance_sampling_correction = False  # TRL then runs neither the old forward nor the ratio
        try:
            return super()._generate_and_score_completions(inputs)  # _compute_loss adds the ratio
        finally:
            self.vllm_importance_sampling_correction = True

    def _compute_loss(self, model, inputs):
        if (self.old_logps_redundant() and "importance_sampling_ratio" not in inputs
                and "sampling_per_token_logps" in inputs):
            self._pending_is_inputs = inputs  # the first log-prob call below is the training forward
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._pending_is_inputs = None

    def _fill_is_ratio(self, inputs: dict, per_token_logps: torch.Tensor) -> None:
        """TRL's vLLM importance-sampling ratio and its metrics, with the training forward as the old policy."""
        old, sampling = per_token_logps.detach(), inputs["sampling_per_token_logps"]
        mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)
        sequence_level = self.vllm_importance_sampling_mode in ("sequence_mask", "sequence_truncate")
        ratio = torch.exp(diff.sum(dim=-1, keepdim=True) if sequence_level else diff)
        low, high = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if self.vllm_importance_sampling_mode in ("sequence_truncate", "token_truncate"):
            ratio = torch.clamp(ratio, min=low, max=high)
        else:
            low = -float("inf") if low is None else low
            high = float("inf") if high is None else high
            ratio = ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
        inputs["importance_sampling_ratio"] = ratio
        metrics = self._metrics["train" if self.model.training else "eval"]
        delta = torch.abs(old - sampling)[mask.bool() & ~torch.isnan(old - sampling)]
        flat = ratio.flatten() if sequence_level else ratio[mask.bool()]
        zero = torch.tensor(0.0, device=old.device)
        gather = self.accelerator.gather
        metrics["sampling/sampling_logp_difference/mean"].append(gather(delta.mean() if delta.numel() else zero).mean().item())
        metrics["sampling/sampling_logp_difference/max"].append(gather(delta.max() if delta.numel() else zero).max().item())
        stats = {name: reduce(flat) if flat.numel() else zero for name, reduce in
                 (("min", torch.min), ("mean", torch.mean), ("max", torch.max))}
        metrics["sampling/importance_sampling_ratio/min"].append(nanmin(gather(stats["min"])).item())
        metrics["sampling/importance_sampling_ratio/mean"].append(gather(stats["mean"]).nanmean().item())
        metrics["sampling/importance_sampling_ratio/max"].append(nanmax(gather(stats["max"])).item())

    # ------------------------------------------------------------------ log-probs from hidden states
    def _get_per_token_logps_and_entropies(self, model, *args, batch_size=None, compute_aux_loss=False, **kwargs):
        if self.chunked_logprobs and not compute_aux_loss:
            result = self._chunked_rows(model, args, kwargs, batch_size)
        else:
            result = super()._get_per_token_logps_and_entropies(model, *args, batch_size=batch_size,
                                                                 compute_aux_loss=compute_aux_loss, **kwargs)
        if self._pending_is_inputs is not None:
            inputs, self._pending_is_inputs = self._pending_is_inputs, None
            self._fill_is_ratio(inputs, result[0])
        return result

    def _chunked_rows(self, model, args: tuple, kwargs: dict, batch_size: int | None):
        """TRL's chunked path, `batch_size` rows at a time. TRL drops batch_size there and runs the backbone over every
        row it is given; its no-grad scoring passes (old-policy and reference log-probs) give it the whole generation
        batch, whose activations then set the step's peak whatever the micro-batch (issue 35's H100 lease: 20.2 GiB of
        PyTorch at micro-batch 16 and at 4, results/gpu/h100_recipes35). Multimodal inputs go through whole."""
        unwrapped = self.accelerator.unwrap_model(model)

        def run(*rows_args):
            if model is not unwrapped or self.is_fsdp_enabled:
                return self._forward_redirection(model, unwrapped, self._chunked_logps, unwrapped, *rows_args, **kwargs)
            return self._chunked_logps(unwrapped, *rows_args, **kwargs)

        input_ids, attention_mask, *rest = args
        rows = input_ids.size(0)
        if not batch_size or rows <= batch_size or any(v is not None and not isinstance(v, (bool, int, float))
                                                       for v in kwargs.values()):
            return run(*args)
        parts = [run(input_ids[i:i + batch_size], attention_mask[i:i + batch_size], *rest)
                 for i in range(0, rows, batch_size)]
        entropies = None if parts[0][1] is None else torch.cat([p[1] for p in parts])
        return torch.cat([p[0] for p in parts]), entropies, None
