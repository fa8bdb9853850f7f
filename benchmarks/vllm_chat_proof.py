"""Prove the product's vLLM chat path on a GPU, through grpo_playground.serving exactly as the Chat tab uses it:
`vllm serve` base + LoRA (serving.vllm_server), replies streamed by serving.client.stream_chat, a second adapter
hot-loaded without a restart (client.load_lora), an adapter with registered tag tokens refused with its fix,
first-token latency and tokens/s for 1 and for 8 concurrent chats.

    python -m benchmarks.vllm_chat_proof --out results/gpu/vllm_chat.json [--base HF_DIR] [--lora NAME=DIR ...] \
        [--hot-load NAME=DIR ...]

--base defaults to the SmolLM2-135M-Instruct folder (models.hf_dir). The proof makes its own adapters from the base
with PEFT (random, untrained; no training needed): `plain` (served from the start), `hot` (hot-loaded while the
server runs), `tagged` (the format tags registered as new tokens, as data.register_tags does: a grown embedding);
--lora adds adapters served from the start, --hot-load adapters loaded while running. Writes OUT (JSON) and, beside
it, OUT with the suffix .server.log: the WHOLE server log of every start attempt. When the first start fails, a
second one runs with --enforce-eager (no torch.compile / CUDA graphs), logged the same way. SIGTERM (`timeout`)
stops the server and still writes the JSON. Run it as a file or module, never fed on stdin (vLLM's engine process
re-imports the main module).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from grpo_playground.tags import DEFAULT_TAGS, system_prompt

PROBLEM = "A baker made 24 rolls in the morning and 17 in the afternoon. He sold 30. How many rolls are left?"
LONG_PROBLEM = ("A school has 4 classes of 27 pupils and 3 classes of 31 pupils. Each pupil needs 3 notebooks at "
                "2 dollars each. Explain every step of the working in detail, then give the total cost.")
CHAT_SETTINGS = {"temperature": 0.8, "top_p": 0.95}  # the Chat tab's defaults (the seed's inference settings)
TARGETS = {"first_token_s_max": 0.3, "tokens_per_s_8_chats_min": 2000.0}  # issue 11, SmolLM2-135M on one H200
SERVE_NEEDS = ("prometheus_fastapi_instrumentator", "prometheus_client", "fastapi", "uvicorn")  # modules `vllm serve` imports
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class Interrupted(Exception):
    """SIGTERM arrived (a `timeout` around the proof): stop the server, keep what was measured."""


def make_adapters(base: Path, work: Path) -> dict[str, Path]:
    """Three untrained PEFT LoRA folders on `base`: plain, hot (another seed) and tagged (registered tags)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_playground.data.tag_tokens import register_tags

    made = {}
    for name, seed in (("plain", 0), ("hot", 1), ("tagged", 2)):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(base)
        extra = register_tags(model, tokenizer, DEFAULT_TAGS).peft_kwargs() if name == "tagged" else {}
        config = LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS, init_lora_weights=False, **extra)
        model = get_peft_model(model, config)
        with torch.no_grad():  # random B, scaled down: the reply changes but stays language
            for param_name, param in model.named_parameters():
                if "lora_B" in param_name:
                    param.mul_(0.02)
        made[name] = work / name
        model.save_pretrained(made[name])
        tokenizer.save_pretrained(made[name])
    return made


def named_dirs(items: list[str]) -> dict[str, Path]:
    """NAME=DIR arguments -> {NAME: DIR}."""
    return {name: Path(path) for name, path in (item.split("=", 1) for item in items)}


