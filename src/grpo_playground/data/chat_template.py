"""Prompts rendered through the tokenizer's OWN chat template, the same way for SFT, GRPO and evaluation.

The seed's reward sat flat partly because what the model saw at generation time differed from what it was
trained on. Three facts decide that text, and this module makes each one explicit and reportable:
- the generation prompt comes from `apply_chat_template(..., add_generation_prompt=True)`; for Qwen3 it also
  depends on `enable_thinking` (False renders an empty `<think>\\n\\n</think>` block after the assistant header);
- `prefill_reasoning` appends the opening reasoning tag to that prompt, so completions start after it and
  the SFT target must not repeat it;
- rendering a whole conversation (what TRL does with conversational SFT data) may insert text the generation
  prompt lacks (Qwen3 with thinking on inserts `<think>\\n\\n</think>\\n\\n`): `template_report` shows it.
Training and eval therefore use plain strings built here: `prompt` (rendered) and `completion` (target + the
template's own end-of-turn marker), so the trained text is exactly the generation text.
A trained run is served (GGUF export, vLLM) with `run_template`: its template plus the run's system prompt when a
conversation brings none, and the prefill, so any client prompts the model the way training did.

Needs a transformers tokenizer (any object with `apply_chat_template` and `chat_template`); imports nothing heavy.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from grpo_playground.tags import DEFAULT_TAGS, Tags, system_prompt

_PROBE = "PROBE-ANSWER-7391"  # a stand-in assistant reply, unlikely to occur in any template


def _require_template(tokenizer) -> None:
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
        raise ValueError(
            f"tokenizer {name!r} has no chat_template: use an instruct/chat model's tokenizer, or set "
            "tokenizer.chat_template before training (prompts must render the way the model will see them)"
        )


def render_prompt(
    tokenizer, messages: list[dict], tags: Tags = DEFAULT_TAGS, prefill_reasoning: bool = True, enable_thinking: bool = False
) -> str:
    """The exact text before the model's first generated token."""
    _require_template(tokenizer)
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, enable_thinking=enable_thinking
    )
    if prefill_reasoning and not text.rstrip().endswith(tags.reasoning_start):
        text += tags.reasoning_start
    return text


def with_prefill(template: str, tag: str) -> str:
    """A Jinja chat template whose generation prompt ends with `tag`."""
    return template + "{% if add_generation_prompt %}{{ " + json.dumps(tag) + " }}{% endif %}"


def with_default_system(template: str, system: str) -> str:
    """A Jinja chat template that puts `system` first when a conversation has no system message (the seed's
    recipe wrote its system prompt into the template the same way). A conversation's own system message wins.
    Plain Jinja (set, list +): transformers, llama-cpp-python, llama.cpp's server and vLLM all render it."""
    default = "[{'role': 'system', 'content': " + json.dumps(system) + "}]"
    return ("{%- if not messages or messages[0]['role'] != 'system' %}{%- set messages = " + default
            + " + messages %}{%- endif %}" + template)


