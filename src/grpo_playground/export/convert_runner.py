"""Child-process entry that runs llama.cpp's convert scripts, one job after another (called by converters.py only).

    python -m grpo_playground.export.convert_runner CONVERTERS_DIR '[["hf"|"lora", SCRIPT_ARGS...], ...]'

Why a wrapper: a tokenizer trained locally (our `tiny`) has a BPE pre-tokenizer whose hash llama.cpp does
not know, and the script then refuses to convert. Byte-level BPE like ours is what llama.cpp calls
"gpt-2", so unknown hashes fall back to it (with a warning) instead of failing.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

SCRIPTS = {"hf": "convert_hf_to_gguf.py", "lora": "convert_lora_to_gguf.py"}


def _with_gpt2_fallback(original):
    def get_vocab_base_pre(self, tokenizer) -> str:
        try:
            return original(self, tokenizer)
        except NotImplementedError:
            print("grpo-playground: unknown BPE pre-tokenizer, using llama.cpp's 'gpt-2' (byte-level BPE)", file=sys.stderr)
            return "gpt-2"

    return get_vocab_base_pre


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: convert_runner CONVERTERS_DIR JOBS_JSON")
    folder, jobs = Path(sys.argv[1]), json.loads(sys.argv[2])
    sys.path[:0] = [str(folder), str(folder / "gguf-py")]
    from conversion import base  # llama.cpp's converter package, from `folder`

    for cls in vars(base).values():
        if isinstance(cls, type) and "get_vocab_base_pre" in vars(cls):
            cls.get_vocab_base_pre = _with_gpt2_fallback(cls.get_vocab_base_pre)
    for number, (kind, *args) in enumerate(jobs, 1):
        script = folder / SCRIPTS[kind]
        sys.argv = [str(script), *args]
        try:
            runpy.run_path(str(script), run_name="__main__")
        except BaseException as error:
            if isinstance(error, SystemExit) and error.code in (None, 0):
                continue
            print(f"grpo-playground: conversion {number} of {len(jobs)} ({kind} -> "
                  f"{args[args.index('--outfile') + 1]}) failed", file=sys.stderr)
            raise


if __name__ == "__main__":
    main()
