"""The running chat servers, shared by every browser session (a model is loaded once, not per user).

At most MAX_SERVERS run at a time (the side-by-side view needs three); starting one more stops the least
recently used. A crashed server is restarted on the next request, and its crash is reported.
"""

from __future__ import annotations

import atexit
import threading
import time

from grpo_playground.serving.backends import LLAMA_CPP, llamacpp_server, vllm_server
from grpo_playground.serving.client import load_lora
from grpo_playground.serving.process import ManagedServer
from grpo_playground.serving.targets import ChatTarget

MAX_SERVERS = 3


class ServerPool:
    def __init__(self, max_servers: int = MAX_SERVERS) -> None:
        self.max_servers = max_servers
        self._servers: dict[tuple, ManagedServer] = {}
        self._used: dict[tuple, float] = {}
        self._loras: dict[tuple, dict[str, str]] = {}  # vLLM: adapter name -> path, per server
        self._lock = threading.Lock()

    @staticmethod
    def _key(target: ChatTarget) -> tuple:
        # vLLM serves every LoRA of one base from one server; llama.cpp needs one server per file (+ adapter).
        return (target.backend, target.model, target.lora) if target.backend == LLAMA_CPP else (target.backend, target.model)

    def server_for(self, target: ChatTarget) -> tuple[ManagedServer, str, str | None]:
        """(healthy server, model name to request, crash report or None), starting or restarting as needed."""
        key = self._key(target)
        with self._lock:
            server = self._servers.get(key)
            crash = server.failure_message() if server and server.state().startswith("crashed") else None
            if crash:  # start afresh: a restarted vLLM has lost its hot-loaded adapters
                server.stop()
                self._forget(key)
                server = None
            if server is None:
                self._evict()
                server = self._new_server(target)
                self._servers[key] = server
            self._used[key] = time.monotonic()
        server.start()
        return server, self._model_name(key, server, target), crash

    def _new_server(self, target: ChatTarget) -> ManagedServer:
        if target.backend == LLAMA_CPP:
            return llamacpp_server(target.model, target.lora)
        loras = {"adapter0": target.lora} if target.lora else {}
        self._loras[self._key(target)] = dict(loras)
        return vllm_server(target.model, loras)

    def _model_name(self, key: tuple, server: ManagedServer, target: ChatTarget) -> str:
        if target.backend == LLAMA_CPP:
            return server.command[server.command.index("--model_alias") + 1]
        if not target.lora:
            return "base"
        loras = self._loras.setdefault(key, {})
        name = next((n for n, p in loras.items() if p == target.lora), None)
        if name is None:  # a new checkpoint of an already running base: hot-load, no restart, no merge
            name = f"adapter{len(loras)}"
            load_lora(server.base_url, name, target.lora)
            loras[name] = target.lora
        return name

    def _evict(self) -> None:
        while len(self._servers) >= self.max_servers:
            oldest = min(self._used, key=self._used.get)
            self._servers[oldest].stop()
            self._forget(oldest)

    def _forget(self, key: tuple) -> None:
        self._servers.pop(key, None)
        self._used.pop(key, None)
        self._loras.pop(key, None)

    def restart(self, target: ChatTarget) -> None:
        key = self._key(target)
        with self._lock:
            server = self._servers.get(key)
            self._forget(key)
        if server is not None:
            server.stop()

    def describe(self) -> list[dict]:
        with self._lock:
            return [{"backend": s.backend, "model": key[1], "port": s.port, "state": s.state(),
                     "pid": s.process.pid if s.process else None, "log": str(s.log_file)}
                    for key, s in self._servers.items()]

    def stop_all(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
            self._used.clear()
            self._loras.clear()
        for server in servers:
            server.stop()


POOL = ServerPool()
atexit.register(POOL.stop_all)
