"""The two chat backends: llama.cpp (GGUF files, CPU or GPU) and vLLM (base model + LoRA adapters, GPU).

Each builds the command line of an OpenAI-compatible server and says plainly when it cannot run here.
No model is imported in this module: the UI process uses it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

from grpo_playground.child_process import free_port
from grpo_playground.config.run_settings import run_settings
from grpo_playground.serving.process import BackendUnavailable, ManagedServer

LLAMA_CPP = "llama.cpp"
VLLM = "vllm"
CHAT_BACKENDS = (LLAMA_CPP, VLLM)
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM accepts for --max-lora-rank
# A chat server's shape: the batch sizes chat makes (3 panes per question, a few visitors at once; 8 concurrent
# chats is the benchmark) and the context a chat needs (the Chat tab's max tokens is 8192 at most).
CHAT_MAX_SEQS = 16
CHAT_CAPTURE_SIZES = (1, 2, 4, 8, 16)
CHAT_MAX_LORAS = 3  # the side-by-side view's three panes, each its own adapter of one base, in one batch
CHAT_MAX_MODEL_LEN = 8192
CHAT_TOKENS_PER_SEQ = 2048  # the KV cache holds CHAT_MAX_SEQS chats this long (blocks are shared: one may be longer)
CHAT_STREAM_INTERVAL = 2  # tokens per streamed event (fewer events at high rates; the tab redraws every 0.1 s)
COMPILE_CACHES = {"VLLM_CACHE_ROOT": "vllm", "TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor"}
# (marker in a vLLM server's log, what it does from then on): the Chat tab shows it while a server starts
VLLM_STAGES = (
    ("non-default args", "reading the model's config"),
    ("Initializing a V1 LLM engine", "starting the engine"),
    ("Starting to load model", "loading the weights"),
    ("Using cache directory", "compiling the model (torch.compile; cached for the next start)"),
    ("Directly load", "loading the compiled model from the cache"),
    ("Initial profiling/warmup run", "measuring memory"),
    ("Capturing CUDA graphs", "capturing CUDA graphs"),
    ("Graph capturing finished", "reserving the KV cache"),
    ("Starting vLLM server on", "starting the HTTP server"),
)
LLAMACPP_STAGES = (("llama_model_load", "loading the model"), ("Uvicorn running", "starting the HTTP server"))


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


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds a LoRA of `rank` (it refuses e.g. 12 or 24)."""
    fitting = [r for r in VLLM_LORA_RANKS if r >= rank]
    if not fitting:
        raise ValueError(f"LoRA rank {rank} is above vLLM's maximum {VLLM_LORA_RANKS[-1]}: lower lora.r")
    return fitting[0]


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


def compile_cache_env() -> dict[str, str]:
    """The compile caches (vLLM's torch.compile graphs and model-info, Inductor's and Triton's kernels) in the app's
    cache folder, which scripts/start.sh puts on the Space's persistent data root: one set for every vLLM engine
    the product starts (training rollouts, evaluations, chat servers), so a restarted Space, a resumed job and the
    first chat after training load what an earlier engine compiled or inspected (by default they live under ~ and
    /tmp, which a restart empties; vLLM's model-info inspection alone took 28 s of a fresh chat server's start on
    the H200). Variables already set are kept."""
    from grpo_playground.models.loading import cache_dir

    caches = cache_dir() / "compile"
    return {name: os.environ.get(name) or str(caches / folder) for name, folder in COMPILE_CACHES.items()}


def vllm_env() -> dict[str, str]:
    """Environment for a vLLM server or engine: runtime LoRA loading (the app hot-loads new checkpoints); vLLM's
    PyTorch sampler where FlashInfer is not installed (its FlashInfer sampler would fail to import); and the
    compile caches of compile_cache_env()."""
    env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", **compile_cache_env()}
    if importlib.util.find_spec("flashinfer") is None:
        env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    return env


def vllm_server_env() -> dict[str, str]:
    """vllm_env() for `vllm serve`, which otherwise spawns its engine process (its CLI forces `spawn`): that
    process imported torch and vLLM again, 19-22 s of every start on the H200 (results/gpu/vllm_chat.server.log).
    Forked, it inherits them; vLLM itself falls back to spawn, saying so in the log, if CUDA is already
    initialized in the API server. One GPU, one host: the engine's process group binds to the loopback address
    (no reverse lookup of the machine's address, which an offline machine cannot answer)."""
    return {**vllm_env(), "VLLM_WORKER_MULTIPROC_METHOD": "fork", "VLLM_HOST_IP": "127.0.0.1",
            "TOKENIZERS_PARALLELISM": "false"}  # no tokenizer threads across the fork


def vllm_has_engine_arg(name: str) -> bool:
    """Whether the installed vLLM's engine arguments declare `name`, read from its source (importing vLLM takes
    ~20 s): an option this version lacks is never passed (an unknown flag stops `vllm serve`)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return False
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "engine" / "arg_utils.py").read_text()
    except OSError:
        return False
    return f"\n    {name}:" in text


def base_config(base: str) -> dict | None:
    """A base model's config.json: a local folder's, or a hub id's from the local HF cache (never downloaded)."""
    path = Path(base) / "config.json"
    if not path.is_file() and base.count("/") == 1 and not Path(base).exists():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(base, "config.json")
        except (ImportError, ValueError):
            cached = None
        path = Path(cached) if isinstance(cached, str) else path
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def chat_max_model_len(config: dict | None) -> int | None:
    """CHAT_MAX_MODEL_LEN, or the base's own context length when shorter (vLLM refuses a longer one); None when
    its config is unknown here (vLLM then takes the config's own length)."""
    own = (config or {}).get("max_position_embeddings")
    return min(CHAT_MAX_MODEL_LEN, int(own)) if own else None


