"""`grpo.weight_sync: deltas` (training.vllm_sync) on CPU: the weights it writes equal PEFT's merge, and its map
from PEFT names to vLLM's stacked tensors holds for the real HF names of a Llama (SmolLM2) and a Qwen3 model.

vLLM cannot run here. The stand-in for vLLM's model has vLLM's parameter names and layout (q/k/v stacked in
`qkv_proj`, gate/up in `gate_up_proj`, `packed_modules_mapping` as vLLM's Llama and Qwen3 declare it), built
from the HF model's own named_parameters, holding the base weights as vLLM loads them from the checkpoint.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from grpo_playground.training import vllm_sync  # noqa: E402

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}  # vLLM's Llama/Qwen3
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _base(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    shape = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8)
    return LlamaForCausalLM(LlamaConfig(**shape)) if kind == "llama" else Qwen3ForCausalLM(Qwen3Config(**shape))


def _hf(kind: str, targets=ALL):
    from peft import LoraConfig, get_peft_model

    base = _base(kind)
    base_weights = {n: p.detach().clone() for n, p in base.named_parameters()}
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=16, target_modules=targets))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    return model, base_weights


class FakeVllmModel(torch.nn.Module):
    """vLLM's parameter names and stacked layout, from the HF checkpoint's names (what vLLM's loader maps)."""

    packed_modules_mapping = PACKED

    def __init__(self, hf_weights: dict[str, torch.Tensor]):
        super().__init__()
        stacked: dict[str, list[torch.Tensor]] = {}
        for name, weight in hf_weights.items():
            *parent, leaf, kind = name.split(".")
            key = next((k for k, parts in PACKED.items() if leaf in parts), leaf)
            parts = PACKED.get(key, [leaf])
            stacked.setdefault(".".join([*parent, key, kind]), [None] * len(parts))[parts.index(leaf)] = weight
        for name, parts in stacked.items():
            module = self
            for piece in name.split(".")[:-1]:
                if not hasattr(module, piece):
                    module.add_module(piece, torch.nn.Module())
                module = getattr(module, piece)
            module.register_parameter(name.rsplit(".", 1)[1], torch.nn.Parameter(torch.cat(parts), requires_grad=False))


def _merged(model) -> dict[str, torch.Tensor]:
    """PEFT's own merge, as TRL's sync sends it to vLLM, then unmerged again."""
    model.merge_adapter()
    merged = {vllm_sync.hf_name(n).replace(".base_layer", ""): p.detach().clone()
              for n, p in model.named_parameters() if ".lora_" not in n}
    model.unmerge_adapter()
    return merged


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_deltas_written_into_vllm_tensors_equal_peft_merge(kind):
    model, base_weights = _hf(kind)
    fake = FakeVllmModel(base_weights)
    params = dict(fake.named_parameters())
    layers = vllm_sync.lora_layers(model)
    assert len(layers) == 2 * 7 and "model.layers.1.self_attn.k_proj" in layers
    targets = vllm_sync.map_targets(layers, params, fake.packed_modules_mapping, vllm_sync.rows_in(model))
    vllm_sync.write_deltas(targets, params)

    for name, p in model.get_base_model().named_parameters():  # the training model's base weights stay as they were
        if ".lora_" not in name:  # (PEFT's merge + unmerge does not give them back bit for bit)
            torch.testing.assert_close(p, base_weights[name.replace(".base_layer", "")], rtol=0, atol=0)
    expected = FakeVllmModel(_merged(model))  # the merged weights, stacked the way vLLM's loader stacks them
    for name, tensor in expected.named_parameters():
        torch.testing.assert_close(params[name], tensor, msg=name)  # every vLLM tensor: merged rows, untouched rest


def test_a_later_sync_follows_the_trained_adapter():
    model, base_weights = _hf("llama", targets=["q_proj", "v_proj"])  # k_proj's rows sit between them, untouched
    fake = FakeVllmModel(base_weights)
    params = dict(fake.named_parameters())
    targets = vllm_sync.map_targets(vllm_sync.lora_layers(model), params, PACKED, vllm_sync.rows_in(model))
    vllm_sync.write_deltas(targets, params)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.mul_(-2.0)  # an optimizer step
    vllm_sync.write_deltas(targets, params)
    expected = FakeVllmModel(_merged(model))
    for name, tensor in expected.named_parameters():
        torch.testing.assert_close(params[name], tensor, msg=name)
    q_rows = targets[0].rows
    assert q_rows == slice(0, 32) and targets[1].rows == slice(48, 64)  # q 32 rows, k 16, v 16


def test_a_vllm_tensor_that_does_not_fit_names_the_fix():
    model, base_weights = _hf("llama", targets=["q_proj"])
    fake = FakeVllmModel(base_weights)
    params = dict(fake.named_parameters())
    params["model.layers.0.self_attn.qkv_proj.weight"] = torch.zeros(10, 32)  # e.g. a sharded or packed copy
    with pytest.raises(ValueError, match="weight_sync: merge"):
        vllm_sync.map_targets(vllm_sync.lora_layers(model), params, PACKED, vllm_sync.rows_in(model))
    del params["model.layers.0.self_attn.qkv_proj.weight"]
    with pytest.raises(ValueError, match="has no parameter model.layers.0.self_attn.qkv_proj.weight"):
        vllm_sync.map_targets(vllm_sync.lora_layers(model), params, PACKED, vllm_sync.rows_in(model))


def test_trained_weights_beside_lora_are_refused():
    model, _ = _hf("llama", targets=["q_proj"])
    model.get_base_model().lm_head.weight.requires_grad_(True)
    with pytest.raises(ValueError, match="other than LoRA"):
        vllm_sync.check_only_lora_trains(model)


def test_delta_sync_drives_the_engine_like_trls_sync():
    """DeltaSync as TRL's VLLMGeneration calls it: maps once, writes, resets vLLM's prefix cache."""
    from types import SimpleNamespace

    model, base_weights = _hf("qwen3")
    fake = FakeVllmModel(base_weights)
    resets = []
    llm = SimpleNamespace(llm_engine=SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
        model_runner=SimpleNamespace(model=fake)))), reset_prefix_cache=lambda: resets.append(1))
    dist = SimpleNamespace(is_fsdp=False, is_zero3=False)
    generation = SimpleNamespace(mode="colocate", tensor_parallel_size=1, enable_sleep_mode=False, _dist=dist,
                                 model=model, llm=llm)
    sync = vllm_sync.DeltaSync(generation)
    sync()
    sync()
    assert len(resets) == 2 and len(sync.targets) == 14
    expected = FakeVllmModel(_merged(model))
    for name, tensor in expected.named_parameters():
        torch.testing.assert_close(dict(fake.named_parameters())[name], tensor, msg=name)
    with pytest.raises(ValueError, match="tensor_parallel_size 1"):
        vllm_sync.DeltaSync(SimpleNamespace(**(vars(generation) | {"tensor_parallel_size": 2})))


