"""Export: LoRA merge, GGUF convert / quantize (llama.cpp's own tools, offline), Ollama Modelfile, hub push.

Importing this package never imports torch: the UI runs the export CLI (grpo_playground.cli.args.ExportArgs) as a
child process (grpo_playground.jobs.exports.start_export), which calls `export_run`.
"""

from __future__ import annotations

from grpo_playground.export.gguf_files import GGUF_TYPES
from grpo_playground.export.pipeline import export_run

__all__ = ["GGUF_TYPES", "export_run"]
