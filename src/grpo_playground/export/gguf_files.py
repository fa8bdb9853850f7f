"""Writing GGUF files: the merged model at f16, requantized copies (q8_0, q4_k_m ...) and a LoRA adapter.

Quantization goes through llama.cpp's own `llama_model_quantize` (the llama_cpp bindings), so q4_k_m is
exactly what `llama-quantize` writes; nothing here downloads llama.cpp (Unsloth's exporter does).
"""

from __future__ import annotations

from pathlib import Path

from grpo_playground.contracts.layout import CONVERTER_GGUF_TYPES as CONVERTER_TYPES
from grpo_playground.contracts.layout import GGUF_TYPES, QUANT_GGUF_TYPES
from grpo_playground.export.converters import model_job

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


def model_gguf_jobs(hf_dir: Path, out_dir: Path, name: str, types: list[str]) -> tuple[dict[str, Path], list[list[str]]]:
    """The GGUF files the converter writes for a HF model directory (f16 always: the reference for the greedy
    check and the source of every quantized type; the CONVERTER_TYPES asked for) and its jobs for them."""
    files = {"f16": out_dir / f"{name}.f16.gguf"}
    files.update({t: out_dir / f"{name}.{t}.gguf" for t in types if t in CONVERTER_TYPES})
    return files, [model_job(hf_dir, path, t) for t, path in files.items()]


def quantize_types(files: dict[str, Path], out_dir: Path, name: str, types: list[str]) -> None:
    """Adds to `files` the types the converter does not write, quantized from the f16 file once it exists."""
    for gguf_type in types:
        if gguf_type not in files:
            files[gguf_type] = quantize(files["f16"], out_dir / f"{name}.{gguf_type}.gguf", gguf_type)
