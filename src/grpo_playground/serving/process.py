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
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from collections.abc import Callable

import httpx

from grpo_playground.child_process import env_without_secrets
from grpo_playground.contracts.process import log_tail
from grpo_playground.serving.records import forget_server, record_server

LOG_TAIL_LINES = 25
STAGE_SCAN_BYTES = 64_000  # where a starting server's log is searched for its stage


class BackendUnavailable(RuntimeError):
    """The backend cannot run on this machine (no GPU, package missing...): the message says what to do."""


class ServerFailed(RuntimeError):
    """The server process exited or never became healthy; the message carries its log tail."""


def log_stage(path: Path, stages: tuple[tuple[str, str], ...]) -> str | None:
    """The stage a starting server is in: of (marker, words) pairs, the words of the marker seen last in its log."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - STAGE_SCAN_BYTES))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    seen = [(text.rfind(marker), words) for marker, words in stages]
    position, words = max(seen, default=(-1, None))
    return words if position >= 0 else None


KEPT_SERVER_LOGS = 30  # the newest servers' logs (at most three run at once)


def new_log_file() -> Path:
    """A new server's whole log, in the app's cache folder (on a Space, the persistent data root): the owner can
    still read why a server failed or what its start cost after the Space restarted."""
    from grpo_playground.models.loading import cache_dir

    folder = cache_dir() / "server_logs"
    folder.mkdir(parents=True, exist_ok=True)
    for stale in sorted(folder.glob("*.log"))[:-KEPT_SERVER_LOGS]:  # names sort by start time
        for path in (stale, stale.with_suffix(".jinja")):  # the chat template written beside a vLLM server's log
            path.unlink(missing_ok=True)
    handle, path = tempfile.mkstemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), suffix=".log", dir=folder)
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
    stages: tuple[tuple[str, str], ...] = ()  # (log marker, what the server is doing then), for progress()
    warm_up: Callable[[ManagedServer], None] | None = None  # run once healthy, before start() returns
    # held from the launch until warmed up, given a callback that says why it waits (gpu_share.engine_start)
    start_guard: Callable[[Callable[[str], None]], AbstractContextManager] | None = None
    process: subprocess.Popen | None = None
    phase: str = "stopped"  # stopped -> (waiting ->) starting -> warming up -> ready
    waiting_for: str = ""  # what a waiting start waits for
    started_at: float | None = None  # time.monotonic() of the last launch
    startup_s: float | None = None  # launch to ready, of the last start
    model: str = ""  # what it serves (a GGUF file, a base model), for its record on disk (serving/records.py)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def state(self) -> str:
        """'stopped', 'running' or 'crashed (exit N)'."""
        process = self.process  # read once: a stop on another thread sets it to None (the pool describes unlocked)
        if process is None:
            return "stopped"
        code = process.poll()
        return "running" if code is None else f"crashed (exit {code})"

    def healthy(self) -> bool:
        try:
            return httpx.get(self.base_url + self.health_path, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def progress(self) -> str | None:
        """While the server starts: what it is doing and for how long, e.g. "starting: 42 s (capturing CUDA
        graphs)"; None once it is ready or stopped. Never waits for the start (it reads the log)."""
        if self.phase == "waiting" and self.started_at is not None:
            return f"waiting: {time.monotonic() - self.started_at:.0f} s ({self.waiting_for})"
        if self.phase not in ("starting", "warming up") or self.started_at is None:
            return None
        stage = "warming up the kernels" if self.phase == "warming up" else log_stage(self.log_file, self.stages)
        return f"starting: {time.monotonic() - self.started_at:.0f} s" + (f" ({stage})" if stage else "")

    def start(self) -> ManagedServer:
        """Start (or restart after a crash) and wait until healthy and warmed up; ServerFailed with the log tail
        otherwise."""
        with self._lock:
            if self.state() == "running" and self.phase == "ready" and self.healthy():
                return self
            self._kill()
            self.started_at = time.monotonic()
            with self.start_guard(self._wait) if self.start_guard else nullcontext():
                self._launch_and_warm_up()
            self.phase, self.startup_s = "ready", round(time.monotonic() - self.started_at, 1)
            return self

    def _wait(self, why: str) -> None:
        self.phase, self.waiting_for = "waiting", why

    def _launch_and_warm_up(self) -> None:
        self.phase, self.started_at = "starting", time.monotonic()
        with open(self.log_file, "ab") as log:
            log.write(f"$ {' '.join(self.command)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env_without_secrets(self.keep_secrets, **self.env), start_new_session=True,
            )
        # its own session outlives an app killed without atexit: the record lets the next app stop it
        record_server(self.process.pid, self.backend, self.model, self.port, self.log_file)
        try:
            self._wait_healthy(self.started_at + self.startup_timeout_s)
            if self.warm_up is not None:
                self.phase = "warming up"
                self.warm_up(self)
        except BaseException:
            self._kill()
            raise

    def _wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(self.failure_message())
            if self.healthy():
                return
            time.sleep(0.3)
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
        forget_server(self.process.pid)
        self.process, self.phase = None, "stopped"
