"""The model registry and loaders: offline models load and generate; bad names get clear errors."""

from __future__ import annotations

import json
import sys

import pytest

from grpo_playground.models import MODELS, OFFLINE_MODELS, hf_dir, load_model_and_tokenizer, load_tokenizer, resolve_model
from grpo_playground.models.registry import TINY_DIR
from grpo_playground.tags import DEFAULT_TAGS


def greedy_text(model, tokenizer, question: str, tokens: int = 8) -> str:
    import torch

    batch = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=tokens, do_sample=False)
    return tokenizer.decode(out[0, batch["input_ids"].shape[1] :], skip_special_tokens=True)


def test_registry_names_the_offline_models_and_their_capabilities():
    assert {"tiny", "smollm2-135m", "qwen3-8b", "qwen3-4b-base", "qwen3-0.6b", "qwen3-1.7b"} <= set(MODELS)
    assert set(OFFLINE_MODELS) == {"tiny", "smollm2-135m"}
    assert MODELS["tiny"].tags_known and not MODELS["qwen3-8b"].tags_known
    assert MODELS["qwen3-4b-base"].location == "unsloth/Qwen3-4B-Base"
    assert all("train" in spec.supports for spec in MODELS.values())


def test_registry_import_does_not_pull_torch():
    # the UI reads the registry: importing it must stay light
    import subprocess

    code = "import sys, grpo_playground.models; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(TINY_DIR.parents[1] / "src")})


@pytest.mark.parametrize(
    "name, message",
    [
        ("", "no model given"),
        ("gpt-nine", "unknown model 'gpt-nine'"),
        ("Qwen/Qwen3-99B", "hub cannot be reached from here"),  # a hub id offline names the offline models
        ("Qwen/Qwen3-99B", "tiny, smollm2-135m"),
    ],
)
def test_resolve_errors_say_what_is_wrong(name, message):
    with pytest.raises(ValueError, match=message):
        resolve_model(name)


def test_resolve_local_paths(tmp_path):
    with pytest.raises(ValueError, match="neither config.json"):
        resolve_model(tmp_path)
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(ValueError, match="not a .gguf model"):
        resolve_model(tmp_path / "weights.bin")
    assert resolve_model(str(TINY_DIR)) is MODELS["tiny"]  # the registry's own folder maps back to its entry


def test_resolve_adapter_folder_finds_its_base(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(TINY_DIR)}))
    spec = resolve_model(tmp_path)
    assert spec.source == "adapter" and spec.base is MODELS["tiny"] and spec.tags_known
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    with pytest.raises(ValueError, match="base_model_name_or_path"):
        resolve_model(tmp_path)


def test_tiny_tokenizer_keeps_the_tags_as_single_ordinary_tokens():
    tokenizer = load_tokenizer("tiny")
    text = "<start_working_out>3 * 12 = 36<end_working_out><SOLUTION>36</SOLUTION>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    for tag in DEFAULT_TAGS.as_list():
        tag_ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
        assert len(tag_ids) == 1 and tag_ids[0] in ids, tag
        assert tag_ids[0] not in tokenizer.all_special_ids, f"{tag} is special: TRL would strip it"
    # TRL decodes completions with skip_special_tokens=True: the tags must survive it
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.tokenize("1234") == ["1", "2", "3", "4"]  # digits one per token
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}], add_generation_prompt=True, tokenize=False
    )
    assert rendered == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"


def test_tiny_loads_and_generates():
    model, tokenizer = load_model_and_tokenizer("tiny", device="cpu")
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) < 5_000_000
    assert model.config.vocab_size == len(tokenizer)
    size_mb = sum(f.stat().st_size for f in hf_dir("tiny").iterdir()) / 2**20
    assert size_mb < 20
    text = greedy_text(model, tokenizer, "Mia has 12 apples. She buys 5 more apples. How many apples does Mia have now?", 24)
    assert text.strip(), "tiny generated nothing"
    assert not any(tag in text for tag in DEFAULT_TAGS.as_list())  # before SFT it does not speak the format


def test_adapter_folder_loads_as_peft_model(tmp_path):
    from peft import LoraConfig, get_peft_model

    model, tokenizer = load_model_and_tokenizer("tiny", device="cpu")
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    peft_model.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = load_model_and_tokenizer(str(tmp_path), device="cpu")
    assert type(loaded).__name__.startswith("Peft") and len(loaded_tokenizer) == len(tokenizer)
    assert any(p.requires_grad for p in loaded.parameters())  # trainable: training can continue from it


@pytest.mark.slow
def test_smollm2_converts_and_generates():
    # uses the real cache (GRPO_PLAYGROUND_CACHE): the first run converts (a minute or more), later runs reuse it
    model, tokenizer = load_model_and_tokenizer("smollm2-135m", device="cpu")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert tokenizer.eos_token == "<|im_end|>"  # the GGUF reader's wrong eos is corrected
    assert "quantization_config" not in json.loads((hf_dir("smollm2-135m") / "config.json").read_text())
    assert "5" in greedy_text(model, tokenizer, "What is 2 + 3?", 8)


def test_a_second_conversion_waits_for_the_first_and_reuses_its_folder(tmp_path, monkeypatch):
    """Two jobs that start on the same GGUF model together convert it once: the second waits for the first's lock,
    then finds the folder (before: both dequantized it, ~30 s of CPU each for SmolLM2, one copy thrown away)."""
    import dataclasses
    import fcntl
    import threading

    from grpo_playground.models import loading

    monkeypatch.setenv("GRPO_PLAYGROUND_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"not a real GGUF: converting it would fail")
    spec = dataclasses.replace(resolve_model("smollm2-135m"), location=str(gguf))
    target = loading._converted_dir(spec, gguf)
    target.parent.mkdir(parents=True)
    returned = []
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first job, converting
        second = threading.Thread(target=lambda: returned.append(loading.convert_gguf(spec)))
        second.start()
        second.join(1.0)
        assert second.is_alive() and not returned  # it waits, it does not convert beside the first
        target.mkdir()
        (target / "config.json").write_text("{}")  # the first job's folder lands
    second.join(10)
    assert returned == [target]
