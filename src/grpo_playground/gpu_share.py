"""One GPU shared by a training job and the chat servers: how much a new vLLM engine may take, or who must stop.

vLLM reserves `gpu_memory_utilization` x the card's memory when it starts and refuses to start when less is free;
a training job beside it grows after its start (its colocated vLLM engine, the float32 logits of a GRPO batch).
So each side records what it holds or will hold, one JSON per process in <cache>/gpu_share/ (a chat server: the
bytes it reserved; a training job: its estimated peak), and the other side sizes itself from what is free minus
what a running job still needs, or refuses with a message naming what to stop. Pure arithmetic apart from the
queries (nvidia-smi for the UI process, which never imports torch; torch.cuda.mem_get_info in the job).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grpo_playground.contracts.process import write_json_atomic

GIB = 2**30
MARGIN_BYTES = 2 * GIB  # left free: CUDA contexts of new processes, allocator fragmentation
ENGINE_START_WAIT_S = 600.0  # the longest an engine waits for another's start before it goes ahead
CHAT, JOB = "chat", "job"


class GpuBusy(RuntimeError):
    """Not enough GPU memory for what was asked; the message names what holds it and what to stop."""


@dataclass(frozen=True)
class GpuMemory:
    free: int
    total: int


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _holders_text(entries: list[dict]) -> str:
    return ", ".join(f"{e.get('what', '?')} (pid {e['pid']}, {gib(e.get('bytes', 0))})" for e in entries)


def pending_job_bytes(gpu: GpuMemory, jobs: list[dict], chats: list[dict]) -> int:
    """What running training jobs will still allocate: their declared peaks minus what they hold now (all the
    memory in use that the chat servers do not hold, so an over- rather than an under-estimate)."""
    declared = sum(int(j.get("bytes", 0)) for j in jobs)
    held_by_jobs = max(0, gpu.total - gpu.free - sum(int(c.get("bytes", 0)) for c in chats))
    return max(0, declared - held_by_jobs) if jobs else 0


def chat_server_share(need: int, what: str, gpu: GpuMemory, jobs: list[dict], chats: list[dict]) -> float:
    """vLLM's gpu_memory_utilization for a chat server needing `need` bytes, beside what runs now; GpuBusy when
    it does not fit, naming the training job or the chat servers to stop."""
    pending = pending_job_bytes(gpu, jobs, chats)
    room = gpu.free - pending - MARGIN_BYTES
    if need > room:
        holders = []
        if jobs:
            holders.append(f"the training job {_holders_text(jobs)}, which still needs {gib(pending)} of it: stop "
                           "it in the Training tab or wait until it finishes")
        if chats:
            holders.append(f"the chat servers {_holders_text(chats)}: stop them with 'Restart backends'")
        raise GpuBusy(f"a chat server for {what} needs {gib(need)} of GPU memory and {gib(max(room, 0))} of the "
                      f"{gib(gpu.free)} free can be spared" + (f"; held by {'; and by '.join(holders)}" if holders
                                                                else "; another program holds the rest (nvidia-smi shows which)"))
    share = math.ceil(need / gpu.total * 100) / 100
    if share * gpu.total > room:  # rounding up to a whole percent must not take what is not there
        share = math.floor(room / gpu.total * 100) / 100
    return share


def check_training_fits(need: int, what: str, gpu: GpuMemory, chats: list[dict]) -> None:
    """GpuBusy when a training job needing `need` more bytes does not fit in what is free beside the chat servers
    `chats`, naming them. Without chat servers nothing is refused here: the estimate is rough, and a job that
    runs out of memory is diagnosed by the doctor as before."""
    if not chats or need <= gpu.free - MARGIN_BYTES:
        return
    raise GpuBusy(f"{what} needs about {gib(need)} more GPU memory and {gib(gpu.free)} is free: stop the chat "
                  f"servers ({_holders_text(chats)}) in the Chat tab ('Restart backends', owner token), then start "
                  "the job again")


def training_need_bytes(engine: int, shape: dict, vocab: int, rows: int, tokens: int, weights_loaded: bool) -> int:
    """What a GRPO job with vLLM rollouts still allocates: its engine (`engine` bytes), the float32 logits of one
    batch (rows x tokens x vocab x 4: most of the measured peaks, results/gpu/grpo_step.json), and the policy's
    16-bit weights unless they are loaded already."""
    from grpo_playground.vllm_memory import weight_bytes

    return int(engine + rows * tokens * vocab * 4 + (0 if weights_loaded else weight_bytes(shape)))


def claim_for_training(fixed_share: float | None, share_for, shape: dict, vocab: int, rows: int, tokens: int,
                       weights_loaded: bool, what: str, budget: int | None = None) -> float:
    """In the training job, before its vLLM engine starts: the engine's share (`fixed_share` from the recipe, else
    `share_for(total bytes)`), after checking that the job's need fits beside the chat servers (GpuBusy naming them
    otherwise) and recording it for them. A job with a memory budget (hardware.gpu_memory_gib, enforced by a PyTorch
    cap) claims the budget: a chat server beside it gets the rest."""
    gpu = query_torch()
    share = fixed_share if fixed_share is not None else share_for(gpu.total)
    chats = holders(CHAT)
    held = max(0, gpu.total - gpu.free - sum(int(c.get("bytes", 0)) for c in chats))
    need = (max(0, budget - held) if budget is not None
            else training_need_bytes(int(share * gpu.total), shape, vocab, rows, tokens, weights_loaded))
    check_training_fits(need, f"{what} (vLLM share {share})", gpu, chats)
    record(JOB, os.getpid(), what, held + need)
    return share


# --- one engine start at a time ---------------------------------------------------------------------------------
@contextmanager
def engine_start(what: str, on_wait: Callable[[str], None] | None = None,
                 timeout_s: float = ENGINE_START_WAIT_S) -> Iterator[None]:
    """Held while a vLLM engine starts on this GPU, from its launch until its memory is reserved. vLLM sizes what it
    reserves from what the card gained while it profiled, so two engines starting at once (a chat server and a
    training job's rollout engine, or an evaluation's) each count the other's growth as their own: on the H200 a
    chat server asked for while a resumed GRPO job started its engine crashed with "-5.39 GiB" of KV cache. An
    engine already starting is waited for (on_wait says so, once), at most timeout_s, then this one goes ahead.
    A flock: released by the kernel when its holder dies, and taken per open file, so threads serialize too."""
    path = registry_dir() / "engine_start.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _take(fd):
            if on_wait is not None:
                on_wait(f"{what} waits for another vLLM engine on this GPU to finish starting")
            deadline = time.monotonic() + timeout_s
            while not _take(fd) and time.monotonic() < deadline:
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)


def _take(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


# --- what each process holds -----------------------------------------------------------------------------------
def registry_dir() -> Path:
    from grpo_playground.models.loading import cache_dir

    return cache_dir() / "gpu_share"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def record(kind: str, pid: int, what: str, nbytes: int) -> None:
    folder = registry_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}-{pid}.json"
    write_json_atomic(path, {"pid": pid, "what": what, "bytes": int(nbytes)}, indent=None)


def forget(kind: str, pid: int) -> None:
    (registry_dir() / f"{kind}-{pid}.json").unlink(missing_ok=True)


def holders(kind: str) -> list[dict]:
    """The live processes of `kind` that recorded what they hold (files of ended processes are removed)."""
    found = []
    for path in sorted(registry_dir().glob(f"{kind}-*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(entry.get("pid"), int) and _alive(entry["pid"]):
            found.append(entry)
        else:
            path.unlink(missing_ok=True)
    return found


# --- queries ---------------------------------------------------------------------------------------------------
def query_nvidia_smi() -> GpuMemory | None:
    """Free and total memory of the first visible GPU, from nvidia-smi (no CUDA context in this process)."""
    device = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", f"--id={device}", "--query-gpu=memory.free,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    try:
        free, total = (int(float(x)) * 2**20 for x in out.stdout.strip().splitlines()[0].split(","))
    except (ValueError, IndexError):
        return None
    return GpuMemory(free, total)


def query_torch() -> GpuMemory:
    import torch

    free, total = torch.cuda.mem_get_info()
    return GpuMemory(int(free), int(total))
