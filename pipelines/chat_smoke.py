"""Start a chat backend through the app's own serving code, stream one reply per checkpoint, print a table.
The command that proves a backend on a new machine (the vLLM one on a GPU):

    python -m pipelines.chat_smoke --backend llama.cpp --model exports/tiny/tiny.q8_0.gguf
    python -m pipelines.chat_smoke --backend llama.cpp --model RUN/export/sft/NAME.base.f16.gguf --lora RUN/export/sft/NAME.lora.gguf
    python -m pipelines.chat_smoke --backend vllm --model BASE_DIR_OR_HUB_ID --lora runs/RUN/sft --lora runs/RUN/grpo

With vLLM the first adapter is given at start-up and the others are hot-loaded into the running server
(no restart, no merge). Exit code 1 when a reply is empty or the backend cannot run here (it says why).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from grpo_playground.export.verify import CHECK_PROMPTS, chat_messages
    from grpo_playground.serving import (CHAT_BACKENDS, LLAMA_CPP, BackendUnavailable, ChatError, ChatTarget, ServerFailed,
                                         ServerPool, stream_chat)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=CHAT_BACKENDS, required=True)
    parser.add_argument("--model", required=True, help="GGUF file (llama.cpp) or base model dir / hub id (vLLM)")
    parser.add_argument("--lora", action="append", default=[], help="GGUF adapter (llama.cpp, one) or LoRA dirs (vLLM)")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    if args.backend == LLAMA_CPP and len(args.lora) > 1:
        parser.error("llama.cpp takes one GGUF adapter per server")

    # llama.cpp: the file with its one adapter; vLLM: the base alone, then each adapter on the same server
    loras = (args.lora[:1] or [None]) if args.backend == LLAMA_CPP else [None, *args.lora]
    pool = ServerPool()
    rows = []
    try:
        for lora in loras:
            target = ChatTarget(args.backend, args.model, lora)
            started = time.monotonic()
            server, name, _ = pool.server_for(target)
            reply = "".join(stream_chat(server.base_url, name, chat_messages(CHECK_PROMPTS[0]), temperature=0.0,
                                        max_tokens=args.max_tokens))
            rows.append({"model": name, "lora": lora, "seconds": round(time.monotonic() - started, 1), "reply": reply})
            print(json.dumps(rows[-1]), flush=True)
    except (BackendUnavailable, ServerFailed, ChatError, FileNotFoundError, ValueError) as error:
        print(f"chat smoke failed: {error}", file=sys.stderr)
        return 1
    finally:
        pool.stop_all()
    print(f"{'model':<12} {'seconds':>8}  reply")
    for row in rows:
        print(f"{row['model']:<12} {row['seconds']:>8}  {row['reply'][:80]!r}")
    return 0 if all(row["reply"].strip() for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
