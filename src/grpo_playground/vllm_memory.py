"""How much of the GPU a colocated vLLM engine should reserve, from the model's shape and the GRPO batch.

vLLM takes `gpu_memory_utilization` x the card's memory up front, whatever the model needs. A fixed 0.5-0.7 of an
H200 (70-100 GiB) for a 135M model starves the trainer beside it for nothing, and on a small card a fixed share can
be too little for an 8B model. The share here covers what the engine will hold:

    1.2 x weights  +  2 x KV cache of every row at full length  +  5 GiB (CUDA graphs, the profiling pass, workspace)

and is clamped to 0.05-0.90. model.gpu_memory_utilization in a recipe overrides it (the seed sets 0.7).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

FIXED_OVERHEAD_BYTES = 5 * 2**30
NF4_BYTES_PER_PARAM = 0.5 + 4 / 64  # bitsandbytes nf4: 4-bit weights + one fp32 absmax per 64
FP8_BYTES_PER_PARAM = 1.0  # float8 weights; a scale per row is negligible (embeddings stay 16-bit)
MIN_SHARE, MAX_SHARE = 0.05, 0.90


def shape_from_config(config: dict) -> dict:
    """Parameter counts (embeddings apart) and KV-cache bytes per token (16-bit) of a llama/qwen-style config."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    vocab = config["vocab_size"]
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q and o, k and v
    mlp = 3 * hidden * config["intermediate_size"]  # gate, up, down
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    return {"linear_params": layers * (attention + mlp), "embedding_params": embeddings,
            "kv_bytes_per_token": 2 * layers * kv_heads * head_dim * 2}


def weight_bytes(shape: dict, four_bit: bool = False, fp8: bool = False) -> float:
    per_param = NF4_BYTES_PER_PARAM if four_bit else FP8_BYTES_PER_PARAM if fp8 else 2
    return shape["embedding_params"] * 2 + shape["linear_params"] * per_param


def kv_cache_bytes(shape: dict, rows: int, tokens_per_row: int) -> int:
    """The KV cache the formula above budgets: twice `rows` sequences of `tokens_per_row` tokens."""
    return 2 * shape["kv_bytes_per_token"] * rows * tokens_per_row


def engine_bytes(shape: dict, rows: int, tokens_per_row: int, four_bit: bool = False, fp8: bool = False) -> int:
    """What a vLLM engine holds for `rows` sequences of `tokens_per_row` tokens (the formula above)."""
    return int(1.2 * weight_bytes(shape, four_bit, fp8) + kv_cache_bytes(shape, rows, tokens_per_row)
               + FIXED_OVERHEAD_BYTES)


def memory_share(shape: dict, rows: int, tokens_per_row: int, total_bytes: int, four_bit: bool = False,
                 fp8: bool = False) -> float:
    need = engine_bytes(shape, rows, tokens_per_row, four_bit, fp8)
    return min(max(math.ceil(need / total_bytes * 100) / 100, MIN_SHARE), MAX_SHARE)


def read_config(model_dir: str | Path) -> dict:
    return json.loads((Path(model_dir) / "config.json").read_text())
