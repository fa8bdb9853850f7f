"""Export: LoRA merge, GGUF convert / quantize (llama.cpp's own tools, offline), Ollama Modelfile, hub push.

Importing this package never imports torch: the UI runs `export_command` as a child process
(grpo_playground.jobs.exports.start_export), which calls `export_run`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpo_playground.export.gguf_files import GGUF_TYPES
from grpo_playground.export.pipeline import export_run


def export_command(run_dir: str | Path | None = None, *, model: str | None = None, stage: str | None = None,
                   gguf: list[str] | tuple[str, ...] = ("q4_k_m",), lora_gguf: bool = False,
                   push_to_hub: str | None = None) -> list[str]:
    """The CLI command that exports a run (or a model): what the Training tab runs and shows."""
    command = [sys.executable, "-m", "pipelines.export"]
    command += ["--run", str(run_dir)] if run_dir is not None else ["--model", str(model)]
    if stage:
        command += ["--stage", stage]
    command += ["--gguf", *gguf]
    if lora_gguf:
        command.append("--lora-gguf")
    if push_to_hub:
        command += ["--push-to-hub", push_to_hub]
    return command


__all__ = ["GGUF_TYPES", "export_command", "export_run"]
