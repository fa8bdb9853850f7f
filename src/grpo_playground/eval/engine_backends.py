"""Evaluation backends on the chat engines (llama.cpp, vLLM), listed in grpo_playground.eval.backends.BACKENDS.

- `llama.cpp`: a GGUF file (an export, a registry GGUF model such as smollm2-135m, or an export's
  `NAME.lora.gguf`, run on its `NAME.base.f16.gguf`), greedy, in the eval's own child process.
- `vllm`: a base model or a run's LoRA folder (served unmerged through a LoRARequest), batched, GPU only.
Prompts arrive already rendered by the HF tokenizer's chat template (the eval runner does that), so every
backend decodes from exactly the text the model was trained on. Heavy imports happen inside methods.
"""

from __future__ import annotations

import os
from pathlib import Path

from grpo_playground.contracts.layout import EXPORT_MERGED_DIR, LORA_GGUF_SUFFIX, base_gguf_of
from grpo_playground.eval.generation import Generation, end_of_turn_ids
from grpo_playground.gpu_share import engine_start
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
    if path.name.endswith(LORA_GGUF_SUFFIX):
        lora, path = path, path.with_name(base_gguf_of(path.name))
        if not path.is_file():
            raise FileNotFoundError(f"{lora.name} needs its base model {path.name} beside it: re-export with --lora-gguf")
    merged = path.parent / EXPORT_MERGED_DIR  # pipelines.export keeps the HF tokenizer there
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

    def generate(self, prompts: list[str], max_new_tokens: int) -> list[Generation]:
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


EVAL_ROWS, EVAL_TOKENS = 64, 2048  # sequences decoded at once and their length, for the KV-cache share


def eval_memory_share(model_dir) -> float:
    import torch

    from grpo_playground.vllm_memory import memory_share, read_config, shape_from_config

    return memory_share(shape_from_config(read_config(model_dir)), EVAL_ROWS, EVAL_TOKENS,
                        torch.cuda.get_device_properties(0).total_memory)


def _vllm_checkpoint(model: str):
    """(the checkpoint's spec, its base model's spec), refusing an adapter vLLM cannot load (with the fix)."""
    from grpo_playground.models import resolve_model
    from grpo_playground.serving.backends import vllm_adapter_problem

    spec = resolve_model(model)
    problem = vllm_adapter_problem(spec.location) if spec.source == "adapter" else None
    if problem:
        raise ValueError(problem)
    return spec, (spec.base if spec.source == "adapter" else spec)


class VllmBackend:
    """Batched greedy decoding in vLLM; a LoRA folder is applied per request on the unmerged base. Decodes from
    the same token ids and stops at the same end-of-turn tokens as the transformers backend."""

    name = "vllm"
    schedules_batches = True  # given every prompt at once, vLLM batches them itself (faster than our chunks)

    def __init__(self, model: str, device: str | None = None, dtype: str | None = None, family: tuple[str, ...] = ()):
        """`family`: other checkpoints to evaluate next on the same engine (`switch_to`): their adapters size the
        engine's LoRA slots, so base, SFT and GRPO of one run pay for one engine start, not three."""
        from grpo_playground.models import hf_dir, load_tokenizer
        from grpo_playground.serving.backends import lora_rank, vllm_env, vllm_max_lora_rank

        reason = vllm_unavailable_reason()
        if reason:
            raise BackendUnavailable(reason)
        spec, base = _vllm_checkpoint(model)
        self.base_dir = hf_dir(base)
        checkpoints = list(map(_vllm_checkpoint, (model, *family)))
        adapters = [s.location for s, b in checkpoints if s.source == "adapter" and hf_dir(b) == self.base_dir]
        for key, value in vllm_env().items():  # read by vLLM at import and by its engine process
            os.environ.setdefault(key, value)
        if all(hf_dir(b) == self.base_dir for _, b in checkpoints):
            # the only engine this evaluation starts: in this process, as TRL's colocated one, not in a spawned
            # engine process that imports torch and vLLM again (~20 s of the 40.8-s engine start on the H200).
            # An evaluation of several bases keeps one process per engine, which frees its memory when it ends.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.tokenizer = load_tokenizer(spec)
        self.stop_ids = sorted(end_of_turn_ids(self.tokenizer))
        self.lora_ids: dict[str, int] = {}
        self.lora = self._request(spec)
        self.max_lora_rank = vllm_max_lora_rank(max(lora_rank(a) for a in adapters)) if adapters else 0
        # bfloat16 as the transformers backend uses on a GPU (the converted SmolLM2 folder says float32); a memory
        # share sized from the model, not a fixed 0.7: on the H200 a fixed 0.7 failed when another engine held memory.
        # Eager: an evaluation is one batch, and torch.compile + CUDA-graph capture took the engine start past 105 s
        # on the H200 (results/gpu/h200_chat/eval_speed_vllm.vllm.log) for a generation of a few seconds.
        with engine_start(f"the evaluation of {Path(model).name}", print):  # alone on the GPU while it sizes itself
            self.llm = LLM(model=str(self.base_dir), dtype=dtype or "bfloat16", enable_lora=bool(adapters),
                           max_lora_rank=self.max_lora_rank or 8, seed=0, enforce_eager=True,
                           gpu_memory_utilization=eval_memory_share(self.base_dir))

    def _request(self, spec):
        """The LoRARequest for an adapter checkpoint (one id per adapter folder), None for the base itself."""
        from vllm.lora.request import LoRARequest

        if spec.source != "adapter":
            return None
        lora_id = self.lora_ids.setdefault(str(spec.location), len(self.lora_ids) + 1)
        return LoRARequest(f"adapter-{lora_id}", lora_id, str(spec.location))

    def switch_to(self, model: str) -> bool:
        """Evaluate `model` next on this engine when it is this base or an adapter on it; False: it needs its own."""
        from grpo_playground.models import hf_dir, load_tokenizer
        from grpo_playground.serving.backends import lora_rank

        spec, base = _vllm_checkpoint(model)
        if hf_dir(base) != self.base_dir or (spec.source == "adapter" and lora_rank(spec.location) > self.max_lora_rank):
            return False
        self.lora = self._request(spec)
        self.tokenizer = load_tokenizer(spec)  # a run's tokenizer carries its own chat template
        self.stop_ids = sorted(end_of_turn_ids(self.tokenizer))
        return True

    def generate(self, prompts: list[str], max_new_tokens: int) -> list[Generation]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=self.stop_ids)
        # token ids, not text: the rendered template holds any BOS it wants (vLLM would add one to a text prompt)
        ids = [{"prompt_token_ids": self.tokenizer.encode(p, add_special_tokens=False)} for p in prompts]
        outputs = self.llm.generate(ids, params, lora_request=self.lora, use_tqdm=False)
        return [Generation(o.outputs[0].text, len(o.outputs[0].token_ids), o.outputs[0].finish_reason == "length")
                for o in outputs]