def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def chat_once(base_url: str, model: str, question: str, tokenizer, max_tokens: int, temperature: float | None = None,
              seed: int = 0) -> dict:
    """One streamed chat through the product's client: reply, first-token latency, tokens/s."""
    from grpo_playground.serving.client import ChatError, stream_chat

    messages = [{"role": "system", "content": system_prompt(DEFAULT_TAGS)}, {"role": "user", "content": question}]
    settings = {**CHAT_SETTINGS, **({"temperature": temperature} if temperature is not None else {})}
    started, first, pieces = time.perf_counter(), None, []
    try:
        for piece in stream_chat(base_url, model, messages, max_tokens=max_tokens, seed=seed, **settings):
            first = first if first is not None else time.perf_counter() - started
            pieces.append(piece)
    except ChatError as error:
        return {"model": model, "error": str(error)[:800]}
    seconds = time.perf_counter() - started
    reply = "".join(pieces)
    tokens = count_tokens(tokenizer, reply)
    decode_s = seconds - (first or 0.0)
    return {"model": model, "reply": reply, "pieces": len(pieces), "tokens": tokens,
            "first_token_s": round(first or 0.0, 4), "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 1) if seconds else None,
            "decode_tokens_per_s": round((tokens - 1) / decode_s, 1) if tokens > 1 and decode_s > 0 else None}


def chats(base_url: str, model: str, tokenizer, concurrent: int, max_tokens: int, rounds: int = 3) -> dict:
    """`rounds` rounds of `concurrent` chats started together (threads, as several Chat tab users): first-token
    latency of every chat, and tokens/s in total (all tokens over the rounds' wall time).

    One untimed round first: vLLM JIT-compiles its top-k/top-p sampling kernel for each new batch shape (on the H200
    the first 8-chat batch waited 3.4 s for `_topk_topp_kernel`, results/gpu/h200_chat/vllm_chat.server.log)."""
    with ThreadPoolExecutor(concurrent) as pool:
        list(pool.map(lambda i: chat_once(base_url, model, PROBLEM, tokenizer, 8, seed=i), range(concurrent)))
    runs, wall = [], 0.0
    for round_ in range(rounds):
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrent) as pool:
            runs += list(pool.map(lambda i: chat_once(base_url, model, LONG_PROBLEM, tokenizer, max_tokens,
                                                      seed=round_ * concurrent + i), range(concurrent)))
        wall += time.perf_counter() - started
    done = [r for r in runs if "error" not in r]
    tokens = sum(r["tokens"] for r in done)
    firsts = [r["first_token_s"] for r in done]
    return {"model": model, "concurrent": concurrent, "rounds": rounds, "max_tokens": max_tokens, "ok": len(done),
            "failed": len(runs) - len(done), "wall_s": round(wall, 3), "tokens": tokens,
            "tokens_per_s": round(tokens / wall, 1),
            "first_token_s_median": round(statistics.median(firsts), 4) if firsts else None,
            "first_token_s_max": round(max(firsts), 4) if firsts else None,
            "per_chat_tokens_per_s_median": round(statistics.median(r["tokens_per_s"] for r in done), 1) if done else None,
            "errors": [r["error"] for r in runs if "error" in r][:2]}


def served_models(base_url: str) -> list[str]:
    return [m["id"] for m in httpx.get(f"{base_url}/v1/models", timeout=10).json().get("data", [])]


def gpu_snapshot() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.used,memory.total,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi failed: {error}"


