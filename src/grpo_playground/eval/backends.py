"""Generation backends for evaluation: rendered prompt strings in, completion texts out.

Every backend receives prompts already rendered by grpo_playground.data.chat_template, so all of them see the
same text the model was trained on. A backend is any class with `generate(prompts, max_new_tokens)` returning
`Generation`s, registered in BACKENDS; transformers runs everywhere (CPU or GPU). llama.cpp (GGUF) and vLLM
(base + LoRA on a GPU) plug in here through the serving module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from grpo_playground.data.chat_template import turn_end


@dataclass
class Generation:
    text: str  # decoded with skip_special_tokens, as TRL hands completions to the rewards
    n_tokens: int  # generated tokens up to and including the end-of-turn token
    truncated: bool  # hit max_new_tokens before ending the turn


class Backend(Protocol):
    name: str
    tokenizer: object  # a transformers tokenizer: renders the chat template

    def generate(self, prompts: list[str], max_new_tokens: int) -> list[Generation]: ...


class TransformersBackend:
    """Batched greedy decoding with `model.generate` and left padding (prompts end where generation starts)."""

    name = "transformers"

    def __init__(self, model: str, device: str | None = None, dtype: str | None = None):
        from grpo_playground.models import load_model_and_tokenizer

        self.model, self.tokenizer = load_model_and_tokenizer(model, dtype=dtype, device=device, trainable=False)
        self.model.eval()
        self.tokenizer.padding_side = "left"
        # Stop at the end of the assistant turn as the chat template writes it (some GGUF conversions name
        # another token as eos, e.g. SmolLM2's <|im_start|>), or at any eos the model's config lists.
        config_eos = self.model.generation_config.eos_token_id
        eos = set(config_eos if isinstance(config_eos, list) else [config_eos]) | {self.tokenizer.eos_token_id}
        end_ids = self.tokenizer.encode(turn_end(self.tokenizer), add_special_tokens=False)
        if len(end_ids) == 1:
            eos |= set(end_ids)
        self.eos_ids = sorted(i for i in eos if i is not None)

    def generate(self, prompts: list[str], max_new_tokens: int) -> list[Generation]:
        import torch

        # The rendered template already holds any BOS it wants: adding special tokens again would double it.
        batch = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        with torch.inference_mode():
            out = self.model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                eos_token_id=self.eos_ids,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        generations = []
        for row in out[:, batch["input_ids"].shape[1] :].tolist():
            end = next((i for i, token in enumerate(row) if token in self.eos_ids), None)
            ids = row if end is None else row[: end + 1]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            generations.append(Generation(text, len(ids), end is None and len(ids) >= max_new_tokens))
        return generations


# llama.cpp (GGUF) and vLLM (base + LoRA, GPU) live with the chat servers; importing them is torch-free.
from grpo_playground.serving.eval_backends import LlamaCppBackend, VllmBackend  # noqa: E402

BACKENDS = {"transformers": TransformersBackend, "llama.cpp": LlamaCppBackend, "vllm": VllmBackend}


def make_backend(name: str, model: str, device: str | None = None, dtype: str | None = None) -> Backend:
    if name not in BACKENDS:
        raise ValueError(f"eval backend {name!r} is not available: use one of {', '.join(BACKENDS)}")
    return BACKENDS[name](model, device=device, dtype=dtype)
