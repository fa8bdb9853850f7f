"""An Ollama Modelfile beside the GGUF files: chat template, stop tokens, the recipe's system prompt and
the seed's sampling defaults, so `ollama create NAME -f Modelfile` chats exactly like the app does.

The Go template is derived from the model's own Jinja chat template by rendering marker messages and
cutting the text around the markers; the derived pieces are checked by re-rendering a whole
conversation, and when they do not reproduce it the Modelfile leaves TEMPLATE out (Ollama then uses the
template stored in the GGUF) and says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpo_playground.tags import DEFAULT_TAGS, Tags, system_prompt

# The seed's inference settings (recipe.md): temperature 0.8, top_p 0.95, max_tokens 2048.
SAMPLING_DEFAULTS = {"temperature": 0.8, "top_p": 0.95, "num_predict": 2048}
_MARK = {"system": "\x11SYSTEM\x11", "user": "\x11USER\x11", "assistant": "\x11ASSISTANT\x11", "user2": "\x11USER2\x11"}


@dataclass(frozen=True)
class TemplatePieces:
    system: tuple[str, str]  # text before and after a system message's content
    user: tuple[str, str]
    assistant: tuple[str, str]
    generation: str  # what the template appends to ask for the assistant's reply (may prefill a tag)

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        text = "".join(getattr(self, m["role"])[0] + m["content"] + getattr(self, m["role"])[1] for m in messages)
        return text + (self.generation if add_generation_prompt else "")

    def go_template(self) -> str:
        def q(text: str) -> str:  # Go template string literal, so newlines and quotes survive exactly
            return '{{ "' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '" }}'

        return (
            "{{- range .Messages }}"
            + "".join(
                f'{{{{- {"if" if i == 0 else "else if"} eq .Role "{role}" }}}}{q(before)}{{{{ .Content }}}}{q(after)}'
                for i, (role, (before, after)) in enumerate(
                    (("system", self.system), ("user", self.user), ("assistant", self.assistant))
                )
            )
            + "{{- end }}{{- end }}"
            + q(self.generation)
        )


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def template_pieces(tokenizer) -> TemplatePieces:
    """Cut the tokenizer's chat template into per-role prefix/suffix strings; ValueError when it cannot.

    A conversation system, user, assistant, user is rendered with marker contents; the text between markers
    holds "end of one turn + start of the next". Templates whose turns all end with the same marker (ChatML:
    SmolLM2, Qwen2/3, our tiny) split cleanly; others (system prompt folded into the first user turn...) do not.
    """
    msg = lambda role, key=None: {"role": role, "content": _MARK[key or role]}  # noqa: E731
    probe = [msg("system"), msg("user"), msg("assistant"), msg("user", "user2")]
    text = _render(tokenizer, probe, False)
    gaps = []
    for key in ("system", "user", "assistant", "user2"):
        before, found, text = text.partition(_MARK[key])
        if not found or _MARK[key] in text:
            raise ValueError("the chat template drops or repeats message content")
        gaps.append(before)
    start, system_to_user, user_to_assistant, assistant_to_user, end = gaps + [text]
    if not end or not all(gap.startswith(end) for gap in (system_to_user, user_to_assistant, assistant_to_user)):
        raise ValueError("the turns do not all end with the same marker")
    if system_to_user != assistant_to_user:
        raise ValueError("the first user turn is opened differently from later ones")
    short = [msg("system"), msg("user")]
    without, with_prompt = _render(tokenizer, short, False), _render(tokenizer, short, True)
    if not with_prompt.startswith(without):
        raise ValueError("the generation prompt rewrites the conversation")
    pieces = TemplatePieces((start, end), (system_to_user[len(end):], end), (user_to_assistant[len(end):], end),
                            with_prompt[len(without):])
    if pieces.render(probe) != _render(tokenizer, probe, True):
        raise ValueError("the derived pieces do not reproduce a whole conversation")
    return pieces


def stop_tokens(tokenizer, pieces: TemplatePieces | None) -> list[str]:
    """Strings that end an assistant turn: the eos token and the markers that open or close a turn."""
    stops = [tokenizer.eos_token] if tokenizer.eos_token else []
    if pieces:
        stops += [pieces.assistant[1].strip(), pieces.user[0].strip()]
    return [s for i, s in enumerate(stops) if s and s not in stops[:i]]


def write_modelfile(out_dir: Path, gguf_file: Path, tokenizer, tags: Tags = DEFAULT_TAGS, adapter: Path | None = None) -> dict:
    """Write `Modelfile` in out_dir (FROM the given GGUF, relative); returns what was written and any caveat."""
    try:
        pieces, note = template_pieces(tokenizer), ""
    except (ValueError, TypeError) as error:  # no template, or one that cannot be split into turns
        pieces, note = None, f"TEMPLATE left out ({error}): Ollama uses the chat template stored in the GGUF"
    lines = [f"FROM ./{gguf_file.name}"]
    if adapter is not None:
        lines.append(f"ADAPTER ./{adapter.name}")
    if pieces:
        lines.append(f'TEMPLATE """{pieces.go_template()}"""')
    lines.append(f'SYSTEM """{system_prompt(tags)}"""')
    lines += [f"PARAMETER {key} {value}" for key, value in SAMPLING_DEFAULTS.items()]
    stops = stop_tokens(tokenizer, pieces)
    lines += [f'PARAMETER stop "{stop}"' for stop in stops]
    path = out_dir / "Modelfile"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"path": str(path), "from": gguf_file.name, "template": bool(pieces), "stop": stops, "note": note}
