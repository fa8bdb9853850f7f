"""Several GPUs for one run: `pipelines.train` re-executes itself under `accelerate launch` (DDP, one process per
GPU) when the recipe's `hardware.num_gpus` is above 1. Pure Python (no torch at import): the UI shows the command.

Each process trains on its share of every batch; TRL gathers the completions so each group of num_generations is
still scored together. Only the main process writes the run folder (RunFolder checks `is_main_process`), and a
stop request is agreed by all processes at a step boundary (`any_process`), so none is left waiting in a
collective. NVLink multicast stays off (NCCL_NVLS_ENABLE=0): on shared hosts it can take the GPUs down.
"""

from __future__ import annotations

import os
import sys

from grpo_playground.child_process import free_port

# Set by `accelerate launch` (torchrun) in every process it starts.
RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
SAFE_NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def launched() -> bool:
    """True inside a process that `accelerate launch` / torchrun started."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def process_count() -> int:
    """The processes `accelerate launch` started for this run (1 outside a launch)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return os.environ.get("RANK", "0") == "0"


def accelerate_command(num_processes: int, module: str, args: list[str], port: int | None = None) -> list[str]:
    """`python -m accelerate.commands.launch ... -m MODULE ARGS`: DDP over `num_processes` local GPUs. The launch
    itself is torchrun's; on a machine without CUDA the job's processes join over gloo on the CPU (the tests)."""
    if num_processes < 1:
        raise ValueError(f"num_processes {num_processes}: give 1 or more")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1",
               "--num_processes", str(num_processes), "--main_process_port", str(port or free_port()),
               "--dynamo_backend", "no", "--mixed_precision", "no"]
    command += ["--multi_gpu"] if num_processes > 1 else []
    return command + ["-m", module, *args]


def relaunch_command(num_gpus: int, module: str, args: list[str], visible_gpus: int) -> list[str] | None:
    """The command that runs this job on `num_gpus` processes, or None when it should run in this process.

    Raises ValueError when the machine has fewer GPUs than the recipe asks for (with the fix)."""
    if num_gpus <= 1 or launched():
        return None
    if visible_gpus < num_gpus:
        raise ValueError(f"hardware.num_gpus={num_gpus} but this machine shows {visible_gpus} CUDA GPU(s): "
                         f"set hardware.num_gpus to {max(visible_gpus, 1)} or fewer (CUDA_VISIBLE_DEVICES limits them)")
    return accelerate_command(num_gpus, module, args)


def visible_cuda_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def exec_command(command: list[str]) -> None:
    """Replace this process by `command` (same pid, same process group: the job supervisor's stop still reaches
    every rank), with NVLink multicast kept off."""
    for key, value in SAFE_NCCL_ENV.items():
        os.environ.setdefault(key, value)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def any_process(flag: bool) -> bool:
    """True when `flag` is true on any process of a distributed run (a collective: every process must call it)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    value = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
