"""Generation backends for evaluation: rendered prompt strings in, completion texts out.

Every backend receives prompts already rendered by grpo_playground.data.chat_template, so all of them see the
same text the model was trained on. A backend is any class with `generate(prompts, max_new_tokens)` returning
`Generation`s (eval.generation), registered in BACKENDS; transformers runs everywhere (CPU or GPU). llama.cpp (GGUF)
and vLLM (base + LoRA on a GPU) are in eval.engine_backends; importing any of them is torch-free.
"""

from __future__ import annotations

from grpo_playground.eval.engine_backends import LlamaCppBackend, VllmBackend
from grpo_playground.eval.generation import Backend, Generation, end_of_turn_ids


class TransformersBackend:
    """Batched greedy decoding with `model.generate` and left padding (prompts end where generation starts)."""

    name = "transformers"

    def __init__(self, model: str, device: str | None = None, dtype: str | None = None):
        from grpo_playground.models import load_model_and_tokenizer

        self.model, self.tokenizer = load_model_and_tokenizer(model, dtype=dtype, device=device, trainable=False)
        self.model.eval()
        self.tokenizer.padding_side = "left"
        config_eos = self.model.generation_config.eos_token_id
        eos = set(config_eos if isinstance(config_eos, list) else [config_eos]) | end_of_turn_ids(self.tokenizer)
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


BACKENDS = {"transformers": TransformersBackend, "llama.cpp": LlamaCppBackend, "vllm": VllmBackend}


def make_backend(name: str, model: str, device: str | None = None, dtype: str | None = None, **options) -> Backend:
    """options: what one backend takes beyond these (vLLM: `family`, the checkpoints to evaluate next)."""
    if name not in BACKENDS:
        raise ValueError(f"eval backend {name!r} is not available: use one of {', '.join(BACKENDS)}")
    return BACKENDS[name](model, device=device, dtype=dtype, **options)
