"""llama.cpp's own HF -> GGUF converters, found offline and run in a child process.

PyPI's llama-cpp-python wheel ships no convert scripts, but its sdist holds them (vendor/llama.cpp).
scripts/install.sh extracts `convert_hf_to_gguf.py`, `convert_lora_to_gguf.py`, `conversion/` and `gguf-py/`
into share/grpo-playground/llama.cpp-VERSION inside the venv, so an export never downloads anything. The scripts run in one
child process per export (see convert_runner.py) because they put their own, newer `gguf-py` on sys.path, which must not
shadow the installed `gguf` package that transformers uses to read GGUF files.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

from grpo_playground.child_process import python_child_env

PINNED_VERSION = "0.3.36"  # requirements.txt
CONVERTERS_ENV = "GRPO_PLAYGROUND_LLAMA_CPP_CONVERTERS"


def llama_cpp_version() -> str:
    """The installed llama-cpp-python version: its converters must match its llama.cpp (same GGUF format)."""
    try:
        return importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        return PINNED_VERSION
REQUIRED = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion", "gguf-py")
CONVERT_TIMEOUT_S = 1800


def converters_dir() -> Path:
    """The folder holding llama.cpp's convert scripts (env GRPO_PLAYGROUND_LLAMA_CPP_CONVERTERS, else the venv's)."""
    default = Path(sys.prefix) / "share" / "grpo-playground" / f"llama.cpp-{llama_cpp_version()}"
    folder = Path(os.environ.get(CONVERTERS_ENV) or default)
    missing = [name for name in REQUIRED if not (folder / name).exists()]
    if missing:
        raise FileNotFoundError(
            f"llama.cpp converters not found in {folder} (missing {', '.join(missing)}): run `bash scripts/install.sh`, "
            f"which extracts them from the llama-cpp-python=={llama_cpp_version()} sdist, or set {CONVERTERS_ENV} "
            "to a llama.cpp checkout"
        )
    return folder


def run_conversions(jobs: list[list[str]], log: Path | None = None) -> None:
    """Run convert jobs (model_job / lora_job) one after another in ONE child process: the scripts' imports
    (torch, gguf, llama.cpp's model classes: ~3 s on a CPU) are paid once per export, not once per file."""
    command = [sys.executable, "-m", "grpo_playground.export.convert_runner", str(converters_dir()), json.dumps(jobs)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, env=python_child_env())
    if log is not None:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}\n")
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"llama.cpp conversion failed (exit {result.returncode}):\n{tail}")


def model_job(hf_dir: Path, out_file: Path, outtype: str = "f16") -> list[str]:
    """A Hugging Face model directory -> one GGUF file (outtype f32, f16, bf16 or q8_0)."""
    return ["hf", str(hf_dir), "--outfile", str(out_file), "--outtype", outtype]


def lora_job(adapter_dir: Path, base_dir: Path, out_file: Path, outtype: str = "f16") -> list[str]:
    """A PEFT LoRA adapter directory -> a GGUF LoRA adapter (llama.cpp `--lora` / llama_cpp `lora_path`)."""
    return ["lora", str(adapter_dir), "--base", str(base_dir), "--outfile", str(out_file), "--outtype", outtype]
