"""What every evaluation backend returns, and where all of them stop: the seam between the eval runner and the engines.

A backend is any class with `generate(prompts, max_new_tokens)` returning `Generation`s (eval.backends.BACKENDS lists
them). Prompts arrive rendered by grpo_playground.data.chat_template, so every engine decodes the text the model was
trained on.
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


def end_of_turn_ids(tokenizer) -> set[int]:
    """Token ids that end a reply: the end of the assistant turn as the chat template writes it (some GGUF
    conversions name another token as eos, e.g. SmolLM2's <|im_start|>) and the tokenizer's eos. Every backend
    stops at these (plus any eos its model config lists), so they all cut completions alike."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    end_ids = tokenizer.encode(turn_end(tokenizer), add_special_tokens=False)
    return ids | set(end_ids) if len(end_ids) == 1 else ids
