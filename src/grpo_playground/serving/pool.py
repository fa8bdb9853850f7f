"""The running chat servers, shared by every browser session (a model is loaded once, not per user).

At most MAX_SERVERS run at a time (the side-by-side view needs three); starting one more stops the least
recently used. A crashed server is restarted on the next request, and its crash is reported. Whoever asks may
be refused what loads a model (may_start / may_evict: the Chat tab gives those to the owner only): starting,
restarting or evicting a server, hot-loading an adapter. A vLLM server takes the GPU share gpu_share sizes beside
a running training job, and records it there so a job started later can name it.
"""

from __future__ import annotations

import atexit
import threading
import time
from pathlib import Path

from grpo_playground import gpu_share
from grpo_playground.serving.backends import (
    CHAT_MAX_SEQS,
    LLAMA_CPP,
    base_config,
    chat_need_bytes,
    llamacpp_server,
    vllm_server,
)
from grpo_playground.serving.client import load_lora, warm_up
from grpo_playground.serving.process import ManagedServer
from grpo_playground.serving.targets import ChatTarget

MAX_SERVERS = 3
UNKNOWN_MODEL_SHARE = 0.3  # a base whose config is not on this machine yet (a hub id to download)


class NeedsOwner(PermissionError):
    """The request would load a model (start, restart or evict a server, hot-load an adapter): owner only."""


