"""Checks of an export: does the GGUF behave like the Hugging Face model it came from?

- f16 (and base f16 + LoRA adapter): greedy decoding from the same prompt tokens must give the same tokens
  as HF `generate`; a mismatch is reported with the first differing position and both texts.
- any quantized file: it loads in llama.cpp and answers a chat question (and, for a model trained in the
  format, answers in the format).
"""

from __future__ import annotations

from pathlib import Path

from grpo_playground.tags import DEFAULT_TAGS, Tags, system_prompt

# Fixed prompts: short word problems like the generator's, so a trained model answers in the format.
CHECK_PROMPTS = (
    "Tom has 12 apples and buys 7 more. How many apples does he have now?",
    "A box holds 6 rows of 4 eggs. How many eggs are in the box?",
)


def chat_messages(question: str, tags: Tags = DEFAULT_TAGS) -> list[dict]:
    return [{"role": "system", "content": system_prompt(tags)}, {"role": "user", "content": question}]


def prompt_text(tokenizer, question: str, tags: Tags = DEFAULT_TAGS) -> str:
    """The chat-templated prompt (plain text when the tokenizer has no chat template)."""
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template(chat_messages(question, tags), tokenize=False, add_generation_prompt=True)
    return f"{system_prompt(tags)}\n\n{question}\n"


def stop_ids(model, tokenizer) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return ids | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())


def hf_greedy(model, prompt: list[int], max_new_tokens: int, stops: set[int]) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=sorted(stops) or None,
        )
    return _until_stop(out[0, len(prompt):].tolist(), stops)


def _until_stop(tokens: list[int], stops: set[int]) -> list[int]:
    for i, token in enumerate(tokens):
        if token in stops:
            return tokens[:i]
    return tokens


def open_gguf(path: Path, lora: Path | None = None, n_ctx: int = 2048):
    from llama_cpp import Llama

    return Llama(model_path=str(path), lora_path=str(lora) if lora else None, n_ctx=n_ctx, n_threads=1,
                 n_batch=256, seed=0, verbose=False)


def gguf_greedy(llm, prompt: list[int], max_new_tokens: int, stops: set[int]) -> list[int]:
    llm.reset()
    tokens = []
    for token in llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        if token in stops or len(tokens) >= max_new_tokens:
            break
        tokens.append(token)
    return tokens


def compare_greedy(model, tokenizer, gguf: Path, lora: Path | None = None, tags: Tags = DEFAULT_TAGS,
                   max_new_tokens: int = 24, prompts: tuple[str, ...] = CHECK_PROMPTS) -> dict:
    """Greedy tokens of the HF model vs the GGUF (optionally with a GGUF LoRA) on the fixed prompts."""
    stops = stop_ids(model, tokenizer)
    llm = open_gguf(gguf, lora)
    cases = []
    try:
        for question in prompts:
            text = prompt_text(tokenizer, question, tags)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            # Both sides decode from the HF token ids; the tokenizers are compared separately.
            gguf_prompt = llm.tokenize(text.encode(), add_bos=False, special=True)
            hf_out = hf_greedy(model, ids, max_new_tokens, stops)
            gguf_out = gguf_greedy(llm, ids, max_new_tokens, stops)
            first = next((i for i, (a, b) in enumerate(zip(hf_out, gguf_out)) if a != b), None)
            if first is None and len(hf_out) != len(gguf_out):
                first = min(len(hf_out), len(gguf_out))
            cases.append({
                "prompt": question, "match": first is None, "first_difference": first,
                "tokenizer_match": gguf_prompt == ids, "hf": tokenizer.decode(hf_out), "gguf": tokenizer.decode(gguf_out),
            })
    finally:
        llm.close()
    return {"file": gguf.name, "lora": lora.name if lora else None, "max_new_tokens": max_new_tokens,
            "match": all(c["match"] for c in cases), "cases": cases}


def check_answers(gguf: Path, tags: Tags = DEFAULT_TAGS, max_tokens: int = 64, question: str = CHECK_PROMPTS[0],
                  system: bool = True) -> dict:
    """Load a (quantized) GGUF in llama.cpp and ask one chat question through the GGUF's own chat template;
    system=False sends the user message alone (a run's exported template then supplies the system prompt)."""
    messages = chat_messages(question, tags) if system else [{"role": "user", "content": question}]
    llm = open_gguf(gguf)
    try:
        reply = llm.create_chat_completion(messages, max_tokens=max_tokens, temperature=0.0)
    finally:
        llm.close()
    text = reply["choices"][0]["message"]["content"] or ""
    in_format = tags.solution_start in text and tags.solution_end in text
    return {"file": gguf.name, "question": question, "system_prompt_sent": system, "answer": text,
            "answers": bool(text.strip()), "in_format": in_format}