def test_lora_engine_gives_trls_engine_one_lora_slot_of_the_policys_rank(monkeypatch):
    import trl.generation.vllm_generation as trl_vllm

    built = []
    monkeypatch.setattr(trl_vllm, "LLM", lambda **kwargs: built.append(kwargs), raising=False)
    original = trl_vllm.LLM
    with vllm_sync.lora_engine(32):
        trl_vllm.LLM(model="m", gpu_memory_utilization=0.1)
    assert built == [{"model": "m", "gpu_memory_utilization": 0.1, "enable_lora": True, "max_lora_rank": 32,
                      "max_loras": 1}]
    assert trl_vllm.LLM is original  # restored: later engines are TRL's own
    with vllm_sync.lora_engine(12):  # vLLM refuses max_lora_rank 12 (its ranks: 1, 8, 16, 32, ...): the slot is 16
        trl_vllm.LLM(model="m")
    assert built[-1]["max_lora_rank"] == 16
    with pytest.raises(ValueError, match="lower lora.r"):
        vllm_sync.lora_engine(1024).__enter__()


def test_adapter_sync_hands_vllm_each_steps_adapter_and_every_rollout_asks_for_it(tmp_path):
    from collections import namedtuple
    from types import SimpleNamespace

    from peft import PeftModel

    model, _ = _hf("llama")
    Request = namedtuple("Request", "lora_name lora_int_id lora_path")
    generated, removed = [], []
    engine = SimpleNamespace(remove_lora=removed.append)
    llm = SimpleNamespace(llm_engine=engine, reset_prefix_cache=lambda: None,
                          generate=lambda prompts, sampling_params=None, use_tqdm=True, lora_request=None:
                          generated.append(lora_request))
    generation = SimpleNamespace(mode="colocate", _dist=SimpleNamespace(is_fsdp=False, is_zero3=False), model=model,
                                 llm=llm)
    sync = vllm_sync.AdapterSync(generation, tmp_path / "adapter", request=Request)
    sync()
    first = sync.current
    llm.generate(["p"], sampling_params=None, use_tqdm=False)  # as TRL calls it
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(1.0)
    sync()
    llm.generate(["p"], sampling_params=None, use_tqdm=False)
    assert generated == [first, sync.current] and (first.lora_int_id, sync.current.lora_int_id) == (1, 2)
    assert removed == [1] and not (tmp_path / "adapter" / "step1").exists()

    reloaded = PeftModel.from_pretrained(_base("llama"), sync.current.lora_path)  # what vLLM reads
    trained = {n: p for n, p in model.named_parameters() if ".lora_" in n}
    assert sum(".lora_" in n for n, _ in reloaded.named_parameters()) == len(trained)
    for name, p in reloaded.named_parameters():
        if ".lora_" in name:
            torch.testing.assert_close(p, trained[name].to(torch.bfloat16).to(p.dtype), msg=name)
