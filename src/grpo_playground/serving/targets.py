"""What the chat can talk to: registry GGUF models, GGUF exports (in exports/ and runs/*/export/) for
llama.cpp, and run LoRA folders (+ registry base models) for vLLM. Found by scanning the disk, no torch.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from grpo_playground.contracts.layout import ADAPTER_CONFIG, EXPORT_DIR, LORA_GGUF_SUFFIX, base_gguf_of
from grpo_playground.run_layout import exports_dir, runs_dir
from grpo_playground.serving.backends import LLAMA_CPP, VLLM

MAX_FILES = 500  # a bound on the scan, so a huge folder cannot stall the UI
CONVERTED_KEY = re.compile(r"-[0-9a-f]{12}$")  # models.loading's converted folders: NAME-<12 hex digits>
RUN_ID_PARTS = re.compile(r"^\d{4}(\d{2})(\d{2})-(\d{2})(\d{2})\d{2}-(.+)-[0-9a-f]{4}$")  # run_layout.new_run_id's


@dataclass(frozen=True)
class ChatTarget:
    backend: str  # LLAMA_CPP or VLLM
    model: str  # GGUF file (llama.cpp) or base model dir / hub id (vLLM)
    lora: str | None = None  # GGUF adapter (llama.cpp) or PEFT adapter dir (vLLM)
    label: str = ""

    @property
    def key(self) -> str:
        """Stable id used as the dropdown value and in the chat API: the backend and a digest of the files, so the
        page never shows where the app and its runs are installed."""
        digest = hashlib.sha256(f"{self.model}|{self.lora or ''}".encode()).hexdigest()[:16]
        return f"{self.backend}|{digest}"


def _registry_targets() -> list[ChatTarget]:
    from grpo_playground.models import MODELS, gguf_path
    from grpo_playground.models.registry import hub_unusable

    found = []
    for name, spec in MODELS.items():
        if spec.source == "gguf" and "llamacpp" in spec.supports:
            try:
                found.append(ChatTarget(LLAMA_CPP, str(gguf_path(spec)), None, f"llama.cpp · {name}"))
            except FileNotFoundError:
                continue  # its package is not installed: nothing to offer
        if spec.source in ("hub", "local") and "vllm" in spec.supports:
            if hub_unusable(spec):
                continue  # an offline Space cannot download it: listing it would only fail at Send
            found.append(ChatTarget(VLLM, spec.location, None, f"vLLM · {name}"))
    return found


def run_name(run_id: str) -> tuple[str, str]:
    """A run as a person names it, and when it was made: ("quick", "12-01 09:30") for 20261201-093012-quick-ab12
    (run_layout.new_run_id's form); (the id, "") otherwise."""
    parts = RUN_ID_PARTS.match(run_id)
    return (parts[5], f"{parts[1]}-{parts[2]} {parts[3]}:{parts[4]}") if parts else (run_id, "")


def _label(backend: str, *words: str, date: str = "") -> str:
    """`BACKEND · RUN · STAGE · QUANT (DATE)`: the quantization before the date, where a narrow dropdown shows it."""
    return " · ".join([backend, *(w for w in words if w)]) + (f" ({date})" if date else "")


def _gguf_label(path: Path, folder: Path, in_runs: bool) -> str:
    """runs/RUN/export/STAGE/NAME.QUANT.gguf -> llama.cpp · RUN · STAGE · QUANT (DATE); any other file ->
    llama.cpp · NAME · QUANT."""
    stem, _, quant = path.name.removesuffix(".gguf").partition(".")
    quant = {"lora": "f16 + GGUF LoRA"}.get(quant, quant)
    parts = path.relative_to(folder).parts
    if in_runs and len(parts) == 4 and parts[1] == EXPORT_DIR:
        name, date = run_name(parts[0])
        return _label(LLAMA_CPP, name, parts[2], quant, date=date)
    return _label(LLAMA_CPP, stem, quant)


def _gguf_targets(folder: Path, in_runs: bool) -> list[ChatTarget]:
    found = []
    for i, path in enumerate(sorted(folder.rglob("*.gguf"))):
        if i >= MAX_FILES:
            break
        if path.name.endswith(LORA_GGUF_SUFFIX):
            base = path.with_name(base_gguf_of(path.name))
            if base.is_file():
                found.append(ChatTarget(LLAMA_CPP, str(base), str(path), _gguf_label(path, folder, in_runs)))
            continue
        found.append(ChatTarget(LLAMA_CPP, str(path), None, _gguf_label(path, folder, in_runs)))
    return found


def _adapter_targets(runs: Path) -> list[ChatTarget]:
    found = []
    for config in sorted(runs.glob(f"*/*/{ADAPTER_CONFIG}"))[:MAX_FILES]:
        try:
            base = json.loads(config.read_text()).get("base_model_name_or_path")
        except (OSError, ValueError):
            continue  # a half-written adapter: skip until the stage finishes
        if base:
            name, date = run_name(config.parent.parent.name)
            base_name = CONVERTED_KEY.sub("", Path(base).name)  # a GGUF model's cache folder: its name, not its key
            found.append(ChatTarget(VLLM, base, str(config.parent),
                                    _label("vLLM", name, config.parent.name, f"LoRA on {base_name}", date=date)))
    return found


def discover_targets() -> list[ChatTarget]:
    """Every chat target on this machine, llama.cpp first; labels are unique."""
    runs, exports = runs_dir(), exports_dir()
    targets = _registry_targets()
    if exports.is_dir():
        targets += _gguf_targets(exports, in_runs=False)
    targets += _gguf_targets(runs, in_runs=True) + _adapter_targets(runs)
    unique: dict[str, ChatTarget] = {}
    for target in sorted(targets, key=lambda t: (t.backend != LLAMA_CPP, t.label)):
        unique.setdefault(target.key, target)
    labels = [t.label for t in unique.values()]
    # two files that read alike (same name in two folders): the path tells them apart
    return [replace(t, label=f"{t.label} [{t.lora or t.model}]") if labels.count(t.label) > 1 else t
            for t in unique.values()]