def versions() -> dict:
    found = {}
    for package in ("vllm", "torch", "transformers", "peft", "prometheus-fastapi-instrumentator"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def start_server(base: Path, loras: dict[str, Path], log_file: Path, args, report: dict):
    """The product's server, started; a failed start is logged and retried once with --enforce-eager."""
    from grpo_playground.serving.backends import vllm_server
    from grpo_playground.serving.process import ServerFailed

    for extra in ((), ("--enforce-eager",)):
        server = vllm_server(str(base), loras, log_file=log_file, gpu_memory_utilization=args.gpu_memory_utilization,
                             max_model_len=2048, extra_args=extra)
        server.startup_timeout_s = args.startup_timeout_s  # a hung start must not eat the GPU session
        attempt = {"command": server.command, "extra_args": list(extra)}
        report["starts"].append(attempt)
        started = time.perf_counter()
        try:
            server.start()
            attempt["startup_s"] = round(time.perf_counter() - started, 1)
            return server
        except ServerFailed as error:
            attempt["error"] = str(error)[-3000:]
            attempt["seconds"] = round(time.perf_counter() - started, 1)
            server.stop()
        except BaseException:  # interrupted while starting: never leave a server holding the GPU
            server.stop()
            raise
    return None


def prove(args, report: dict, log_file: Path, deadline: float) -> None:
    from transformers import AutoTokenizer

    from grpo_playground.serving.backends import vllm_adapter_problem, vllm_server
    from grpo_playground.serving.client import ChatError, load_lora

    base = Path(args.base) if args.base else None
    if base is None:
        from grpo_playground.models import hf_dir

        base = hf_dir("smollm2-135m")
    report["base"] = str(base)
    tokenizer = AutoTokenizer.from_pretrained(base)
    made = make_adapters(base, args.work)
    adapters = {"plain": made["plain"], "tagged": made["tagged"], **named_dirs(args.lora)}
    hot = {"hot": made["hot"], **named_dirs(args.hot_load)}
    report["adapters"] = {name: str(path) for name, path in {**adapters, **hot}.items()}

    # The Chat tab's path refuses an adapter vLLM cannot serve before starting anything, naming the fix.
    try:
        vllm_server(str(base), adapters, log_file=log_file)
        report["refused"] = {}
    except ValueError as error:
        report["refused_message"] = str(error)
        report["refused"] = {name: vllm_adapter_problem(path) for name, path in adapters.items() if vllm_adapter_problem(path)}
    loras = {name: path for name, path in adapters.items() if name not in report["refused"]}
    missing = [name for name in SERVE_NEEDS if importlib.util.find_spec(name) is None]
    if missing:  # `vllm serve` would fail after importing everything else; say it before spending GPU time
        report["error"] = (f"`vllm serve` imports {missing}, not installed here: pip install them (vLLM's own dependencies; "
                           "a carried vLLM bundle can lack them)")
        return
    report["gpu_before"] = gpu_snapshot()

    server = start_server(base, loras, log_file, args, report)
    if server is None:
        report["error"] = "the vLLM server did not start (both attempts): see starts[] and the whole log"
        return
    try:
        url = server.base_url
        report["server_pid"] = server.process.pid
        report["served_at_start"] = served_models(url)
        chat_once(url, "base", "Warm up.", tokenizer, 8)  # first request pays one-off costs (sampler, graphs)
        report["answers"] = [chat_once(url, model, PROBLEM, tokenizer, args.max_tokens, temperature=0.0)
                             for model in ["base", *loras]]
        replies = {a["model"]: a.get("reply") for a in report["answers"]}
        report["adapter_changes_reply"] = {name: replies.get(name) != replies.get("base") for name in loras}

        for name, path in hot.items():  # a second adapter, loaded into the running server
            started = time.perf_counter()
            try:
                load_lora(url, name, str(path))
                entry = {"name": name, "loaded": True, "load_s": round(time.perf_counter() - started, 2),
                         "listed": name in served_models(url), **chat_once(url, name, PROBLEM, tokenizer, args.max_tokens, 0.0)}
            except ChatError as error:
                entry = {"name": name, "loaded": False, "error": str(error)[:800]}
            entry["no_restart"] = server.process is not None and server.process.pid == report["server_pid"]
            report.setdefault("hot_load", []).append(entry)
        for name in report["refused"]:  # the product's client refuses it too, before vLLM sees it
            try:
                load_lora(url, name, str(adapters[name]))
                report.setdefault("client_refusal", {})[name] = "NOT refused: loaded"
            except ChatError as error:
                report.setdefault("client_refusal", {})[name] = str(error)

        chat_model = next(iter(loras), "base")
        report["throughput"] = [chats(url, chat_model, tokenizer, n, args.chat_tokens) for n in (1, 8)]
        for n in (1, 8):  # the base alone, when time is left: what the LoRA path costs
            if chat_model != "base" and time.monotonic() < deadline:
                report["throughput"].append(chats(url, "base", tokenizer, n, args.chat_tokens))
        # Last, what vLLM itself says to the refused adapter (bypassing the product's check), and whether it
        # survives: evidence for the refusal. Last because it could take the server down.
        for name in report["refused"]:
            if time.monotonic() > deadline:
                break
            try:
                response = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": f"raw-{name}",
                                      "lora_path": str(adapters[name])}, timeout=120)
                answer = {"status": response.status_code, "text": response.text[:2000]}
                if response.status_code == 200:  # served after all: does it answer?
                    answer["chat"] = chat_once(url, f"raw-{name}", PROBLEM, tokenizer, args.max_tokens, 0.0)
            except httpx.HTTPError as error:
                answer = {"error": f"{type(error).__name__}: {error}"}
            answer["server_healthy_after"] = server.healthy()
            report.setdefault("vllm_own_answer", {})[name] = answer
    finally:
        report["server_state_at_end"] = server.state()
        server.stop()


