"""The two chat backends: llama.cpp (GGUF files, CPU or GPU) and vLLM (base model + LoRA adapters, GPU).

Each builds the command line of an OpenAI-compatible server and says plainly when it cannot run here.
No model is imported in this module: the UI process uses it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

from grpo_playground.serving.process import BackendUnavailable, ManagedServer, free_port

LLAMA_CPP = "llama.cpp"
VLLM = "vllm"
BACKENDS = (LLAMA_CPP, VLLM)
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM accepts for --max-lora-rank


def nvidia_gpu_present() -> bool:
    return Path("/proc/driver/nvidia/gpus").is_dir() or shutil.which("nvidia-smi") is not None


def llamacpp_unavailable_reason() -> str | None:
    # find_spec on top-level names only: asking for "llama_cpp.server" would import (load) llama_cpp here.
    if importlib.util.find_spec("llama_cpp") is None:
        return ("llama.cpp backend: the llama-cpp-python package is not installed in this environment; "
                "run `bash scripts/install.sh` (it builds llama-cpp-python[server]==0.3.36)")
    if any(importlib.util.find_spec(name) is None for name in ("uvicorn", "sse_starlette", "starlette_context")):
        return "llama.cpp backend: the server extra is missing: pip install 'llama-cpp-python[server]==0.3.36'"
    return None


def vllm_unavailable_reason() -> str | None:
    """Why vLLM cannot run on this machine, or None when it can."""
    problems = []
    if not nvidia_gpu_present():
        problems.append("no NVIDIA GPU / CUDA driver on this machine (vLLM serves on CUDA GPUs only)")
    if importlib.util.find_spec("vllm") is None:
        problems.append("the vllm package is not installed (on a GPU machine: pip install -r requirements-gpu.txt)")
    if not problems:
        return None
    return ("vLLM backend cannot run here: " + "; ".join(problems)
            + ". On this machine chat through llama.cpp: export the run to GGUF "
            "(python -m pipelines.export --run RUN_DIR --gguf q4_k_m) and pick the .gguf file.")


def llamacpp_command(model: str | Path, port: int, lora: str | Path | None = None, chat_format: str | None = None,
                     n_ctx: int = 4096, threads: int = 1, gpu_layers: int | None = None) -> list[str]:
    """`python -m llama_cpp.server` for one GGUF file (+ optional GGUF LoRA adapter)."""
    if gpu_layers is None:
        gpu_layers = -1 if nvidia_gpu_present() else 0
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
               "--n_gpu_layers", str(gpu_layers), "--model_alias", Path(model).stem]
    if lora:
        command += ["--lora_path", str(lora)]
    if chat_format:
        command += ["--chat_format", chat_format]
    return command


def lora_rank(adapter_dir: str | Path) -> int:
    try:
        config = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{adapter_dir} is not a PEFT LoRA folder (adapter_config.json unreadable: {error})") from error
    return int(config.get("r", 8))


def run_chat_template(adapter_dir: str | Path, out_file: Path) -> Path | None:
    """For vLLM: the adapter's chat template with its run's prefill of the opening reasoning tag (as training
    rendered prompts), written to out_file; None when the run does not prefill or has no template."""
    from grpo_playground.config import load_recipe
    from grpo_playground.export.pipeline import with_prefill

    adapter_dir = Path(adapter_dir)
    recipe = adapter_dir.parent / "recipe.yaml"
    if not recipe.is_file():
        return None
    config = load_recipe(recipe)
    tag = config.rewards.tags.reasoning_start
    template = (adapter_dir / "chat_template.jinja").read_text() if (adapter_dir / "chat_template.jinja").is_file() else None
    if template is None and (adapter_dir / "tokenizer_config.json").is_file():
        template = json.loads((adapter_dir / "tokenizer_config.json").read_text()).get("chat_template")
    if not config.data.prefill_reasoning or not isinstance(template, str) or tag in template:
        return None  # a template that already names the tag prefills it itself
    out_file.write_text(with_prefill(template, tag), encoding="utf-8")
    return out_file


def vllm_command(base: str, loras: dict[str, str | Path], port: int, gpu_memory_utilization: float = 0.7,
                 max_model_len: int | None = None, base_name: str = "base", chat_template: Path | None = None) -> list[str]:
    """`vllm serve BASE --enable-lora --lora-modules name=PATH ...`: each adapter is served by name, on top of
    the unmerged base weights; more can be hot-loaded later (see client.load_lora)."""
    for name in loras:
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"LoRA name {name!r}: use letters, digits, - and _ only")
    rank = max([lora_rank(path) for path in loras.values()] + [64])
    max_rank = next((r for r in VLLM_LORA_RANKS if r >= rank), None)
    if max_rank is None:
        raise ValueError(f"LoRA rank {rank} is above vLLM's maximum {VLLM_LORA_RANKS[-1]}")
    executable = shutil.which("vllm") or "vllm"
    command = [executable, "serve", str(base), "--host", "127.0.0.1", "--port", str(port),
               "--served-model-name", base_name, "--gpu-memory-utilization", str(gpu_memory_utilization),
               "--enable-lora", "--max-lora-rank", str(max_rank)]
    if chat_template:  # one template per server: the base and every adapter are prompted alike
        command += ["--chat-template", str(chat_template)]
    if max_model_len:  # default: the context length in the model's config
        command += ["--max-model-len", str(max_model_len)]
    if loras:
        command += ["--lora-modules", *[f"{name}={path}" for name, path in loras.items()]]
    return command


def llamacpp_server(model: str | Path, lora: str | Path | None = None, **kwargs) -> ManagedServer:
    reason = llamacpp_unavailable_reason()
    if reason:
        raise BackendUnavailable(reason)
    if not Path(model).is_file():
        raise FileNotFoundError(f"GGUF file {model} does not exist: export one with python -m pipelines.export")
    port = free_port()
    return ManagedServer(LLAMA_CPP, llamacpp_command(model, port, lora, **kwargs), port, "/v1/models",
                         env={"OMP_NUM_THREADS": "1"})


def vllm_server(base: str, loras: dict[str, str | Path], **kwargs) -> ManagedServer:
    reason = vllm_unavailable_reason()
    if reason:
        raise BackendUnavailable(reason)
    port = free_port()
    server = ManagedServer(VLLM, [], port, "/health", startup_timeout_s=900.0,
                           # runtime LoRA updating lets the app hot-load a new checkpoint without a restart
                           env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"})
    first_adapter = next(iter(loras.values()), None)
    template = run_chat_template(first_adapter, server.log_file.with_suffix(".jinja")) if first_adapter else None
    server.command = vllm_command(base, loras, port, chat_template=template, **kwargs)
    return server
