"""Model registry and loaders. Importing this package never imports torch (the UI reads the registry)."""

from grpo_playground.models.loading import cache_dir, convert_gguf, hf_dir, load_model_and_tokenizer, load_tokenizer
from grpo_playground.models.registry import (
    CAPABILITIES,
    MODELS,
    OFFLINE_MODELS,
    ModelSpec,
    gguf_path,
    resolve_model,
)

__all__ = [
    "CAPABILITIES",
    "MODELS",
    "OFFLINE_MODELS",
    "ModelSpec",
    "cache_dir",
    "convert_gguf",
    "gguf_path",
    "hf_dir",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_model",
]
