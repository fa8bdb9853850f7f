"""Prove on a GPU that a chat server and a training job share one card (grpo_playground.gpu_share), through the
product's own pool (serving.ServerPool, as the Chat tab) and training CLI (pipelines.train, as a job):

    python -m benchmarks.gpu_share_proof job-then-chat --out results/gpu/gpu_share_job_then_chat.json
    python -m benchmarks.gpu_share_proof chat-then-job --out results/gpu/gpu_share_chat_then_job.json

job-then-chat: a SmolLM2-135M GRPO job (TRL + colocated vLLM, benchmarks.gpu_grpo's recipe) starts; once it has
recorded its need, a vLLM chat server is asked for: it starts at the share sized beside the job (or is refused
with a message naming the job), answers one chat, and the job must keep stepping. chat-then-job: a chat server
runs; a job whose recipe asks vLLM for 0.95 of the card must fail at once naming the chat server; a job with the
sized share must finish beside it. Both record nvidia-smi, each outcome and the messages; the job logs and the
chat server's log go beside OUT. --cache is the app's cache folder (GRPO_PLAYGROUND_CACHE: the records and the
compile caches; default the chat proof's, so its compiled model is reused); the model itself comes from the usual
model cache.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from grpo_playground.cli.args import TrainArgs

ROOT = Path(__file__).resolve().parents[1]


def smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.free,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi failed: {error}"


def job(work: Path, base: str, name: str, steps: int, share: float | None) -> tuple[subprocess.Popen, Path]:
    """The product's training CLI on a GRPO-only SmolLM2 recipe, in its own session."""
    from benchmarks.gpu_grpo import RunSpec, write_recipe

    spec = RunSpec("smollm2-135m", "trl-vllm", 128, prompts=8, steps=steps, vllm_share=share)
    run_dir = work / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    recipe = write_recipe(spec, base, work / f"{name}.yaml")
    command = TrainArgs(recipe, run_dir=run_dir, stage="grpo").command()
    log = open(run_dir / "log.txt", "w")
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, SWANLAB_MODE="disabled", OMP_NUM_THREADS="4"), start_new_session=True)
    return proc, run_dir


def job_outcome(run_dir: Path) -> dict:
    from grpo_playground.contracts.layout import METRICS_FILE
    from grpo_playground.run_layout import read_status

    status = read_status(run_dir)
    rows = (run_dir / METRICS_FILE).read_text().splitlines() if (run_dir / METRICS_FILE).is_file() else []
    return {"state": status.get("state"), "reason": status.get("reason"), "step": status.get("step"),
            "metric_rows": len(rows)}


def chat_server(pool, base: str) -> dict:
    """A vLLM chat server for the base through the pool, and one chat: the share it got, or the refusal."""
    from grpo_playground.gpu_share import GpuBusy
    from grpo_playground.serving import VLLM, ChatTarget, stream_chat

    started = time.perf_counter()
    try:
        server, name, _ = pool.server_for(ChatTarget(VLLM, base, None, "smollm2"))
    except GpuBusy as refused:
        return {"started": False, "refused": str(refused), "seconds": round(time.perf_counter() - started, 1)}
    reply = "".join(stream_chat(server.base_url, name, [{"role": "user", "content": "What is 2 + 3?"}], max_tokens=16))
    command = server.command
    return {"started": True, "seconds": round(time.perf_counter() - started, 1), "reply": reply, "log": str(server.log_file),
            "gpu_memory_utilization": float(command[command.index("--gpu-memory-utilization") + 1])}


def stop_job(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def job_then_chat(work: Path, base: str, report: dict, timeout_s: float) -> None:
    from grpo_playground import gpu_share
    from grpo_playground.serving import ServerPool

    proc, run_dir = job(work, base, "job-then-chat", steps=60, share=None)
    report["job_run"] = str(run_dir)
    pool = ServerPool()
    try:
        deadline = time.monotonic() + timeout_s
        # asked for once the job steps (its engine up, its memory rising and falling each step): as the Space end
        # to end did when a chat server crashed with "-5.39 GiB" of KV cache before --kv-cache-memory-bytes
        while (not gpu_share.holders(gpu_share.JOB) or job_outcome(run_dir)["metric_rows"] < 1) \
                and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        report["job_record"] = gpu_share.holders(gpu_share.JOB)
        report["smi_job_only"] = smi()
        report["chat"] = chat_server(pool, base)
        report["smi_both"] = smi()
        before = job_outcome(run_dir)["metric_rows"]
        time.sleep(20)  # the job keeps stepping beside the chat server
        report["job_rows_in_20_s_beside_chat"] = job_outcome(run_dir)["metric_rows"] - before
        report["job"] = job_outcome(run_dir)
    finally:
        pool.stop_all()
        stop_job(proc)


def chat_then_job(work: Path, base: str, report: dict, timeout_s: float) -> None:
    from grpo_playground.serving import ServerPool

    pool = ServerPool()
    try:
        report["chat"] = chat_server(pool, base)
        report["smi_chat_only"] = smi()
        for name, share, steps in (("too-big", 0.95, 3), ("sized", None, 3)):
            proc, run_dir = job(work, base, f"chat-then-job-{name}", steps, share)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
            finally:
                stop_job(proc)
            report[f"job_{name}"] = {"vllm_share": share, "run": str(run_dir), **job_outcome(run_dir)}
    finally:
        pool.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_share_proof", description=__doc__.split("\n")[0])
    parser.add_argument("scenario", choices=("job-then-chat", "chat-then-job"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu_share_proof"))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/vllm_chat_proof/data/cache"))
    parser.add_argument("--timeout-s", type=float, default=240.0, help="the longest wait for one job")
    args = parser.parse_args(argv)
    from grpo_playground.models import hf_dir

    base = str(hf_dir("smollm2-135m"))  # from the usual model cache, before --cache takes its place
    os.environ["GRPO_PLAYGROUND_CACHE"] = str(args.cache)  # read by this process and the jobs it starts
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report: dict = {"scenario": args.scenario, "cache": str(args.cache), "smi_before": smi()}
    started = time.monotonic()
    try:
        (job_then_chat if args.scenario == "job-then-chat" else chat_then_job)(args.work, base, report, args.timeout_s)
    except Exception as error:  # recorded with what was measured so far
        report["error"] = f"{type(error).__name__}: {error}"[:3000]
    report["seconds"] = round(time.monotonic() - started, 1)
    logs = args.out.with_suffix(".logs")
    logs.mkdir(exist_ok=True)
    for log in [*args.work.glob("runs/*/log.txt"), *([Path(report["chat"]["log"])] if report.get("chat", {}).get("log") else [])]:
        if log.is_file():
            shutil.copyfile(log, logs / (f"{log.parent.name}.log" if log.name == "log.txt" else "chat_server.log"))
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1)[:6000])
    return 0 if "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