def generation_prompt(template: str, messages: list[dict]) -> str:
    """What `template` renders for `messages` with add_generation_prompt, in the sandbox transformers uses."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(template).render(messages=messages, add_generation_prompt=True, bos_token="",
                                                    eos_token="", raise_exception=raise_exception)


def run_template(template: str, tags: Tags = DEFAULT_TAGS, prefill_reasoning: bool = True) -> str:
    """The chat template a trained run is served with: the run's system prompt when a conversation has none, and
    (with prefill) the opening reasoning tag after the assistant header, unless the template already writes it."""
    served = with_default_system(template, system_prompt(tags))
    if prefill_reasoning and not generation_prompt(served, [{"role": "user", "content": "q"}]).rstrip().endswith(tags.reasoning_start):
        served = with_prefill(served, tags.reasoning_start)
    return served


def turn_end(tokenizer, enable_thinking: bool = False) -> str:
    """What the template writes after an assistant reply (e.g. '<|im_end|>'): the SFT target must end with it,
    or the model never learns to stop after </SOLUTION>."""
    _require_template(tokenizer)
    full = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": _PROBE}],
        tokenize=False,
        enable_thinking=enable_thinking,
    )
    after = full[full.rindex(_PROBE) + len(_PROBE) :].strip()
    return after or (tokenizer.eos_token or "")


def completion_target(completion: str, tags: Tags = DEFAULT_TAGS, prefill_reasoning: bool = True) -> str:
    """The SFT target after the prompt: with prefill the opening tag is already in the prompt, so drop it."""
    if not prefill_reasoning:
        return completion
    if not completion.startswith(tags.reasoning_start):
        raise ValueError(f"SFT completion does not start with {tags.reasoning_start!r}: {completion[:80]!r}")
    return completion[len(tags.reasoning_start) :]


def render_examples(
    examples: list[dict], tokenizer, tags: Tags = DEFAULT_TAGS, prefill_reasoning: bool = True, enable_thinking: bool = False
) -> list[dict]:
    """Normalized examples -> rows with string `prompt` (and `completion` for SFT rows) for TRL's trainers.

    TRL treats string prompts as already templated, so the model trains and samples on exactly these strings.
    """
    end = turn_end(tokenizer, enable_thinking)
    rows = []
    for example in examples:
        row = {k: v for k, v in example.items() if k not in ("prompt", "completion")}
        row["prompt"] = render_prompt(tokenizer, example["prompt"], tags, prefill_reasoning, enable_thinking)
        if "completion" in example:
            text = completion_target(example["completion"][0]["content"], tags, prefill_reasoning)
            row["completion"] = text + end
        rows.append(row)
    return rows


@dataclass
class TemplateReport:
    prompt: str  # the rendered prompt, as the model sees it
    assistant_prefix: str  # what follows the user's text: end of user turn, assistant header, prefill
    turn_end: str
    prefill_reasoning: bool
    enable_thinking: bool
    supports_thinking: bool  # the template reads `enable_thinking` (Qwen3)
    conversation_inserts: str  # text a full-conversation render puts before the reply that the prompt lacks
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def template_report(
    tokenizer, example: dict, tags: Tags = DEFAULT_TAGS, prefill_reasoning: bool = True, enable_thinking: bool = False
) -> TemplateReport:
    """What the model will see for `example`, and where the template could make training and generation differ."""
    prompt = render_prompt(tokenizer, example["prompt"], tags, prefill_reasoning, enable_thinking)
    user_text = example["prompt"][-1]["content"]
    prefix = prompt[prompt.rindex(user_text) + len(user_text) :] if user_text in prompt else ""
    bare = render_prompt(tokenizer, example["prompt"], tags, False, enable_thinking)
    full = tokenizer.apply_chat_template(
        example["prompt"] + [{"role": "assistant", "content": _PROBE}], tokenize=False, enable_thinking=enable_thinking
    )
    reply_at = full.rindex(_PROBE)
    shared = len(os.path.commonprefix([bare, full[:reply_at]]))
    inserts = full[shared:reply_at]
    supports_thinking = "enable_thinking" in tokenizer.chat_template
    notes = []
    if prefill_reasoning:
        notes.append(
            f"The prompt ends with {tags.reasoning_start!r}: completions start after it, the rewards never see it, "
            "and SFT targets leave it out."
        )
    else:
        notes.append(f"No prefill: the model must write {tags.reasoning_start!r} itself.")
    if supports_thinking:
        state = "on: the model may open its own <think> block" if enable_thinking else "off: an empty <think></think> block is rendered"
        notes.append(f"This template has Qwen3's thinking switch; enable_thinking is {state}.")
    if inserts.strip():
        notes.append(
            f"Rendering a whole conversation inserts {inserts!r} before the reply, which the generation prompt "
            "lacks: train on the rendered prompt strings (render_examples), not on conversational rows."
        )
    if shared < len(bare):
        notes.append(f"A whole-conversation render rewrites the end of the prompt ({bare[shared:]!r} is not kept).")
    if bare.rstrip().endswith(tags.reasoning_start):
        notes.append(f"The template itself already writes {tags.reasoning_start!r}: prefill is not added twice.")
    return TemplateReport(prompt, prefix, turn_end(tokenizer, enable_thinking), prefill_reasoning, enable_thinking,
                          supports_thinking, inserts, notes)
