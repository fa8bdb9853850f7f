"""Loading a registry model as a trainable Hugging Face causal LM (torch imported inside functions only).

GGUF models are dequantized once into a cache directory (env GRPO_PLAYGROUND_CACHE, default
~/.cache/grpo_playground) so training, export and vLLM all see an ordinary HF folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from grpo_playground.models.registry import ModelSpec, gguf_path, hub_offline, offline_hint, resolve_model


def cache_dir() -> Path:
    return Path(os.environ.get("GRPO_PLAYGROUND_CACHE") or Path.home() / ".cache" / "grpo_playground")


CONVERSION_VERSION = 2  # bump when convert_gguf writes something different, so caches convert again


def _converted_dir(spec: ModelSpec, gguf: Path) -> Path:
    # Keyed by the file's identity, so a changed file (new package version) converts again.
    stat = gguf.stat()
    identity = f"{CONVERSION_VERSION}:{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:12]
    label = spec.name if "/" not in spec.name else gguf.stem
    return cache_dir() / "models" / f"{label}-{key}"


def convert_gguf(spec: ModelSpec) -> Path:
    """Dequantize a GGUF model into a trainable HF directory in the cache (done once; later calls reuse it)."""
    gguf = gguf_path(spec)
    target = _converted_dir(spec, gguf)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One conversion at a time per target: a second job (or a training and an export started together) waits for
    # the first one's folder instead of spending the same half-minute of CPU on a copy it then throws away.
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:
            pass  # a mount without locks (some network filesystems): convert unlocked; the rename settles a race
        if (target / "config.json").is_file():
            return target
        _dequantize(gguf, target)
    return target


def _dequantize(gguf: Path, target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The dequantized weights are plain floats: without this the saved config claims a GGUF quantization
    # that from_pretrained would then try (and fail) to undo.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # transformers' GGUF tokenizer reader takes the wrong end-of-sequence token (SmolLM2: <|im_start|>
    # instead of <|im_end|>); the model config has the GGUF's real ids, so the tokenizer follows them.
    for role in ("bos", "eos"):
        token_id = getattr(model.config, f"{role}_token_id", None)
        if isinstance(token_id, int):
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))
    # Write to a temp folder and rename, so a killed conversion never leaves a half-written model behind.
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(target)
    except OSError:
        if not (target / "config.json").is_file():  # an unlocked conversion elsewhere may have won the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def hf_dir(name_or_spec: str | ModelSpec) -> Path:
    """The local Hugging Face directory of a model (converted or downloaded when needed), e.g. for export."""
    spec = resolve_model(name_or_spec)
    if spec.source == "local":
        path = Path(spec.location)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"model {spec.name!r}: {path} has no config.json; for `tiny` rebuild it with `python -m pipelines.build_tiny`"
            )
        return path
    if spec.source == "gguf":
        return convert_gguf(spec)
    if spec.source == "hub":
        from huggingface_hub import snapshot_download

        try:
            return Path(snapshot_download(spec.location, local_files_only=hub_offline()))
        except Exception as error:  # the hub client raises many types (offline, 404, gated, network)
            raise RuntimeError(
                f"could not get {spec.location!r} from the Hugging Face Hub ({type(error).__name__}: {error}); "
                f"{offline_hint()}"
            ) from error
    raise ValueError(
        f"{spec.name} is a PEFT adapter, not a full model: load it with load_model_and_tokenizer, or merge it "
        "(export) to get a standalone directory"
    )


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_tokenizer(name_or_spec: str | ModelSpec) -> Any:
    """The model's tokenizer with a pad token set (an adapter folder's own tokenizer wins when it has one)."""
    from transformers import AutoTokenizer

    spec = resolve_model(name_or_spec)
    folder = Path(spec.location) if spec.source == "adapter" and _has_tokenizer(Path(spec.location)) else None
    tokenizer = AutoTokenizer.from_pretrained(folder or hf_dir(spec.base if spec.source == "adapter" else spec))
    if tokenizer.pad_token is None:
        # Padding is masked out everywhere; reusing eos avoids resizing the embeddings.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer_config.json").is_file()


def load_model_and_tokenizer(
    name_or_spec: str | ModelSpec, dtype: Any = None, device: str | None = None, trainable: bool = True
) -> tuple[Any, Any]:
    """A Hugging Face causal LM (a PEFT model for an adapter folder) and its tokenizer, pad token set.

    dtype: a torch dtype or its name ("float32", "bfloat16"); default float32 on CPU, bfloat16 on CUDA.
    device: "cpu", "cuda", "cuda:1"...; default CUDA when available.
    """
    import torch
    from transformers import AutoModelForCausalLM

    spec = resolve_model(name_or_spec)
    device = device or _default_device()
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"dtype {dtype!r} is not a torch dtype: use float32, bfloat16 or float16")
        dtype = getattr(torch, dtype)
    dtype = dtype or (torch.float32 if device == "cpu" else torch.bfloat16)

    base = spec.base if spec.source == "adapter" else spec
    model = AutoModelForCausalLM.from_pretrained(hf_dir(base), dtype=dtype)
    tokenizer = load_tokenizer(spec)
    if spec.source == "adapter":
        from peft import PeftModel

        from grpo_playground.data.tag_tokens import fit_embeddings

        # Training may have added the format tags to the tokenizer and grown the embeddings to match
        # (data.tag_tokens): the base needs as many rows before the adapter's weights fit.
        fit_embeddings(model, tokenizer)
        model = PeftModel.from_pretrained(model, spec.location, is_trainable=trainable)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        raise ValueError(
            f"tokenizer of {spec.name!r} has {len(tokenizer)} tokens but the model only {model.get_input_embeddings().weight.shape[0]} "
            "embeddings: the tokenizer and weights come from different models"
        )
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.to(device), tokenizer
