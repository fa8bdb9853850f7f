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

from grpo_playground.child_process import free_port
from grpo_playground.run_layout import run_settings
from grpo_playground.serving.process import BackendUnavailable, ManagedServer

LLAMA_CPP = "llama.cpp"
VLLM = "vllm"
CHAT_BACKENDS = (LLAMA_CPP, VLLM)
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


def adapter_config(adapter_dir: str | Path) -> dict:
    try:
        return json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{adapter_dir} is not a PEFT LoRA folder (adapter_config.json unreadable: {error})") from error


def lora_rank(adapter_dir: str | Path) -> int:
    return int(adapter_config(adapter_dir).get("r", 8))


def vllm_adapter_problem(adapter_dir: str | Path) -> str | None:
    """Why vLLM cannot serve this PEFT folder as a LoRA, naming the fix; None when it can.

    An adapter trained with registered tag tokens (data.register_tags) carries a grown embedding (PEFT
    trainable_token_indices, or whole modules_to_save): vLLM applies only low-rank deltas to the base's own
    vocabulary, so it cannot load those rows (and the new token ids lie outside the base's embedding)."""
    config = adapter_config(adapter_dir)
    grown = config.get("trainable_token_indices") or config.get("modules_to_save")
    if not grown:
        return None
    return (f"vLLM cannot serve the LoRA in {adapter_dir}: it was trained with registered tag tokens (a grown "
            f"embedding: {'trainable_token_indices' if config.get('trainable_token_indices') else 'modules_to_save'}"
            f" {json.dumps(grown)[:120]}), which vLLM's LoRA support does not load. Fix: export the merged model "
            "(python -m pipelines.export --run RUN_DIR) and serve its merged/ folder as the base (or chat with its "
            "GGUF through llama.cpp), or train with data.register_tags: false for vLLM.")


def run_chat_template(adapter_dir: str | Path, out_file: Path) -> Path | None:
    """For vLLM: the adapter's chat template as its run is served (data.chat_template.run_template: the run's
    system prompt when a conversation has none, the prefill of the opening reasoning tag), written to out_file;
    None when the adapter has no run recipe or no template."""
    from grpo_playground.data.chat_template import run_template

    adapter_dir = Path(adapter_dir)
    settings = run_settings(adapter_dir)
    if settings is None:
        return None
    template = (adapter_dir / "chat_template.jinja").read_text() if (adapter_dir / "chat_template.jinja").is_file() else None
    if template is None and (adapter_dir / "tokenizer_config.json").is_file():
        template = json.loads((adapter_dir / "tokenizer_config.json").read_text()).get("chat_template")
    if not isinstance(template, str):
        return None
    out_file.write_text(run_template(template, settings.tags, settings.prefill_reasoning), encoding="utf-8")
    return out_file


def vllm_env() -> dict[str, str]:
    """Environment for a vLLM server or engine: runtime LoRA loading (the app hot-loads new checkpoints), and
    vLLM's PyTorch sampler where FlashInfer is not installed (its FlashInfer sampler would fail to import)."""
    env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    if importlib.util.find_spec("flashinfer") is None:
        env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    return env


def vllm_command(base: str, loras: dict[str, str | Path], port: int, gpu_memory_utilization: float = 0.7,
                 max_model_len: int | None = None, base_name: str = "base", chat_template: Path | None = None,
                 extra_args: tuple[str, ...] = ()) -> list[str]:
    """`vllm serve BASE --enable-lora --lora-modules name=PATH ...` run by this Python (no `vllm` script needed):
    each adapter is served by name, on top of the unmerged base weights; more can be hot-loaded later (see
    client.load_lora). ValueError for an adapter vLLM cannot serve, naming the fix."""
    for name, path in loras.items():
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"LoRA name {name!r}: use letters, digits, - and _ only")
        problem = vllm_adapter_problem(path)
        if problem:
            raise ValueError(problem)
    rank = max([lora_rank(path) for path in loras.values()] + [64])
    max_rank = next((r for r in VLLM_LORA_RANKS if r >= rank), None)
    if max_rank is None:
        raise ValueError(f"LoRA rank {rank} is above vLLM's maximum {VLLM_LORA_RANKS[-1]}")
    command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(base), "--host", "127.0.0.1",
               "--port", str(port), "--served-model-name", base_name,
               "--gpu-memory-utilization", str(gpu_memory_utilization), "--enable-lora", "--max-lora-rank", str(max_rank)]
    if chat_template:  # one template per server: the base and every adapter are prompted alike
        command += ["--chat-template", str(chat_template)]
    if max_model_len:  # default: the context length in the model's config
        command += ["--max-model-len", str(max_model_len)]
    if loras:
        command += ["--lora-modules", *[f"{name}={path}" for name, path in loras.items()]]
    return command + list(extra_args)


def llamacpp_server(model: str | Path, lora: str | Path | None = None, **kwargs) -> ManagedServer:
    reason = llamacpp_unavailable_reason()
    if reason:
        raise BackendUnavailable(reason)
    if not Path(model).is_file():
        raise FileNotFoundError(f"GGUF file {model} does not exist: export one with python -m pipelines.export")
    port = free_port()
    return ManagedServer(LLAMA_CPP, llamacpp_command(model, port, lora, **kwargs), port, "/v1/models",
                         env={"OMP_NUM_THREADS": "1"})


def vllm_server(base: str, loras: dict[str, str | Path], log_file: Path | None = None, **kwargs) -> ManagedServer:
    """A vLLM server (not started) for `base` + `loras`; log_file keeps its whole log (default: a temp file)."""
    reason = vllm_unavailable_reason()
    if reason:
        raise BackendUnavailable(reason)
    port = free_port()
    server = ManagedServer(VLLM, [], port, "/health", startup_timeout_s=900.0, env=vllm_env(),
                           keep_secrets=("HF_TOKEN",),  # a gated or private base may still need downloading
                           **({"log_file": Path(log_file)} if log_file else {}))
    first_adapter = next(iter(loras.values()), None)
    template = run_chat_template(first_adapter, server.log_file.with_suffix(".jinja")) if first_adapter else None
    server.command = vllm_command(base, loras, port, chat_template=template, **kwargs)
    return server
