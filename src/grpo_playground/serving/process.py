"""A model server as a managed child process: start, health check, crash report, stop, restart.

The UI process never loads a model: each backend is an OpenAI-compatible HTTP server in its own session
(so stopping it also stops anything it spawned), logging to a file (a pipe nobody reads would block it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from grpo_playground.child_process import env_without_secrets
from grpo_playground.contracts.process import log_tail

LOG_TAIL_LINES = 25


class BackendUnavailable(RuntimeError):
    """The backend cannot run on this machine (no GPU, package missing...): the message says what to do."""


class ServerFailed(RuntimeError):
    """The server process exited or never became healthy; the message carries its log tail."""


def new_log_file() -> Path:
    handle, path = tempfile.mkstemp(prefix="grpo-server-", suffix=".log")
    os.close(handle)
    return Path(path)


@dataclass
class ManagedServer:
    """One server process. `command` must serve OpenAI-compatible HTTP on 127.0.0.1:`port`."""

    backend: str
    command: list[str]
    port: int
    health_path: str = "/v1/models"
    startup_timeout_s: float = 180.0
    env: dict[str, str] = field(default_factory=dict)
    keep_secrets: tuple[str, ...] = ()  # secret variables of the app it needs (others are left out)
    log_file: Path = field(default_factory=new_log_file)
    process: subprocess.Popen | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def state(self) -> str:
        """'stopped', 'running' or 'crashed (exit N)'."""
        if self.process is None:
            return "stopped"
        code = self.process.poll()
        return "running" if code is None else f"crashed (exit {code})"

    def healthy(self) -> bool:
        try:
            return httpx.get(self.base_url + self.health_path, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def start(self) -> ManagedServer:
        """Start (or restart after a crash) and wait until healthy; ServerFailed with the log tail otherwise."""
        with self._lock:
            if self.state() == "running" and self.healthy():
                return self
            self._kill()
            with open(self.log_file, "ab") as log:
                log.write(f"$ {' '.join(self.command)}\n".encode())
                log.flush()
                self.process = subprocess.Popen(
                    self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=env_without_secrets(self.keep_secrets, **self.env), start_new_session=True,
                )
            deadline = time.monotonic() + self.startup_timeout_s
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise ServerFailed(self.failure_message())
                if self.healthy():
                    return self
                time.sleep(0.3)
            self._kill()
            raise ServerFailed(f"{self.backend} server did not answer {self.health_path} within "
                               f"{self.startup_timeout_s:.0f} s; log tail:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return log_tail(self.log_file, lines=LOG_TAIL_LINES)

    def failure_message(self) -> str:
        return f"{self.backend} server {self.state()}; log tail ({self.log_file}):\n{self.log_tail()}"

    def stop(self) -> None:
        with self._lock:
            self._kill()

    def _kill(self) -> None:
        """SIGTERM the server's process group, SIGKILL after 5 s; only our own child's group."""
        if self.process is None:
            return
        if self.process.poll() is None:
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.process = None
