"""Prove the product's vLLM chat backend on a GPU: start it (grpo_playground.serving.vllm_server) with a LoRA, stream
one reply from the base and one from each adapter through the product's client, hot-load another adapter.

    python -m benchmarks.vllm_chat_proof --base HF_DIR --lora plain=RUN/grpo [--hot-load tagged=RUN/sft] \
        [--out results.json]

Prints what each model answered (with time to first piece and pieces/s) and writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

PROBLEM = "A baker made 24 rolls in the morning and 17 in the afternoon. He sold 30. How many rolls are left?"


def ask(base_url: str, model: str, messages: list[dict]) -> dict:
    from grpo_playground.serving.client import ChatError, stream_chat

    started, first, pieces = time.perf_counter(), None, []
    try:
        for piece in stream_chat(base_url, model, messages, temperature=0.8, top_p=0.95, max_tokens=256, seed=0):
            first = first or time.perf_counter() - started
            pieces.append(piece)
    except ChatError as error:
        return {"model": model, "error": str(error)[:500]}
    seconds = time.perf_counter() - started
    return {"model": model, "reply": "".join(pieces), "pieces": len(pieces), "first_piece_s": round(first or 0, 3),
            "pieces_per_s": round(len(pieces) / seconds, 1), "seconds": round(seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_chat_proof", description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="base model folder (Hugging Face format)")
    parser.add_argument("--lora", action="append", default=[], metavar="NAME=DIR", help="adapter served from the start")
    parser.add_argument("--hot-load", action="append", default=[], metavar="NAME=DIR", help="adapter loaded while running")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.25)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    from grpo_playground.serving.backends import vllm_server
    from grpo_playground.serving.client import ChatError, load_lora
    from grpo_playground.tags import DEFAULT_TAGS, system_prompt

    loras = dict(item.split("=", 1) for item in args.lora)
    server = vllm_server(args.base, loras, gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=2048)
    report = {"command": server.command, "answers": [], "hot_load": []}
    messages = [{"role": "system", "content": system_prompt(DEFAULT_TAGS)}, {"role": "user", "content": PROBLEM}]
    started = time.perf_counter()
    try:
        server.start()
        report["startup_s"] = round(time.perf_counter() - started, 1)
        for model in ["base", *loras]:
            report["answers"].append(ask(server.base_url, model, messages))
        for item in args.hot_load:
            name, path = item.split("=", 1)
            try:
                load_lora(server.base_url, name, path)
                report["hot_load"].append({"name": name, "loaded": True, **ask(server.base_url, name, messages)})
            except ChatError as error:
                report["hot_load"].append({"name": name, "loaded": False, "error": str(error)[:800]})
    except Exception as error:  # the proof records any failure with the server's log tail
        report["error"] = f"{type(error).__name__}: {error}"[:3000]
    finally:
        report["server_log_tail"] = "".join(Path(server.log_file).read_text(errors="replace").splitlines(True)[-40:])
        server.stop()
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0 if "error" not in report and all("reply" in a for a in report["answers"]) else 1


if __name__ == "__main__":
    sys.exit(main())
