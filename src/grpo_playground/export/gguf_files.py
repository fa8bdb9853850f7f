"""Writing GGUF files: the merged model at f16, requantized copies (q8_0, q4_k_m ...) and a LoRA adapter.

Quantization goes through llama.cpp's own `llama_model_quantize` (the llama_cpp bindings), so q4_k_m is
exactly what `llama-quantize` writes; nothing here downloads llama.cpp (Unsloth's exporter does).
"""

from __future__ import annotations

from pathlib import Path

from grpo_playground.contracts.layout import CONVERTER_GGUF_TYPES as CONVERTER_TYPES
from grpo_playground.contracts.layout import GGUF_TYPES, QUANT_GGUF_TYPES
from grpo_playground.export.converters import convert_lora, convert_model

# The converter writes CONVERTER_TYPES directly; the rest are made from the f16 file by llama.cpp's quantizer,
# each under its llama_cpp file-type constant.
QUANT_TYPES = {name: f"LLAMA_FTYPE_MOSTLY_{name.upper()}" for name in QUANT_GGUF_TYPES}


def check_types(types: list[str] | tuple[str, ...]) -> list[str]:
    """Normalised, de-duplicated GGUF types; a clear error for an unknown one."""
    wanted = []
    for name in types:
        key = str(name).strip().lower()
        if key not in GGUF_TYPES:
            raise ValueError(f"unknown GGUF type {name!r}: use one of {', '.join(GGUF_TYPES)}")
        if key not in wanted:
            wanted.append(key)
    if not wanted:
        raise ValueError(f"no GGUF type given: use e.g. --gguf q4_k_m (choices: {', '.join(GGUF_TYPES)})")
    return wanted


def quantize(source: Path, target: Path, gguf_type: str, threads: int = 1) -> Path:
    """Requantize a GGUF file (normally the f16 one) with llama.cpp's quantizer."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANT_TYPES[gguf_type])
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params)
    if status != 0 or not target.is_file():
        raise RuntimeError(f"llama.cpp could not quantize {source.name} to {gguf_type} (status {status})")
    return target


def write_model_ggufs(hf_dir: Path, out_dir: Path, name: str, types: list[str], log: Path | None = None) -> dict[str, Path]:
    """GGUF files of a HF model directory, one per type; the f16 file is always written (it is the
    reference for the greedy check and the source of every quantized type)."""
    files = {"f16": convert_model(hf_dir, out_dir / f"{name}.f16.gguf", "f16", log)}
    for gguf_type in types:
        if gguf_type in files:
            continue
        target = out_dir / f"{name}.{gguf_type}.gguf"
        if gguf_type in CONVERTER_TYPES:
            files[gguf_type] = convert_model(hf_dir, target, gguf_type, log)
        else:
            files[gguf_type] = quantize(files["f16"], target, gguf_type)
    return files


def write_lora_gguf(adapter_dir: Path, base_hf_dir: Path, out_file: Path, log: Path | None = None) -> Path:
    return convert_lora(adapter_dir, base_hf_dir, out_file, "f16", log)
