"""Time the product's evaluation (`python -m pipelines.eval`) per backend on the same prompts and machine:
vLLM against transformers on one GPU (issue 11 asks for >= 20x on 600 generator prompts).

    python -m benchmarks.eval_speed --out results/gpu/eval_speed.json [--model smollm2-135m] [--n 600] \
        [--backends vllm transformers] [--timeout-s 150]

Each backend runs the CLI in its own process (stdin closed: vLLM's engine process must not inherit a script
on stdin), writes its full results and log beside OUT (OUT stem + .BACKEND.json / .BACKEND.log). OUT holds, per
backend: wall seconds of the process, the eval's own seconds (model load + generation) and generate_seconds
(generation alone), completions per second, format rate and accuracy; then the speed ratio over the first
backend and how many greedy completions the backends wrote identically. A backend that runs past --timeout-s
is stopped; its rate then comes from the last progress line it logged ("eval: 256/600 completions (40 s)").
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from grpo_playground.cli.args import EvalArgs
# the eval runs in its own session: its group holds vLLM's engine too
from grpo_playground.contracts.process import kill_group

ROOT = Path(__file__).resolve().parents[1]
PROGRESS = re.compile(r"eval: (\d+)/(\d+) completions \((\d+) s\)")
BATCH = {"vllm": 512, "transformers": 128, "llama.cpp": 1}  # vLLM schedules its own batches: give it all at once


def eval_command(backend: str, model: str, n: int, max_new_tokens: int, out: Path, batch_size: int) -> list[str]:
    return EvalArgs((model,), "generator:test", n, batch_size, max_new_tokens, backend=backend, out=(out,)).command()


def last_progress(log: Path) -> dict | None:
    found = PROGRESS.findall(log.read_text(errors="replace")) if log.is_file() else []
    if not found:
        return None
    done, total, seconds = map(int, found[-1])
    return {"done": done, "total": total, "seconds": seconds}


def run_backend(backend: str, args, stem: Path) -> dict:
    out, log = stem.with_suffix(f".{backend}.json"), stem.with_suffix(f".{backend}.log")
    out.unlink(missing_ok=True)
    command = eval_command(backend, args.model, args.n, args.max_new_tokens, out, args.batch_size or BATCH.get(backend, 64))
    started, started_epoch = time.perf_counter(), time.time()
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = process.wait(args.timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        except BaseException:  # SIGTERM (an outer `timeout`): never leave an engine holding the GPU
            kill_group(process.pid)
            raise
        if code is None:
            kill_group(process.pid)
            process.wait()
    wall = time.perf_counter() - started
    entry = {"backend": backend, "command": command, "log": str(log), "wall_s": round(wall, 1), "exit_code": code}
    if out.is_file():  # written atomically at the end of the eval; a process that then hangs on exit still counts
        result = json.loads(out.read_text())
        entry.update({"results": str(out), "results_written_s": round(out.stat().st_mtime - started_epoch, 1),
                      "n": result["n"], "seconds": result["seconds"], "generate_seconds": result.get("generate_seconds"),
                      "completions_per_s": round(result["n"] / result["generate_seconds"], 2) if result.get("generate_seconds") else None,
                      "format_rate": result["format_rate"], "accuracy": result["accuracy"],
                      "mean_completion_tokens": result["mean_completion_tokens"]})
        if code != 0:
            entry["note"] = "results written, but the process " + ("hung on exit (stopped)" if code is None else f"exited {code}")
    else:
        progress = last_progress(log)
        entry["error"] = "timed out" if code is None else f"exit code {code}"
        entry["log_tail"] = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
        if progress and progress["seconds"]:
            entry["partial"] = progress  # its seconds include the model load: the rate is a lower bound
            entry["completions_per_s"] = round(progress["done"] / progress["seconds"], 2)
    return entry


def same_completions(entries: list[dict]) -> dict | None:
    """How many completions two finished backends wrote identically (greedy decoding on both sides)."""
    done = [e for e in entries if e.get("results")]
    if len(done) < 2:
        return None
    texts = [[c["text"] for c in json.loads(Path(e["results"]).read_text())["completions"]] for e in done[:2]]
    same = sum(a.strip() == b.strip() for a, b in zip(*texts))
    return {"backends": [e["backend"] for e in done[:2]], "identical": same, "of": len(texts[0])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eval_speed", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="summary JSON; per-backend results and logs beside it")
    parser.add_argument("--model", default="smollm2-135m", help="registry name, model folder or run adapter folder")
    parser.add_argument("--n", type=int, default=600, help="generator:test prompts (default 600)")
    parser.add_argument("--backends", nargs="+", default=["vllm", "transformers"], help="the first is the reference")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=None, help="default: 512 for vllm, 128 for transformers")
    parser.add_argument("--timeout-s", type=float, default=150.0, help="per backend; past it the rate comes from progress")
    args = parser.parse_args(argv)
    if len(set(args.backends)) != len(args.backends):
        parser.error(f"--backends {args.backends}: name each backend once (their files are named after them)")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    stem = args.out.with_suffix("")

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    entries = []
    for backend in args.backends:
        try:
            entries.append(run_backend(backend, args, stem))
        except KeyboardInterrupt:  # keep what was measured
            entries.append({"backend": backend, "error": "interrupted (SIGTERM or Ctrl-C); its process group was killed"})
            break
    reference = entries[0]
    for entry in entries[1:]:
        if reference.get("completions_per_s") and entry.get("completions_per_s"):
            entry[f"times_slower_than_{reference['backend']}"] = round(reference["completions_per_s"] / entry["completions_per_s"], 1)
        if reference.get("seconds") and entry.get("seconds"):
            entry[f"total_seconds_ratio_to_{reference['backend']}"] = round(entry["seconds"] / reference["seconds"], 1)
    summary = {"model": args.model, "data": "generator:test", "n": args.n, "max_new_tokens": args.max_new_tokens,
               "backends": entries, "same_completions": same_completions(entries)}
    args.out.write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1)[-4000:])
    return 0 if all(e.get("results") for e in entries) else 1


if __name__ == "__main__":
    sys.exit(main())