def summarize(report: dict) -> dict:
    """The figures the issue asks for, with its targets."""
    by = {(t["model"], t["concurrent"]): t for t in report.get("throughput", [])}
    chat_model = next((t["model"] for t in report.get("throughput", [])), None)
    one, eight = by.get((chat_model, 1)), by.get((chat_model, 8))
    if not (one and eight):
        return {}
    return {"model": chat_model, "first_token_s_1_chat": one["first_token_s_median"],
            "tokens_per_s_1_chat": one["tokens_per_s"], "first_token_s_8_chats_median": eight["first_token_s_median"],
            "tokens_per_s_8_chats": eight["tokens_per_s"], "targets": TARGETS,
            "meets_first_token": one["first_token_s_median"] is not None and one["first_token_s_median"] <= TARGETS["first_token_s_max"],
            "meets_tokens_per_s": eight["tokens_per_s"] >= TARGETS["tokens_per_s_8_chats_min"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_chat_proof", description=__doc__.split("\n")[0])
    parser.add_argument("--base", default=None, help="base model folder (HF format; default: SmolLM2-135M-Instruct)")
    parser.add_argument("--lora", action="append", default=[], metavar="NAME=DIR",
                        help="another adapter to serve from the start (any number)")
    parser.add_argument("--hot-load", action="append", default=[], metavar="NAME=DIR",
                        help="another adapter to load while the server runs (any number)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vllm_chat_proof"), help="where made adapters go")
    parser.add_argument("--out", type=Path, required=True, help="JSON to write; the whole server log goes beside it")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per answer in the base/adapter checks")
    parser.add_argument("--chat-tokens", type=int, default=256, help="max tokens per chat in the throughput runs")
    parser.add_argument("--deadline-s", type=float, default=170.0, help="skip the optional steps after this long")
    parser.add_argument("--startup-timeout-s", type=float, default=150.0, help="per server start attempt")
    args = parser.parse_args(argv)
    for item in args.lora + args.hot_load:
        if "=" not in item:
            parser.error(f"--lora / --hot-load {item!r}: use NAME=DIR")

    def interrupted(signum, frame):
        raise Interrupted(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    log_file = args.out.with_suffix(".server.log")
    log_file.write_text("")
    started = time.monotonic()
    report: dict = {"versions": versions(), "starts": [], "server_log": str(log_file)}
    try:
        prove(args, report, log_file, started + args.deadline_s)
    except Exception as error:  # the proof records any failure; the whole server log is beside the JSON
        report["error"] = f"{type(error).__name__}: {error}"[:3000]
    report["summary"] = summarize(report)
    report["seconds"] = round(time.monotonic() - started, 1)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report.get(k) for k in ("summary", "refused", "hot_load", "error", "seconds")}, indent=1)[:6000])
    ok = "error" not in report and all("reply" in a for a in report.get("answers", [{}]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
