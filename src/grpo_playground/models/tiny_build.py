"""The parts of the embedded `tiny` model: its tokenizer, its architecture and its pretraining text.

Used by `python -m pipelines.build_tiny`; nothing here runs at app time. Heavy imports stay inside functions.

Design (docs/tiny_model.md):
- tokenizer: byte-level BPE trained on generator text, digits one per token (so arithmetic is learnable
  digit by digit), Qwen's chat special tokens, and the four format tags as ORDINARY added tokens: TRL
  decodes completions with skip_special_tokens, so special tags would vanish before any reward sees them.
- pretraining text: chat-rendered conversations whose answers are plain-language solutions ending
  "The answer is N." with NO tags, so the base model does not speak the format until SFT teaches it.
"""

from __future__ import annotations

import random
from typing import Any

from grpo_playground.data.generator import Problem, plain_solution
from grpo_playground.tags import DEFAULT_TAGS, system_prompt

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)

# Qwen's ChatML layout (system/user/assistant turns between im_start and im_end), without tools or thinking.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# System prompts seen in pretraining. The recipe's own prompt is among them, so the base model has read the
# tag names as text but, like the seed's base model, still answers in plain language.
GENERIC_SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "Solve the math word problem step by step.",
    "You are a careful math tutor. Explain each step.",
)

ARCHITECTURE = {
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 1024,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}


def conversation(problem: Problem, rng: random.Random) -> list[dict]:
    """One pretraining conversation: a varied system prompt (or none), the question, the plain solution."""
    choice = rng.randrange(len(GENERIC_SYSTEM_PROMPTS) + 2)
    messages = []
    if choice < len(GENERIC_SYSTEM_PROMPTS):
        messages.append({"role": "system", "content": GENERIC_SYSTEM_PROMPTS[choice]})
    elif choice == len(GENERIC_SYSTEM_PROMPTS):
        messages.append({"role": "system", "content": system_prompt(DEFAULT_TAGS)})
    messages.append({"role": "user", "content": problem.question})
    messages.append({"role": "assistant", "content": plain_solution(problem)})
    return messages


def train_tokenizer(texts: list[str], vocab_size: int) -> Any:
    """A PreTrainedTokenizerFast: byte-level BPE, digits split, ChatML specials, format tags as added tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable, whatever the user types
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=ARCHITECTURE["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    wrapped.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in DEFAULT_TAGS.as_list()])
    return wrapped


def model_config(tokenizer: Any) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(END_OF_TEXT),
        **ARCHITECTURE,
    )
