"""OpenAI-compatible HTTP client for the chat servers: streaming chat, LoRA hot-loading (vLLM)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 300.0  # the longest wait for the next token (a cold 8B model on CPU can be slow)
WARM_UP_TOKENS = 8
WARM_UP_SAMPLING = {"temperature": 0.8, "top_p": 0.95}  # the Chat tab's defaults: the kernels chat will run


class ChatError(RuntimeError):
    """The server answered with an error or the connection broke."""


def stream_chat(base_url: str, model: str, messages: list[dict], *, temperature: float = 0.8, top_p: float = 0.95,
                max_tokens: int = 2048, seed: int | None = None) -> Iterator[str]:
    """Yield the reply's text pieces as the server streams them (server-sent events)."""
    body = {"model": model, "messages": messages, "temperature": temperature, "top_p": top_p,
            "max_tokens": max_tokens, "stream": True}
    if seed is not None:
        body["seed"] = seed
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    try:
        with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=timeout) as response:
            if response.status_code != 200:
                raise ChatError(f"{base_url} answered {response.status_code}: {response.read().decode(errors='replace')[:500]}")
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                choice = (json.loads(data).get("choices") or [{}])[0]
                delta = choice.get("delta") or {}
                text = (delta.get("reasoning_content") or "") + (delta.get("content") or "")
                if text:
                    yield text
    except httpx.HTTPError as error:
        raise ChatError(f"connection to {base_url} failed ({type(error).__name__}: {error})") from error


def load_lora(base_url: str, name: str, path: str) -> None:
    """Hot-load a LoRA adapter into a running vLLM server (VLLM_ALLOW_RUNTIME_LORA_UPDATING is set at start);
    an adapter vLLM cannot serve (grown embedding) is refused here, naming the fix, before the server sees it."""
    from grpo_playground.serving.backends import vllm_adapter_problem

    problem = vllm_adapter_problem(path)
    if problem:
        raise ChatError(problem)
    response = httpx.post(f"{base_url}/v1/load_lora_adapter", json={"lora_name": name, "lora_path": path}, timeout=120)
    if response.status_code != 200:
        raise ChatError(f"vLLM refused to load LoRA {name} from {path}: {response.text[:500]}")


def warm_up(base_url: str, models: list[str], concurrent: int) -> None:
    """A few short requests before a server is called ready: one per served model (base, each LoRA), then
    `concurrent` at once spread over them (none below 2). vLLM's Triton kernels (LoRA shrink/expand, top-p
    sampling for larger batches, slot mapping) compile on first use, so without this the first user pays it: on
    the H200 a cold LoRA streamed 13 tok/s and the first 8-chat batch waited 3.4 s. ChatError when one fails."""
    question = [{"role": "user", "content": "Say hello."}]

    def ask(i: int) -> str:
        return "".join(stream_chat(base_url, models[i % len(models)], question, max_tokens=WARM_UP_TOKENS, seed=i,
                                   **WARM_UP_SAMPLING))

    for i in range(len(models)):
        ask(i)
    if concurrent > 1:
        with ThreadPoolExecutor(concurrent) as pool:
            list(pool.map(ask, range(concurrent)))
