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


def _split(text: str, marker: str) -> tuple[str, str]:
    before, found, after = text.partition(marker)
    if not found:
        raise ValueError("the chat template drops message content")
    return before, after


def template_pieces(tokenizer) -> TemplatePieces:
    """Cut the tokenizer's chat template into per-role prefix/suffix strings; ValueError when it cannot."""
    msg = lambda role, key=None: {"role": role, "content": _MARK[key or role]}  # noqa: E731
    su = _render(tokenizer, [msg("system"), msg("user")], False)
    sug = _render(tokenizer, [msg("system"), msg("user")], True)
    sua = _render(tokenizer, [msg("system"), msg("user"), msg("assistant")], False)
    suau = _render(tokenizer, [msg("system"), msg("user"), msg("assistant"), msg("user", "user2")], False)
    if not (sug.startswith(su) and sua.startswith(su) and suau.startswith(sua)):
        raise ValueError("the chat template rewrites earlier turns when a turn is added")
    user = _split(suau[len(sua):], _MARK["user2"])
    assistant = _split(sua[len(su):], _MARK["assistant"])
    system_and_user = su[: len(su) - len(user[0] + _MARK["user"] + user[1])]
    if not su.endswith(user[0] + _MARK["user"] + user[1]):
        raise ValueError("the first user turn is rendered differently from later ones")
    pieces = TemplatePieces(_split(system_and_user, _MARK["system"]), user, assistant, sug[len(su):])
    probe = [msg("system"), msg("user"), msg("assistant"), msg("user", "user2")]
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
