"""The LoRA policy into TRL's colocated vLLM without the full merge (`grpo.weight_sync: deltas`).

TRL 1.14.2's `VLLMGeneration.sync_weights` merges the LoRA into every targeted weight of the training model,
hands every parameter of the model (210 LoRA'd + the frozen rest: 272 `load_weights` calls at SmolLM2-135M) to
vLLM's loader one at a time, and unmerges; in bf16 the merge and unmerge also round the training model's base
weights a little each step. Only the LoRA'd weights ever change, and colocated vLLM lives in this process, so
here each one is written straight into its slice of vLLM's own tensor: `slice = W + delta`, with delta from
PEFT's own `get_delta_weight` (B @ A x scale, what `merge_adapter` adds), the training weights untouched.

vLLM stacks some projections into one tensor (`packed_modules_mapping`, e.g. q/k/v into `qkv_proj`, gate/up
into `gate_up_proj`, in that order): a projection's rows start after its siblings' rows. The map from PEFT's
module names to (vLLM tensor, rows) is built once and checked against every shape; anything it cannot place
(tensor parallelism, sleep mode, sharded training, DoRA, trained non-LoRA weights) fails naming the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ADAPTER = "default"
FIX = "set grpo.weight_sync: merge (TRL's own sync)"


@dataclass
class Target:
    name: str  # the projection's name in the HF model, e.g. model.layers.0.self_attn.q_proj
    layer: object  # its PEFT LoRA layer
    vllm_name: str  # the vLLM parameter it lives in, e.g. model.layers.0.self_attn.qkv_proj.weight
    rows: slice  # its rows in that parameter


def hf_name(peft_name: str) -> str:
    """A PEFT module name as the HF checkpoint (and so vLLM's loader) spells it."""
    name = peft_name.removeprefix("module.").removeprefix("base_model.model.")
    return name.replace("._checkpoint_wrapped_module", "")


def lora_layers(model) -> dict[str, object]:
    """HF name -> PEFT LoRA layer, for every layer holding the trained adapter."""
    from peft.tuners.lora import Linear, LoraLayer

    layers = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER in module.lora_A:
            if not isinstance(module, Linear) or module.use_dora.get(ADAPTER, False):
                raise ValueError(f"{name}: only plain LoRA on Linear layers is synced as deltas "
                                 f"({type(module).__name__}); {FIX}")
            layers[hf_name(name)] = module
    return layers


def check_only_lora_trains(model) -> None:
    trained = [n for n, p in model.named_parameters() if p.requires_grad and ".lora_" not in n]
    if trained:
        raise ValueError(f"weights other than LoRA's are trained ({trained[:3]}): deltas would leave vLLM's copies "
                         f"stale; {FIX}")


def map_targets(layers: dict[str, object], vllm_params: dict[str, torch.Tensor], packed: dict[str, list[str]],
                rows_of) -> list[Target]:
    """Where each LoRA layer's weight lives among vLLM's parameters; `rows_of(hf_name)` gives a projection's rows."""
    targets = []
    for name, layer in layers.items():
        parent, leaf = name.rsplit(".", 1)
        stacked = next((key for key, parts in packed.items() if leaf in parts), None)
        vllm_name = f"{parent}.{stacked or leaf}.weight"
        if vllm_name not in vllm_params:
            sample = [n for n in vllm_params if n.endswith(".weight")][:4]
            raise ValueError(f"{name}: vLLM has no parameter {vllm_name} (it has e.g. {sample}); {FIX}")
        siblings = packed[stacked] if stacked else [leaf]
        sizes = [rows_of(f"{parent}.{part}") for part in siblings]
        start = sum(sizes[:siblings.index(leaf)])
        rows = slice(start, start + rows_of(name))
        tensor = vllm_params[vllm_name]
        weight = layer.get_base_layer().weight
        if sum(sizes) != tensor.shape[0] or tuple(tensor[rows].shape) != tuple(weight.shape):
            raise ValueError(f"{name}: its weight {tuple(weight.shape)} does not fit rows {rows.start}-{rows.stop} of "
                             f"vLLM's {vllm_name} {tuple(tensor.shape)} (quantized or sharded?); {FIX}")
        targets.append(Target(name, layer, vllm_name, rows))
    return targets


@torch.no_grad()
def write_deltas(targets: list[Target], vllm_params: dict[str, torch.Tensor]) -> None:
    """Each target's slice of vLLM's tensor = base weight + LoRA delta, written in place."""
    for t in targets:
        view = vllm_params[t.vllm_name].data[t.rows]
        view.copy_(t.layer.get_base_layer().weight)
        view.add_(t.layer.get_delta_weight(ADAPTER).to(view.dtype))


def vllm_model(llm):
    """The colocated engine's torch model (how TRL 1.14.2 reaches it to load weights)."""
    return llm.llm_engine.model_executor.driver_worker.model_runner.model


def rows_in(model):
    """hf_name -> output rows of that Linear in the training model (LoRA layer or not)."""
    base = model.get_base_model()
    return lambda name: base.get_submodule(name).weight.shape[0]


class DeltaSync:
    """Drop-in for `VLLMGeneration.sync_weights` (colocate mode, one GPU per engine)."""

    def __init__(self, generation):
        if generation.mode != "colocate" or generation.tensor_parallel_size != 1:
            raise ValueError(f"weight_sync deltas needs vLLM colocated with tensor_parallel_size 1; {FIX}")
        if generation.enable_sleep_mode or generation._dist.is_fsdp or generation._dist.is_zero3:
            raise ValueError(f"weight_sync deltas needs unsharded training weights and vLLM awake; {FIX}")
        self.generation = generation
        self.targets: list[Target] | None = None

    def __call__(self) -> None:
        model, llm = self.generation.model, self.generation.llm
        params = dict(vllm_model(llm).named_parameters())
        if self.targets is None:  # built at the first sync, when vLLM's model exists
            check_only_lora_trains(model)
            self.targets = map_targets(lora_layers(model), params, getattr(vllm_model(llm), "packed_modules_mapping", {}),
                                       rows_in(model))
        write_deltas(self.targets, params)
        llm.reset_prefix_cache()
