"""Evaluation backends on the chat engines, plugged into grpo_playground.eval's BACKENDS seam.

- `llama.cpp`: a GGUF file (an export, a registry GGUF model such as smollm2-135m, or an export's
  `NAME.lora.gguf`, run on its `NAME.base.f16.gguf`), greedy, in the eval's own child process.
- `vllm`: a base model or a run's LoRA folder (served unmerged through a LoRARequest), batched, GPU only.
Prompts arrive already rendered by the HF tokenizer's chat template (the eval runner does that), so every
backend decodes from exactly the text the model was trained on. Heavy imports happen inside methods.
"""

from __future__ import annotations

from pathlib import Path

from grpo_playground.serving.backends import vllm_unavailable_reason
from grpo_playground.serving.process import BackendUnavailable


def _gguf_and_tokenizer_source(model: str) -> tuple[Path, Path | None, str]:
    """(GGUF file, GGUF LoRA or None, what load_tokenizer should read) for an eval `model` string."""
    from grpo_playground.models import MODELS, gguf_path

    if model in MODELS:
        return gguf_path(MODELS[model]), None, model
    path = Path(model)
    if not path.is_file() or path.suffix != ".gguf":
        raise ValueError(f"llama.cpp eval needs a .gguf file or a GGUF registry model, got {model!r}: "
                         "export the run first (python -m pipelines.export --run RUN_DIR --gguf q4_k_m)")
    lora = None
    if path.name.endswith(".lora.gguf"):
        lora, path = path, path.with_name(path.name.replace(".lora.gguf", ".base.f16.gguf"))
        if not path.is_file():
            raise FileNotFoundError(f"{lora.name} needs its base model {path.name} beside it: re-export with --lora-gguf")
    merged = path.parent / "merged"  # pipelines.export keeps the HF tokenizer there
    if not (merged / "tokenizer_config.json").is_file():
        raise FileNotFoundError(f"no HF tokenizer beside {path.name} (expected {merged}): eval renders prompts with "
                                "the HF chat template, so evaluate a file written by pipelines.export")
    return path, lora, str(merged)


class LlamaCppBackend:
    """Greedy decoding of a GGUF file in llama.cpp, one prompt at a time (CPU or GPU offload)."""

    name = "llama.cpp"

    def __init__(self, model: str, device: str | None = None, dtype: str | None = None):
        from llama_cpp import Llama

        from grpo_playground.models import load_tokenizer
        from grpo_playground.serving.backends import nvidia_gpu_present

        gguf, lora, tokenizer_source = _gguf_and_tokenizer_source(model)
        self.tokenizer = load_tokenizer(tokenizer_source)
        gpu_layers = -1 if device != "cpu" and nvidia_gpu_present() else 0
        self.llm = Llama(model_path=str(gguf), lora_path=str(lora) if lora else None, n_ctx=4096, n_threads=1,
                         n_gpu_layers=gpu_layers, seed=0, verbose=False)

    def generate(self, prompts: list[str], max_new_tokens: int) -> list:
        from grpo_playground.eval.backends import Generation

        generations = []
        for prompt in prompts:
            tokens = self.llm.tokenize(prompt.encode(), add_bos=False, special=True)
            out = self.llm.create_completion(tokens, max_tokens=max_new_tokens, temperature=0.0, top_k=1,
                                             repeat_penalty=1.0)
            choice, used = out["choices"][0], out["usage"]["completion_tokens"]
            generations.append(Generation(choice["text"], used, choice["finish_reason"] == "length"))
        return generations

    def close(self) -> None:
        self.llm.close()


class VllmBackend:
    """Batched greedy decoding in vLLM; a LoRA folder is applied per request on the unmerged base."""

    name = "vllm"

    def __init__(self, model: str, device: str | None = None, dtype: str | None = None):
        reason = vllm_unavailable_reason()
        if reason:
            raise BackendUnavailable(reason)
        from vllm import LLM
        from vllm.lora.request import LoRARequest

        from grpo_playground.models import load_tokenizer, resolve_model
        from grpo_playground.serving.backends import VLLM_LORA_RANKS, lora_rank

        spec = resolve_model(model)
        self.tokenizer = load_tokenizer(spec)
        base = spec.base if spec.source == "adapter" else spec
        self.lora = LoRARequest("adapter", 1, spec.location) if spec.source == "adapter" else None
        rank = lora_rank(spec.location) if self.lora else 8
        self.llm = LLM(model=base.location, dtype=dtype or "auto", enable_lora=self.lora is not None,
                       max_lora_rank=next(r for r in VLLM_LORA_RANKS if r >= rank), gpu_memory_utilization=0.7, seed=0)

    def generate(self, prompts: list[str], max_new_tokens: int) -> list:
        from vllm import SamplingParams

        from grpo_playground.eval.backends import Generation

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
        outputs = self.llm.generate(prompts, params, lora_request=self.lora)
        return [Generation(o.outputs[0].text, len(o.outputs[0].token_ids), o.outputs[0].finish_reason == "length")
                for o in outputs]
