"""What the chat can talk to: registry GGUF models, GGUF exports (in exports/ and runs/*/export/) for
llama.cpp, and run LoRA folders (+ registry base models) for vLLM. Found by scanning the disk, no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from grpo_playground.run_layout import ADAPTER_CONFIG, LORA_GGUF_SUFFIX, base_gguf_of, exports_dir, runs_dir
from grpo_playground.serving.backends import LLAMA_CPP, VLLM

MAX_FILES = 500  # a bound on the scan, so a huge folder cannot stall the UI


@dataclass(frozen=True)
class ChatTarget:
    backend: str  # LLAMA_CPP or VLLM
    model: str  # GGUF file (llama.cpp) or base model dir / hub id (vLLM)
    lora: str | None = None  # GGUF adapter (llama.cpp) or PEFT adapter dir (vLLM)
    label: str = ""

    @property
    def key(self) -> str:
        """Stable id used as the dropdown value and in the chat API."""
        return f"{self.backend}|{self.model}|{self.lora or ''}"


def _registry_targets() -> list[ChatTarget]:
    from grpo_playground.models import MODELS, gguf_path

    found = []
    for name, spec in MODELS.items():
        if spec.source == "gguf" and "llamacpp" in spec.supports:
            try:
                found.append(ChatTarget(LLAMA_CPP, str(gguf_path(spec)), None, f"llama.cpp · {name}"))
            except FileNotFoundError:
                continue  # its package is not installed: nothing to offer
        if spec.source in ("hub", "local") and "vllm" in spec.supports:
            found.append(ChatTarget(VLLM, spec.location, None, f"vLLM · {name}"))
    return found


def _gguf_targets(folder: Path, root: Path) -> list[ChatTarget]:
    found = []
    for i, path in enumerate(sorted(folder.rglob("*.gguf"))):
        if i >= MAX_FILES:
            break
        name = str(path.relative_to(root))
        if path.name.endswith(LORA_GGUF_SUFFIX):
            base = path.with_name(base_gguf_of(path.name))
            if base.is_file():
                found.append(ChatTarget(LLAMA_CPP, str(base), str(path), f"llama.cpp · {name} (base f16 + GGUF LoRA)"))
            continue
        found.append(ChatTarget(LLAMA_CPP, str(path), None, f"llama.cpp · {name}"))
    return found


def _adapter_targets(runs: Path) -> list[ChatTarget]:
    found = []
    for config in sorted(runs.glob(f"*/*/{ADAPTER_CONFIG}"))[:MAX_FILES]:
        try:
            base = json.loads(config.read_text()).get("base_model_name_or_path")
        except (OSError, ValueError):
            continue  # a half-written adapter: skip until the stage finishes
        if base:
            found.append(ChatTarget(VLLM, base, str(config.parent),
                                    f"vLLM · {config.parent.parent.name}/{config.parent.name} (LoRA on {Path(base).name})"))
    return found


def discover_targets() -> list[ChatTarget]:
    """Every chat target on this machine, llama.cpp first; labels are unique."""
    runs, exports = runs_dir(), exports_dir()
    targets = _registry_targets()
    if exports.is_dir():
        targets += _gguf_targets(exports, exports.parent)
    targets += _gguf_targets(runs, runs.parent) + _adapter_targets(runs)
    unique = {}
    for target in sorted(targets, key=lambda t: (t.backend != LLAMA_CPP, t.label)):
        unique.setdefault(target.key, target)
    return list(unique.values())
