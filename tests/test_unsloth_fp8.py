"""The FP8 GRPO stage on Unsloth 2026.10.9 (results/gpu/h100_recipes35_lease7/). Its adapter reaches vLLM under no_grad:
Unsloth's `load_lora` runs under torch.inference_mode, where the state_dict() of a tensor-subclass weight (torchao's
Float8Tensor) raises, and every FP8 run failed at its first rollout. vLLM's context is sized for FP8 weights. Unsloth
needs CUDA, so what it calls is copied here as it is decorated and what it reads; the failure itself is PyTorch's,
reproduced with a wrapper subclass."""

import sys
import types

import pytest
import torch
from torch.utils._pytree import tree_map


class WrappedWeight(torch.Tensor):
    """A weight stored in another tensor, as torchao's Float8Tensor stores its FP8 data and scale."""

    @staticmethod
    def __new__(cls, data):
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype, device=data.device)

    def __init__(self, data):
        self.inner = data

    def __tensor_flatten__(self):
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, size, stride):
        return WrappedWeight(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.inner if isinstance(t, WrappedWeight) else t  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda t: WrappedWeight(t) if isinstance(t, torch.Tensor) else t, out)


@torch.inference_mode
def load_lora(model, save_directory, load_tensors=False, lora_request_id=None):
    """unsloth_zoo.vllm_utils.load_lora's decorator and its read of the weights (load_tensors: the whole state dict,
    then the LoRA tensors by name)."""
    return {k: v for k, v in model.state_dict().items() if ".lora_A." in k or ".lora_B." in k}


@pytest.fixture
def fp8_model(monkeypatch):
    import functools

    from peft import LoraConfig, get_peft_model

    monkeypatch.setitem(sys.modules, "unsloth_zoo", types.SimpleNamespace(vllm_utils=types.SimpleNamespace(
        load_lora=load_lora)))
    base = torch.nn.Sequential()
    base.add_module("proj", torch.nn.Linear(8, 8))
    base.proj.weight = torch.nn.Parameter(WrappedWeight(torch.randn(8, 8)), requires_grad=False)
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["proj"]))
    model.load_lora = functools.partial(load_lora, model)  # what Unsloth's patch_peft_fast_inference binds
    return model


def test_the_fp8_adapter_reaches_vllm(fp8_model):
    from grpo_playground.training.unsloth_fp8 import hand_lora_to_vllm_without_inference_mode

    with pytest.raises(RuntimeError, match="version_counter for inference tensor"):
        fp8_model.load_lora("grpo", load_tensors=True)  # Unsloth 2026.10.9 as it is
    hand_lora_to_vllm_without_inference_mode(fp8_model)
    handed = fp8_model.load_lora("grpo", load_tensors=True)
    assert sorted(handed) == [f"base_model.model.proj.lora_{ab}.default.weight" for ab in "AB"]
    trained = fp8_model.base_model.model.proj.lora_B.default.weight  # the step's weights, not a copy
    assert handed["base_model.model.proj.lora_B.default.weight"].data_ptr() == trained.data_ptr()


def test_unsloth_sizes_vllms_context_for_fp8_weights_while_the_engine_starts(monkeypatch):
    """Unsloth counts an FP8-loaded 16-bit checkpoint's weights as 16-bit unless told 8-bit: counted as 8-bit during
    the load only."""
    from grpo_playground.training.unsloth_fp8 import unsloth_counts_fp8_weights

    def weights_bytes(config, load_in_4bit=False, load_in_8bit=False):  # unsloth_zoo's signature and byte counts
        return config["params"] * (2 / (8 / 5) if load_in_8bit else 2)

    zoo = types.SimpleNamespace(vllm_weights_memory_usage=weights_bytes)
    monkeypatch.setitem(sys.modules, "unsloth_zoo", types.SimpleNamespace(vllm_utils=zoo))
    with unsloth_counts_fp8_weights():
        assert zoo.vllm_weights_memory_usage({"params": 8e9}, load_in_4bit=False, load_in_8bit=False) == 1e10
    assert zoo.vllm_weights_memory_usage({"params": 8e9}, load_in_4bit=False, load_in_8bit=False) == 1.6e10