def _chat_shape(config: dict | None) -> dict | None:
    """vllm_memory's shape of a base's config; None when it is unknown here or not a llama/qwen-style config."""
    from grpo_playground.vllm_memory import shape_from_config

    try:
        return shape_from_config(config) if config else None
    except KeyError:
        return None


def chat_need_bytes(config: dict | None) -> int | None:
    """The GPU memory a chat server of this base holds (vllm_memory's estimate for CHAT_MAX_SEQS chats of
    CHAT_TOKENS_PER_SEQ tokens); None when its config is unknown here."""
    from grpo_playground.vllm_memory import engine_bytes

    shape = _chat_shape(config)
    return engine_bytes(shape, CHAT_MAX_SEQS, CHAT_TOKENS_PER_SEQ) if shape else None


def chat_kv_cache_bytes(config: dict | None) -> int | None:
    """The KV cache a chat server allocates (the part of chat_need_bytes for CHAT_MAX_SEQS chats), passed to vLLM
    as --kv-cache-memory-bytes: sized by gpu_memory_utilization alone, vLLM measures what the card gained while it
    profiled, so a training job growing beside it left it "-5.39 GiB" of KV cache and it crashed (H200,
    the second Space run in BENCHMARKS.md). None when the config is unknown here."""
    from grpo_playground.vllm_memory import kv_cache_bytes

    shape = _chat_shape(config)
    return kv_cache_bytes(shape, CHAT_MAX_SEQS, CHAT_TOKENS_PER_SEQ) if shape else None


def vllm_command(base: str, loras: dict[str, str | Path], port: int, gpu_memory_utilization: float = 0.7,
                 max_model_len: int | None = None, base_name: str = "base", chat_template: Path | None = None,
                 extra_args: tuple[str, ...] = (), stream_interval: int | None = None,
                 kv_cache_memory_bytes: int | None = None) -> list[str]:
    """`vllm serve BASE --enable-lora --lora-modules name=PATH ...` run by this Python (no `vllm` script needed):
    each adapter is served by name, on top of the unmerged base weights; more can be hot-loaded later (see
    client.load_lora). Shaped for chat: CHAT_MAX_SEQS sequences at once, CUDA graphs captured only for the batch
    sizes chat makes (CHAT_CAPTURE_SIZES; vLLM's default captured 51 sizes x 2 modes up to 512, ~30 s of every
    start on the H200), CHAT_MAX_LORAS adapters in one batch; `stream_interval` tokens per streamed event.
    ValueError for an adapter vLLM cannot serve, naming the fix."""
    for name, path in loras.items():
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"LoRA name {name!r}: use letters, digits, - and _ only")
        problem = vllm_adapter_problem(path)
        if problem:
            raise ValueError(problem)
    max_rank = vllm_max_lora_rank(max([lora_rank(path) for path in loras.values()] + [64]))
    command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(base), "--host", "127.0.0.1",
               "--port", str(port), "--served-model-name", base_name,
               "--gpu-memory-utilization", str(gpu_memory_utilization), "--enable-lora", "--max-lora-rank", str(max_rank),
               "--max-loras", str(CHAT_MAX_LORAS), "--max-num-seqs", str(CHAT_MAX_SEQS),
               "--compilation-config", json.dumps({"cudagraph_capture_sizes": list(CHAT_CAPTURE_SIZES)})]
    if stream_interval and stream_interval > 1:
        command += ["--stream-interval", str(stream_interval)]
    if kv_cache_memory_bytes:  # a fixed KV cache: no memory profiling that counts other processes' growth
        command += ["--kv-cache-memory-bytes", str(kv_cache_memory_bytes)]
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
                         env={"OMP_NUM_THREADS": "1"}, stages=LLAMACPP_STAGES, model=str(model))


def vllm_server(base: str, loras: dict[str, str | Path], log_file: Path | None = None,
                gpu_memory_utilization: float = 0.7, **kwargs) -> ManagedServer:
    """A vLLM chat server (not started) for `base` + `loras`; log_file keeps its whole log (default: a temp file).
    The pool gives it its warm-up (client.warm_up) before starting it."""
    reason = vllm_unavailable_reason()
    if reason:
        raise BackendUnavailable(reason)
    port = free_port()
    server = ManagedServer(VLLM, [], port, "/health", startup_timeout_s=900.0, env=vllm_server_env(),
                           keep_secrets=("HF_TOKEN",),  # a gated or private base may still need downloading
                           stages=VLLM_STAGES, model=str(base), **({"log_file": Path(log_file)} if log_file else {}))
    first_adapter = next(iter(loras.values()), None)
    template = run_chat_template(first_adapter, server.log_file.with_suffix(".jinja")) if first_adapter else None
    config = base_config(base)
    kwargs.setdefault("max_model_len", chat_max_model_len(config))
    kwargs.setdefault("kv_cache_memory_bytes", chat_kv_cache_bytes(config)
                      if vllm_has_engine_arg("kv_cache_memory_bytes") else None)
    kwargs.setdefault("stream_interval", CHAT_STREAM_INTERVAL if vllm_has_engine_arg("stream_interval") else None)
    server.command = vllm_command(base, loras, port, gpu_memory_utilization, chat_template=template, **kwargs)
    return server
