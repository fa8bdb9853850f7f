"""Prove the product's vLLM chat path on a GPU, through grpo_playground.serving exactly as the Chat tab uses it:
the pool (serving.ServerPool.server_for: the GPU share sized from what is free, `vllm serve` shaped for chat, every
adapter warmed before the server is called ready), replies streamed by serving.client.stream_chat with a LoRA on,
a second adapter hot-loaded without a restart, an adapter with registered tag tokens refused with its fix.

    python -m benchmarks.vllm_chat_proof --out results/gpu/vllm_chat.json [--base HF_DIR] [--lora DIR] \
        [--hot-load DIR ...] [--data-root DIR] [--keep-cache]

Measured: the server start twice in one run, fresh (an empty data root: nothing compiled) and restarted (the same
data root: vLLM's compile cache and Triton's kernels reused, as on a restarted Space), each as "Send to first
token" (start, warm-up, one chat); first-token latency and tokens/s of one chat; 8 concurrent chats' tokens/s in
total, in steady state (while all 8 stream) and over the whole rounds. --base defaults to SmolLM2-135M-Instruct
(models.hf_dir). The proof makes its adapters from the base with PEFT (random, untrained): `plain` (served; --lora
serves DIR instead), `hot` (hot-loaded; --hot-load adds more), `tagged` (the format tags registered as new tokens,
as data.register_tags does: refused). Writes OUT (JSON) and, beside it, OUT with the suffix .server.log: the WHOLE
log of both servers. No --enforce-eager retry: a failed start is the result. SIGTERM (`timeout`) stops the server
and still writes the JSON. Run it as a file or module, never fed on stdin (vLLM's engine process re-imports the
main module).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
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
TARGETS = {"first_token_s_max": 0.3, "tokens_per_s_1_chat_min": 300.0, "tokens_per_s_8_chats_min": 2500.0,
           "fresh_send_to_first_token_s_max": 120.0, "restart_send_to_first_token_s_max": 60.0}  # issue 23
SERVE_NEEDS = ("prometheus_fastapi_instrumentator", "prometheus_client", "fastapi", "uvicorn")  # modules `vllm serve` imports
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# what vLLM 0.22 logs about its start (results/gpu/h200_chat/vllm_chat.server.log), to split the start's time
LOG_TIMINGS = {"weights_s": r"Loading weights took ([\d.]+) seconds", "compile_s": r"torch.compile took ([\d.]+) s in total",
               "graph_capture_s": r"Graph capturing finished in ([\d.]+) secs",
               "init_engine_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"}
JIT_RE = re.compile(r"Triton kernel JIT compilation during inference: (\w+)")


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


def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def chat_once(base_url: str, model: str, question: str, tokenizer, max_tokens: int, temperature: float | None = None,
              seed: int = 0) -> dict:
    """One streamed chat through the product's client: reply, first-token latency, tokens/s; "_pieces" holds each
    piece's (perf_counter time, characters) for steady_rate (left out of the JSON)."""
    from grpo_playground.serving.client import ChatError, stream_chat

    messages = [{"role": "system", "content": system_prompt(DEFAULT_TAGS)}, {"role": "user", "content": question}]
    settings = {**CHAT_SETTINGS, **({"temperature": temperature} if temperature is not None else {})}
    started, first, pieces = time.perf_counter(), None, []
    try:
        for piece in stream_chat(base_url, model, messages, max_tokens=max_tokens, seed=seed, **settings):
            now = time.perf_counter()
            first = first if first is not None else now - started
            pieces.append((now, piece))
    except ChatError as error:
        return {"model": model, "error": str(error)[:800]}
    seconds = time.perf_counter() - started
    reply = "".join(text for _, text in pieces)
    tokens = count_tokens(tokenizer, reply)
    decode_s = seconds - (first or 0.0)
    return {"model": model, "reply": reply, "pieces": len(pieces), "tokens": tokens,
            "first_token_s": round(first or 0.0, 4), "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 1) if seconds else None,
            "decode_tokens_per_s": round((tokens - 1) / decode_s, 1) if tokens > 1 and decode_s > 0 else None,
            "_pieces": [(t, len(text)) for t, text in pieces]}


