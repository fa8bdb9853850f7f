"""The LoRA policy into TRL's colocated vLLM without the full merge (`grpo.weight_sync: deltas` or `lora`).

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

`lora` keeps vLLM's weights the base model's and serves the adapter from a vLLM LoRA slot, as Unsloth does: the
engine is built with `enable_lora` (TRL 1.14.2 has no option for it: its `LLM` is wrapped while the trainer builds
it), each sync writes the adapter (bf16, to shared memory) as a new LoRA request, and every rollout asks for it.
vLLM decodes slower with a LoRA than with merged weights, which is why both are measured.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

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


@contextlib.contextmanager
def lora_engine(max_lora_rank: int):
    """While TRL builds its colocated engine: vLLM's LLM with one LoRA slot holding the policy's rank (rounded up to
    one vLLM accepts)."""
    import trl.generation.vllm_generation as trl_vllm

    from grpo_playground.serving.backends import vllm_max_lora_rank

    original, rank = trl_vllm.LLM, vllm_max_lora_rank(max_lora_rank)
    trl_vllm.LLM = lambda *args, **kwargs: original(*args, enable_lora=True, max_lora_rank=rank, max_loras=1, **kwargs)
    try:
        yield
    finally:
        trl_vllm.LLM = original


def write_adapter(model, folder: Path) -> Path:
    """The trained adapter as PEFT saves it (config + safetensors), in bf16: what vLLM's LoRA loader reads."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = get_peft_model_state_dict(model, adapter_name=ADAPTER)
    save_file({k: v.detach().to(torch.bfloat16).contiguous() for k, v in state.items()},
              str(folder / "adapter_model.safetensors"))
    model.peft_config[ADAPTER].save_pretrained(str(folder))
    return folder


def shared_memory_folder(name: str) -> Path:
    """A folder in shared memory (RAM) where there is one: the adapter is written at every step."""
    shm = Path("/dev/shm")
    return (shm if shm.is_dir() else Path(tempfile.gettempdir())) / name


class AdapterSync:
    """Drop-in for `VLLMGeneration.sync_weights` that hands vLLM the adapter, and rollouts that ask for it."""

    def __init__(self, generation, folder: Path, request=None):
        if generation.mode != "colocate" or generation._dist.is_fsdp or generation._dist.is_zero3:
            raise ValueError(f"weight_sync lora needs vLLM colocated and unsharded training weights; {FIX}")
        if request is None:
            from vllm.lora.request import LoRARequest as request
        self.generation, self.folder, self.make_request = generation, folder, request
        self.current = None
        llm = generation.llm
        generate = llm.generate
        llm.generate = lambda *args, **kwargs: generate(*args, lora_request=self.current, **kwargs)

    def __call__(self) -> None:
        check_only_lora_trains(self.generation.model)
        previous = self.current
        number = 1 if previous is None else previous.lora_int_id + 1
        path = write_adapter(self.generation.model, self.folder / f"step{number}")
        self.current = self.make_request(f"policy-{number}", number, str(path))
        if previous is not None:  # one slot: the old adapter goes, from vLLM and from disk
            engine = self.generation.llm.llm_engine
            if hasattr(engine, "remove_lora"):
                engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)
        self.generation.llm.reset_prefix_cache()
