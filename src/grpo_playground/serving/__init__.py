"""Chat backends as child processes: llama.cpp (GGUF, CPU or GPU) and vLLM (base + LoRA, GPU), spoken to over
OpenAI-compatible HTTP. No torch or model code here: the UI process imports this package."""

from grpo_playground.serving.backends import (
    CHAT_BACKENDS,
    LLAMA_CPP,
    VLLM,
    llamacpp_command,
    llamacpp_server,
    llamacpp_unavailable_reason,
    vllm_command,
    vllm_server,
    vllm_unavailable_reason,
)
from grpo_playground.serving.client import ChatError, load_lora, stream_chat
from grpo_playground.serving.pool import POOL, NeedsOwner, ServerPool
from grpo_playground.serving.process import BackendUnavailable, ManagedServer, ServerFailed
from grpo_playground.serving.records import stop_orphans
from grpo_playground.serving.targets import ChatTarget, discover_targets

__all__ = [
    "CHAT_BACKENDS", "LLAMA_CPP", "POOL", "VLLM", "BackendUnavailable", "ChatError", "ChatTarget", "ManagedServer",
    "NeedsOwner",
    "ServerFailed", "ServerPool", "discover_targets", "llamacpp_command", "llamacpp_server",
    "llamacpp_unavailable_reason", "load_lora", "stop_orphans", "stream_chat", "vllm_command", "vllm_server",
    "vllm_unavailable_reason",
]