def steady_rate(runs: list[dict]) -> dict | None:
    """Tokens/s of chats streamed together, counted only while every one of them streams (from the last first
    piece to the first last piece), each chat's tokens spread over its pieces by their characters; None when the
    chats never streamed together."""
    timed = [r for r in runs if r.get("_pieces") and r.get("tokens")]
    if len(timed) < len(runs) or not timed:
        return None
    start, end = max(r["_pieces"][0][0] for r in timed), min(r["_pieces"][-1][0] for r in timed)
    if end <= start:
        return None
    tokens = 0.0
    for r in timed:
        chars = sum(n for _, n in r["_pieces"]) or 1
        tokens += r["tokens"] * sum(n for t, n in r["_pieces"] if start < t <= end) / chars
    return {"window_s": round(end - start, 3), "tokens": round(tokens, 1), "tokens_per_s": round(tokens / (end - start), 1)}


def chats(base_url: str, model: str, tokenizer, concurrent: int, max_tokens: int, rounds: int = 3) -> dict:
    """`rounds` rounds of `concurrent` chats started together (threads, as several Chat tab users): first-token
    latency of every chat; tokens/s in total over the rounds' wall time, and in steady state (steady_rate, the
    median over rounds). The server was warmed at start (client.warm_up), so no untimed round comes first."""
    runs, wall, steady = [], 0.0, []
    for round_ in range(rounds):
        started = time.perf_counter()
        with ThreadPoolExecutor(concurrent) as pool:
            batch = list(pool.map(lambda i: chat_once(base_url, model, LONG_PROBLEM, tokenizer, max_tokens,
                                                      seed=round_ * concurrent + i), range(concurrent)))
        wall += time.perf_counter() - started
        steady.append(steady_rate(batch))
        runs += batch
    done = [r for r in runs if "error" not in r]
    tokens = sum(r["tokens"] for r in done)
    firsts = [r["first_token_s"] for r in done]
    rates = [s["tokens_per_s"] for s in steady if s]
    return {"model": model, "concurrent": concurrent, "rounds": rounds, "max_tokens": max_tokens, "ok": len(done),
            "failed": len(runs) - len(done), "wall_s": round(wall, 3), "tokens": tokens,
            "tokens_per_s": round(tokens / wall, 1),
            "steady_tokens_per_s": round(statistics.median(rates), 1) if rates else None, "steady_rounds": steady,
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


def public(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def log_timings(log_text: str, ready_at: int | None = None) -> dict:
    """The parts of a vLLM start its log states (LOG_TIMINGS), whether the compiled model came from the cache, and
    the Triton kernels JIT-compiled during requests, split at `ready_at` (the log's length when the server was
    called ready: those after it were paid by a user, not by the warm-up)."""
    found = {name: float(m.group(1)) for name, pattern in LOG_TIMINGS.items() if (m := re.search(pattern, log_text))}
    found["compile_cache_hit"] = "Directly load" in log_text
    jit = [(m.start(), m.group(1)) for m in JIT_RE.finditer(log_text)]
    found["jit_during_warm_up"] = [name for at, name in jit if ready_at is None or at < ready_at]
    found["jit_after_ready"] = [name for at, name in jit if ready_at is not None and at >= ready_at]
    return found


def start_and_chat(pool, target, kind: str, tokenizer, max_tokens: int) -> tuple[object, str, dict]:
    """Send to first token, as a user's first question: the pool starts (and warms) the server, then one chat."""
    started = time.perf_counter()
    server, name, _ = pool.server_for(target)
    ready_s = time.perf_counter() - started
    ready_at = len(server.log_file.read_text(errors="replace"))
    first = chat_once(server.base_url, name, PROBLEM, tokenizer, max_tokens)
    command = server.command
    entry = {"kind": kind, "ready_s": round(ready_s, 1), "server_startup_s": server.startup_s,
             "send_to_first_token_s": round(ready_s + first.get("first_token_s", 0.0), 2) if "error" not in first else None,
             "first_chat": public(first), "command": command,
             "gpu_memory_utilization": float(command[command.index("--gpu-memory-utilization") + 1]),
             "log": str(server.log_file), "_ready_at": ready_at}
    return server, name, entry


def keep_logs(starts: list[dict], servers: list[dict], log_file: Path) -> None:
    """Each server's whole log, one after the other, in log_file (a start that failed too: its server is still in
    the pool's list); the split timings into each start's entry."""
    logs = [(entry["kind"], entry["log"], entry) for entry in starts]
    logs += [("failed", s["log"], None) for s in servers if s["log"] not in {entry["log"] for entry in starts}]
    with open(log_file, "a", encoding="utf-8") as out:
        for kind, path, entry in logs:
            text = Path(path).read_text(errors="replace") if Path(path).is_file() else ""
            if entry is not None:
                entry["log_timings"] = log_timings(text, entry.pop("_ready_at", None))
            out.write(f"===== {kind} start ({path}) =====\n{text}\n")


def prove(args, report: dict, log_file: Path, deadline: float) -> None:
    from transformers import AutoTokenizer

    from grpo_playground.serving import VLLM, ChatTarget, ServerPool
    from grpo_playground.serving.backends import vllm_server
    from grpo_playground.serving.client import ChatError, load_lora

    base = Path(args.base) if args.base else None
    if base is None:
        from grpo_playground.models import hf_dir

        base = hf_dir("smollm2-135m")
    report["base"] = str(base)
    tokenizer = AutoTokenizer.from_pretrained(base)
    made = make_adapters(base, args.work)
    served = Path(args.lora) if args.lora else made["plain"]
    hot = [made["hot"], *map(Path, args.hot_load)]
    report["adapters"] = {"served": str(served), "hot": [str(h) for h in hot], "tagged": str(made["tagged"])}

    # The Chat tab's path refuses an adapter vLLM cannot serve before starting anything, naming the fix.
    try:
        vllm_server(str(base), {"served": served, "tagged": made["tagged"]})
        report["refused"] = None
    except ValueError as error:
        report["refused"] = str(error)
    missing = [name for name in SERVE_NEEDS if importlib.util.find_spec(name) is None]
    if missing:  # `vllm serve` would fail after importing everything else; say it before spending GPU time
        report["error"] = (f"`vllm serve` imports {missing}, not installed here: pip install them (vLLM's own dependencies; "
                           "a carried vLLM bundle can lack them)")
        return
    # A data root standing in for the Space's /data: the product puts its compile caches under GRPO_PLAYGROUND_CACHE
    # (backends.vllm_env); emptied first, so the first start compiles everything, the second reuses it all.
    data_root = args.data_root or args.work / "data"
    if not args.keep_cache:
        shutil.rmtree(data_root, ignore_errors=True)
    os.environ["GRPO_PLAYGROUND_CACHE"] = str(data_root / "cache")
    for name in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        os.environ.pop(name, None)  # the product's own choice, not this shell's
    report["data_root"] = str(data_root)
    report["gpu_before"] = gpu_snapshot()

    pool = ServerPool()
    target = ChatTarget(VLLM, str(base), str(served), "proof")
    starts = report["starts"]
    try:
        server, name, entry = start_and_chat(pool, target, "fresh", tokenizer, args.max_tokens)
        starts.append(entry)
        url, report["served_pid"] = server.base_url, server.process.pid
        report["served_at_start"] = served_models(url)
        report["answers"] = [public(chat_once(url, model, PROBLEM, tokenizer, args.max_tokens, temperature=0.0))
                             for model in ("base", name)]
        report["adapter_changes_reply"] = report["answers"][0].get("reply") != report["answers"][1].get("reply")
        for path in hot:  # loaded into the running server by the pool, as the Chat tab does for a new checkpoint
            started = time.perf_counter()
            try:
                _, hot_name, _ = pool.server_for(ChatTarget(VLLM, str(base), str(path), "hot"))
                entry = {"path": str(path), "name": hot_name, "loaded": True,
                         "load_and_warm_s": round(time.perf_counter() - started, 2), "listed": hot_name in served_models(url),
                         **public(chat_once(url, hot_name, PROBLEM, tokenizer, args.max_tokens))}
            except ChatError as error:
                entry = {"path": str(path), "loaded": False, "error": str(error)[:800]}
            entry["no_restart"] = server.process is not None and server.process.pid == report["served_pid"]
            report.setdefault("hot_load", []).append(entry)
        try:  # the product's client refuses the tagged adapter too, before vLLM sees it
            load_lora(url, "tagged", str(made["tagged"]))
            report["client_refusal"] = "NOT refused: loaded"
        except ChatError as error:
            report["client_refusal"] = str(error)
        report["throughput"] = [chats(url, name, tokenizer, n, args.chat_tokens, args.rounds) for n in (1, 8)]
        pool.stop_all()  # the Space restarts: same data root, nothing else kept
        _, _, entry = start_and_chat(pool, target, "restarted", tokenizer, args.max_tokens)
        starts.append(entry)
        report["gpu_with_server"] = gpu_snapshot()
        if time.monotonic() < deadline:  # last, what vLLM itself says to the tagged adapter (it may fall over)
            report["vllm_own_answer"] = raw_load(pool, target, made["tagged"], tokenizer, args.max_tokens)
    finally:
        report["servers_at_end"] = pool.describe()
        pool.stop_all()
        keep_logs(starts, report["servers_at_end"], log_file)


def raw_load(pool, target, tagged: Path, tokenizer, max_tokens: int) -> dict:
    """vLLM's own answer to the tag-registered adapter, bypassing the product's check: evidence for the refusal."""
    server, _, _ = pool.server_for(target)
    try:
        response = httpx.post(f"{server.base_url}/v1/load_lora_adapter", json={"lora_name": "raw-tagged",
                              "lora_path": str(tagged)}, timeout=120)
        answer = {"status": response.status_code, "text": response.text[:2000]}
        if response.status_code == 200:  # served after all: does it answer?
            answer["chat"] = public(chat_once(server.base_url, "raw-tagged", PROBLEM, tokenizer, max_tokens, 0.0))
    except httpx.HTTPError as error:
        answer = {"error": f"{type(error).__name__}: {error}"}
    answer["server_healthy_after"] = server.healthy()
    return answer


def summarize(report: dict) -> dict:
    """The figures issue 23 asks for, each next to its target."""
    by = {t["concurrent"]: t for t in report.get("throughput", [])}
    starts = {s["kind"]: s for s in report.get("starts", [])}
    one, eight = by.get(1), by.get(8)
    summary = {"targets": TARGETS}
    for kind in ("fresh", "restarted"):
        if kind in starts:
            summary[f"{kind}_send_to_first_token_s"] = starts[kind]["send_to_first_token_s"]
    if one and eight:
        summary.update(model=one["model"], first_token_s_1_chat=one["first_token_s_median"],
                       tokens_per_s_1_chat=one["per_chat_tokens_per_s_median"],
                       first_token_s_8_chats_median=eight["first_token_s_median"],
                       tokens_per_s_8_chats_steady=eight["steady_tokens_per_s"], tokens_per_s_8_chats_wall=eight["tokens_per_s"])
    checks = {"meets_first_token": ("first_token_s_1_chat", "first_token_s_max", False),
              "meets_tokens_per_s_1_chat": ("tokens_per_s_1_chat", "tokens_per_s_1_chat_min", True),
              "meets_tokens_per_s_8_chats": ("tokens_per_s_8_chats_steady", "tokens_per_s_8_chats_min", True),
              "meets_fresh_start": ("fresh_send_to_first_token_s", "fresh_send_to_first_token_s_max", False),
              "meets_restart": ("restarted_send_to_first_token_s", "restart_send_to_first_token_s_max", False)}
    for name, (figure, target, at_least) in checks.items():
        value = summary.get(figure)
        if value is not None:
            summary[name] = value >= TARGETS[target] if at_least else value <= TARGETS[target]
    return summary if len(summary) > 1 else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_chat_proof", description=__doc__.split("\n")[0])
    parser.add_argument("--base", default=None, help="base model folder (HF format; default: SmolLM2-135M-Instruct)")
    parser.add_argument("--lora", default=None, metavar="DIR", help="the adapter to serve (default: a made one)")
    parser.add_argument("--hot-load", action="append", default=[], metavar="DIR",
                        help="another adapter to load while the server runs (any number)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vllm_chat_proof"), help="where made adapters go")
    parser.add_argument("--data-root", type=Path, default=None,
                        help="stands in for the Space's /data (default: WORK/data), emptied first unless --keep-cache")
    parser.add_argument("--keep-cache", action="store_true", help="keep the data root: the first start is a restart too")
    parser.add_argument("--out", type=Path, required=True, help="JSON to write; the whole server log goes beside it")
    parser.add_argument("--max-tokens", type=int, default=96, help="tokens per answer in the base/adapter checks")
    parser.add_argument("--chat-tokens", type=int, default=512, help="max tokens per chat in the throughput runs")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of 1 and of 8 concurrent chats")
    parser.add_argument("--deadline-s", type=float, default=240.0, help="skip the optional last step after this long")
    args = parser.parse_args(argv)

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