class ServerPool:
    def __init__(self, max_servers: int = MAX_SERVERS) -> None:
        self.max_servers = max_servers
        self._servers: dict[tuple, ManagedServer] = {}
        self._used: dict[tuple, float] = {}
        self._loras: dict[tuple, dict[str, str]] = {}  # vLLM: adapter name -> path, per server
        self._reserved: dict[tuple, int] = {}  # vLLM: GPU bytes the server was sized to hold
        self._labels: dict[tuple, str] = {}  # what the Chat tab calls each server's checkpoint
        self._lock = threading.Lock()

    @staticmethod
    def _key(target: ChatTarget) -> tuple:
        # vLLM serves every LoRA of one base from one server; llama.cpp needs one server per file (+ adapter).
        return (target.backend, target.model, target.lora) if target.backend == LLAMA_CPP else (target.backend, target.model)

    def _refuse(self, target: ChatTarget, doing: str) -> NeedsOwner:
        running = [self._labels.get(key) or Path(key[1]).name for key, s in self._servers.items()
                   if s.state() == "running"]
        return NeedsOwner(f"{doing} for {target.label or target.model} needs the owner token: visitors chat only "
                          "with the servers already running (" + (", ".join(running) or "none now") + ") and the "
                          "owner's default checkpoint. Type the owner token in the 'Owner token' box to load it.")

    def server_for(self, target: ChatTarget, may_start: bool = True,
                   may_evict: bool | None = None) -> tuple[ManagedServer, str, str | None]:
        """(healthy server, model name to request, crash report or None), starting or restarting as needed;
        NeedsOwner when that needs what the caller may not do (may_evict defaults to may_start)."""
        key = self._key(target)
        may_evict = may_start if may_evict is None else may_evict
        with self._lock:
            server = self._servers.get(key)
            crash = server.failure_message() if server and server.state().startswith("crashed") else None
            if crash:  # start afresh: a restarted vLLM has lost its hot-loaded adapters
                if not may_start:
                    raise self._refuse(target, "Restarting the crashed server")
                self._stop(key)
                server = None
            if server is None:
                if not may_start:
                    raise self._refuse(target, "Starting a model server")
                if len(self._servers) >= self.max_servers and not may_evict:
                    raise self._refuse(target, f"Stopping one of the {len(self._servers)} running servers to start one")
                self._evict()
                server = self._new_server(target)
                self._servers[key], self._labels[key] = server, target.label
            self._used[key] = time.monotonic()
        server.start()
        if key in self._reserved and server.process is not None:
            gpu_share.record(gpu_share.CHAT, server.process.pid, f"vLLM chat server of {Path(target.model).name}",
                             self._reserved[key])
        return server, self._model_name(key, server, target, may_start), crash

    def progress(self, target: ChatTarget) -> str | None:
        """What the target's server is doing while it starts (ManagedServer.progress), None otherwise."""
        server = self._servers.get(self._key(target))
        return server.progress() if server else None

    def _new_server(self, target: ChatTarget) -> ManagedServer:
        if target.backend == LLAMA_CPP:
            return llamacpp_server(target.model, target.lora)
        loras = {"adapter0": target.lora} if target.lora else {}
        share = self._vllm_share(target)
        server = vllm_server(target.model, loras, **({"gpu_memory_utilization": share} if share else {}))
        # no other vLLM engine (a job's, an evaluation's, another server's) starts on this GPU meanwhile
        server.start_guard = lambda on_wait: gpu_share.engine_start(f"the chat server of {Path(target.model).name}",
                                                                    on_wait)
        # ready only once every served model answered: Triton compiles vLLM's LoRA and sampling kernels on first
        # use (a cold adapter streamed 13 tok/s on the H200)
        server.warm_up = lambda s: warm_up(s.base_url, ["base", *loras], CHAT_MAX_SEQS)
        self._loras[self._key(target)] = dict(loras)
        return server

    def _vllm_share(self, target: ChatTarget) -> float | None:
        """The new vLLM server's share of the GPU beside what runs (gpu_share.GpuBusy when it does not fit);
        None when the GPU cannot be queried (vllm_server's default then)."""
        gpu = gpu_share.query_nvidia_smi()
        if gpu is None:
            return None
        need = chat_need_bytes(base_config(target.model)) or int(UNKNOWN_MODEL_SHARE * gpu.total)
        share = gpu_share.chat_server_share(need, Path(target.model).name, gpu, gpu_share.holders(gpu_share.JOB),
                                            gpu_share.holders(gpu_share.CHAT))
        self._reserved[self._key(target)] = int(share * gpu.total)
        return share

    def _model_name(self, key: tuple, server: ManagedServer, target: ChatTarget, may_start: bool) -> str:
        if target.backend == LLAMA_CPP:
            return server.command[server.command.index("--model_alias") + 1]
        if not target.lora:
            return "base"
        with self._lock:
            loras = self._loras.setdefault(key, {})
            name = next((n for n, p in loras.items() if p == target.lora), None)
            if name is None:  # a new checkpoint of an already running base: hot-load, no restart, no merge
                if not may_start:
                    raise self._refuse(target, "Loading a new adapter into the running server")
                name = f"adapter{len(loras)}"
                load_lora(server.base_url, name, target.lora)
                warm_up(server.base_url, [name], 1)  # its kernels compile now, not in the visitor's first reply
                loras[name] = target.lora
        return name

    def _evict(self) -> None:
        while len(self._servers) >= self.max_servers:
            self._stop(min(self._used, key=self._used.get))

    def _stop(self, key: tuple) -> None:
        server = self._servers.pop(key, None)
        self._used.pop(key, None)
        self._loras.pop(key, None)
        self._reserved.pop(key, None)
        self._labels.pop(key, None)
        if server is not None:
            if server.process is not None:
                gpu_share.forget(gpu_share.CHAT, server.process.pid)
            server.stop()

    def restart(self, target: ChatTarget) -> None:
        with self._lock:
            self._stop(self._key(target))

    def running(self, target: ChatTarget) -> bool:
        """Whether the target's server runs (or is starting), so a visitor may use it."""
        server = self._servers.get(self._key(target))
        return server is not None and server.state() == "running"

    def describe(self) -> list[dict]:
        # without the lock: every page load describes the servers, and the lock is held through an eviction (up to
        # 10 s a server) or an adapter's hot-load (minutes); a copy of the dict is one atomic step under the GIL
        described = []
        for key, s in list(self._servers.items()):
            process = s.process  # read once: a stop may set it to None meanwhile
            described.append({"backend": s.backend, "model": key[1], "port": s.port, "state": s.state(),
                              "phase": s.phase, "progress": s.progress(), "startup_s": s.startup_s,
                              "pid": process.pid if process else None, "log": str(s.log_file)})
        return described

    def stop_all(self) -> None:
        with self._lock:
            for key in list(self._servers):
                self._stop(key)


POOL = ServerPool()
atexit.register(POOL.stop_all)
