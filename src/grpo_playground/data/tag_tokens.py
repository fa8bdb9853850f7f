"""How the four format tags tokenize, and registering them as single ordinary added tokens.

The seed's model wrote `solution`, `SOL`, ... instead of `<SOLUTION>`: a tag split into several pieces is
something the model must learn to spell. The report uses the `tokenizers` package only (no torch), so the UI
can show it; `register_tags` runs in the training process and takes a transformers model and tokenizer.

Tags are added as ordinary (NOT special) tokens: TRL decodes completions with skip_special_tokens=True, so a
special tag vanishes from the text before any reward function sees it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from grpo_playground.tags import DEFAULT_TAGS, Tags


@dataclass
class TagTokens:
    role: str  # reasoning_start, reasoning_end, solution_start, solution_end
    tag: str
    n_tokens: int
    pieces: list[str]  # each token decoded on its own
    ids: list[int]
    special: bool  # registered as a special token: skip_special_tokens would erase it

    @property
    def verdict(self) -> str:
        if self.special:
            return "SPECIAL token: TRL's skip_special_tokens erases it before the rewards see it; re-register as ordinary"
        if self.n_tokens == 1:
            return "one token"
        return f"{self.n_tokens} tokens: the model must learn to spell it (register it, or SFT first)"

    def to_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


def _backend(tokenizer):
    """A `tokenizers.Tokenizer` for either a raw one or a transformers fast tokenizer."""
    return getattr(tokenizer, "backend_tokenizer", tokenizer)


def tag_token_report(tokenizer, tags: Tags = DEFAULT_TAGS) -> list[TagTokens]:
    """Tokens of each tag in `tokenizer` (a `tokenizers.Tokenizer` or a transformers fast tokenizer)."""
    backend = _backend(tokenizer)
    special = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
    report = []
    for role, tag in tags.to_dict().items():
        ids = backend.encode(tag, add_special_tokens=False).ids
        pieces = [backend.decode([i], skip_special_tokens=False) for i in ids]
        report.append(TagTokens(role, tag, len(ids), pieces, ids, tag in special))
    return report


def format_report(report: list[TagTokens]) -> str:
    """Plain-text table, one line per tag."""
    return "\n".join(f"{t.tag:<24} {t.n_tokens:>2}  {' | '.join(map(repr, t.pieces))}  -> {t.verdict}" for t in report)


@dataclass
class RegisteredTags:
    new_ids: list[int]  # ids of the tags added now (empty when all were single tokens already)
    vocab_size: int
    embedding_modules: list[str]  # module names holding rows of the new ids: input, and output when untied

    def peft_kwargs(self) -> dict:
        """LoraConfig arguments that make the new rows trainable. PEFT's trainable_token_indices trains and saves
        only these rows (modules_to_save would save whole vocab-sized matrices). A tied output layer follows
        the input embedding by itself; an untied one (Qwen3-8B) must be listed too, or the model could read
        the tags but never learn to write them."""
        if not self.new_ids:
            return {}
        return {"trainable_token_indices": {name: list(self.new_ids) for name in self.embedding_modules}}


def fit_embeddings(model, tokenizer) -> None:
    """Grow the embedding matrix to the tokenizer's length, never shrink it: Qwen3 pads its matrix past the
    vocabulary (151,936 rows for 151,669 tokens), new tag ids may already have (untrained) rows, and vLLM, which
    loads the base as saved, samples ids from every row (shrunk, the policy's forward indexed past its end)."""
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)


def register_tags(model, tokenizer, tags: Tags = DEFAULT_TAGS) -> RegisteredTags:
    """Add each multi-token tag to `tokenizer` as one ordinary added token, resize `model`'s embeddings, and start
    each new row at the mean of the rows of the pieces it replaces (a start the model already understands)."""
    import torch
    from tokenizers import AddedToken

    before = {t.tag: t for t in tag_token_report(tokenizer, tags)}
    modules = {id(m): name.rsplit(".", 1)[-1] for name, m in model.named_modules()}
    input_emb, output_emb = model.get_input_embeddings(), model.get_output_embeddings()
    tied = output_emb is None or output_emb.weight.data_ptr() == input_emb.weight.data_ptr()
    embedding_modules = [modules[id(input_emb)]] + ([] if tied else [modules[id(output_emb)]])
    specials = [t.tag for t in before.values() if t.special]
    if specials:
        raise ValueError(
            f"tags {specials} are SPECIAL tokens in this tokenizer: completions decoded with skip_special_tokens "
            "lose them. Use other tag strings, or a tokenizer where they are ordinary tokens."
        )
    to_add = [tag for tag, t in before.items() if t.n_tokens != 1]
    if to_add:
        tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in to_add])
        fit_embeddings(model, tokenizer)
        with torch.no_grad():
            matrices = [model.get_input_embeddings().weight]
            if not tied:
                matrices.append(model.get_output_embeddings().weight)
            for tag in to_add:
                new_id = tokenizer.convert_tokens_to_ids(tag)
                for weight in matrices:
                    weight[new_id] = weight[before[tag].ids].mean(dim=0)
    after = tag_token_report(tokenizer, tags)
    broken = [t.tag for t in after if t.n_tokens != 1]
    if broken:
        raise RuntimeError(f"tags {broken} still split after registration: the tokenizer ignored the added tokens")
    new_ids = [t.ids[0] for t in after if t.tag in to_add]
    return RegisteredTags(new_ids, len(tokenizer), embedding_modules)
