"""Data: sources -> one normalized example form, chat-template rendering, tag tokenization.

Torch-free at import time (the UI imports it); `datasets` / `transformers` are imported inside the functions
that need them.

    from grpo_playground.data import load_examples, to_hf_dataset
    result = load_examples("gsm8k:test.jsonl", n=100)   # LoadResult(examples, skipped, rows_seen)
"""

from grpo_playground.data.examples import LoadResult, format_completion, make_example
from grpo_playground.data.loader import load_examples, to_hf_dataset
from grpo_playground.data.spec import SourceSpec, parse_spec

__all__ = ["LoadResult", "SourceSpec", "format_completion", "load_examples", "make_example", "parse_spec", "to_hf_dataset"]
