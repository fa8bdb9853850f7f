"""Warm starts for jobs on a machine without a GPU: a launcher process imports the training stack once (torch,
transformers, PEFT, TRL, datasets: 7-10 s of CPU on 2 shared cores, each time a fresh interpreter starts a step) and
forks each job's supervisor from it; a supervisor forked so runs its steps (the training, eval, export, scale-out and
comparison CLIs), and a comparison its arms, in forks of itself. A job's step starts in well under a second.

    app:        record.start_job -> fork_supervisor(record, steps, log, env)   None (no launcher ready, no CLI
                                                                               step) -> `python -m` as before
    supervisor: start_step(argv, env)                                     None (not warm, not a CLI) -> Popen

Nothing else changes for a job: a forked supervisor is in its own session (its pid is the job's process group), a
forked step is its child in that group (Stop, the time limit and the group kill reach it), its exit status is a
child's, its stdout and stderr are the job's log, and its command line (ps, /proc/PID/cmdline) reads as its command.
What a fork keeps from the launcher is what importing the stack did, so a step is never forked where a fresh
interpreter could differ: on a machine with an NVIDIA device (CUDA must not be initialised before a fork, and
Unsloth must be imported before TRL), with GRPO_PLAYGROUND_WARM_START=0, and where the step's environment differs
from the launcher's in a variable the stack reads at import (IMPORT_TIME_ENV): that step starts as a fresh
interpreter instead. The launcher starts with the app's first job (that job starts the usual way) and exits with
the app: its socket, one end of a socketpair, is the app's alone.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from grpo_playground.child_process import CHECKOUT

WARM_ENV = "GRPO_PLAYGROUND_WARM_START"
# What a step imports before its first line of work (trl's trainers pull transformers' Trainer and accelerate).
PRELOAD = ("torch", "transformers", "transformers.trainer", "peft", "datasets", "trl.trainer.sft_trainer",
           "trl.trainer.grpo_trainer")
# Variables these libraries read once, at import: a step whose value differs from the launcher's gets a fresh
# interpreter (HF_HUB_OFFLINE, a cache folder, thread counts, the import path).
IMPORT_TIME_ENV = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TORCH", "PYTORCH_", "CUDA_", "OMP_", "MKL_", "KMP_",
                   "TOKENIZERS_", "DATASETS_", "ACCELERATE_", "TRL_", "PEFT_", "XDG_", "HOME", "PYTHON", "LD_")
CLI_PACKAGES = ("grpo_playground.", "pipelines.")  # the modules a step may run in a fork (`python -m MODULE`)
REPLY_TIMEOUT_S = 10.0
MAX_REQUEST_BYTES = 1 << 20

# Set in the launcher once the stack is imported (and so in every fork of it): the import-time environment the
# imports saw, and what they added to it (torch sets TORCHINDUCTOR_CACHE_DIR), which a step's environment gets too.
_preloaded_env: dict[str, str] | None = None
_set_by_imports: dict[str, str] = {}


DEVICES = Path("/dev")


def enabled() -> bool:
    return (sys.platform == "linux" and os.environ.get(WARM_ENV, "1") != "0"
            and not any(DEVICES.glob("nvidia[0-9]*")))


def is_cli(argv: list[str]) -> bool:
    """A step a warm process can run in a fork of itself: `python -m` one of the product's modules."""
    return len(argv) >= 3 and argv[:2] == [sys.executable, "-m"] and argv[2].startswith(CLI_PACKAGES)


def needs_fresh_interpreter(env: dict[str, str]) -> bool:
    """`env` differs from the warm process's in a variable the stack read as it was imported."""
    return import_time_env(env) != _preloaded_env


def import_time_env(env) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)}


# --- the app's side ----------------------------------------------------------------------------------------------

class _Launcher:
    def __init__(self, env: dict[str, str]):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno())], cwd=CHECKOUT, env=env,
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        threading.Thread(target=self.proc.wait, daemon=True).start()  # collect its exit status: no zombie
        self.ready = False

    def usable(self) -> bool:
        """Alive and done importing (its "ready" arrives once; until then jobs start the usual way)."""
        if self.proc.returncode is not None:
            return False
        if not self.ready:
            self.sock.setblocking(False)
            try:
                self.ready = self.sock.recv(64) == b"ready"
            except BlockingIOError:
                pass
        return self.ready

    def fork(self, request: dict, log_fd: int) -> int:
        self.sock.settimeout(REPLY_TIMEOUT_S)
        socket.send_fds(self.sock, [json.dumps(request).encode()], [log_fd])
        return int(json.loads(self.sock.recv(64))["pid"])

    def close(self) -> None:
        self.sock.close()  # the launcher reads the end of its socket and exits


_lock = threading.Lock()
_launcher: _Launcher | None = None
_launcher_failed = False  # one died before it was ready (an import failed): jobs start the usual way from then on


def fork_supervisor(record: Path, steps: list[dict], log_fd: int, env: dict[str, str]) -> int | None:
    """The pid of `record`'s supervisor forked by the launcher, its output to `log_fd`; None when there is no
    launcher ready (it is started here the first time: this job starts the usual way) or none of `steps` is a CLI
    (a job of other programs gains nothing from it)."""
    global _launcher, _launcher_failed
    if not enabled() or _launcher_failed or not any(is_cli(step["argv"]) for step in steps):
        return None
    with _lock:
        if _launcher is not None and _launcher.proc.returncode is not None:
            _launcher_failed = not _launcher.ready
            _launcher = None  # it died (killed, out of memory): the next job starts a new one
            return None
        if _launcher is None:
            _launcher = _Launcher(env)
            return None
        if not _launcher.usable():
            return None
        try:
            return _launcher.fork({"record": str(record), "env": env, "cwd": str(CHECKOUT)}, log_fd)
        except (OSError, ValueError, KeyError):
            _launcher.close()
            _launcher = None
            return None


# --- the launcher ------------------------------------------------------------------------------------------------

def serve(fd: int) -> None:
    """Import the stack, say "ready", then fork a supervisor for each request until the app closes the socket."""
    global _preloaded_env, _set_by_imports
    sock = socket.socket(fileno=fd)
    before = dict(os.environ)
    for module in PRELOAD:
        importlib.import_module(module)
    _preloaded_env = import_time_env(before)
    _set_by_imports = {k: v for k, v in os.environ.items() if k not in before}
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the supervisors: they outlive the launcher
    sock.sendall(b"ready")
    while True:
        message, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, 1)
        if not message:
            return  # the app is gone
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            sock.close()
            _be_supervisor(request, fds[0])
        os.close(fds[0])
        sock.sendall(json.dumps({"pid": pid}).encode())


def _be_supervisor(request: dict, log_fd: int) -> None:
    record = request["record"]
    _title([sys.executable, "-m", "grpo_playground.jobs.supervisor", record])  # before environ changes
    os.setsid()  # its own session: its pid is the job's process group, as with start_new_session
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _reseed()
    _redirect(log_fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])

    _run_as_main("grpo_playground.jobs.supervisor", [record])  # as `python -m` runs it (no import of it here)


# --- a warm process's steps --------------------------------------------------------------------------------------

class ForkedStep:
    """A step forked from this process, read like a subprocess.Popen (pid, poll, wait, terminate, returncode)."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.1)
        return self.returncode

    def terminate(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def start_step(argv: list[str], env: dict[str, str] | None = None, stdout_fd: int | None = None) -> ForkedStep | None:
    """`argv` (`python -m MODULE ARGS`) forked from this process when it is warm (a fork of the launcher) and `env`
    agrees with it on IMPORT_TIME_ENV; None otherwise. The fork keeps this process's stdin, stdout and stderr but `stdout_fd` (its stdout and stderr)."""
    env = dict(os.environ if env is None else env)
    if _preloaded_env is None or not is_cli(argv) or needs_fresh_interpreter(env):
        return None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # nothing buffered here is written twice
    pid = os.fork()
    if pid == 0:
        _be_step(argv, env, stdout_fd)
    return ForkedStep(pid)


def _be_step(argv: list[str], env: dict[str, str], stdout_fd: int | None) -> None:
    for signum in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)  # the supervisor's handlers are not the step's
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if stdout_fd is not None:
        _redirect(stdout_fd)
    _title(argv)  # before environ changes
    _reseed()
    os.environ.clear()
    os.environ.update({**_set_by_imports, **env})
    _run_as_main(argv[2], argv[3:])


def _run_as_main(module: str, args: list[str]) -> None:
    sys.argv = [module, *args]
    _exit_with(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))


def _reseed() -> None:
    """numpy's global generator is not reseeded at a fork (random's is): each fork draws its own, as a fresh
    interpreter does, instead of its siblings' numbers."""
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def _redirect(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    for extra in {devnull, fd} - {0, 1, 2}:
        os.close(extra)


def _title(argv: list[str]) -> None:
    import setproctitle

    setproctitle.setproctitle(" ".join(argv))


def _exit_with(main) -> None:
    """Run `main` as a process's whole life: its exit code (SystemExit's, 1 after a traceback), what a finishing
    interpreter does (non-daemon threads joined, atexit run, output flushed), then _exit: never back into the
    forked parent's code."""
    code = 1
    try:
        returned = main()
        code = returned if isinstance(returned, int) else 0
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            code = exit.code or 0
        else:
            print(exit.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            threading._shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    # run as the package's module, not as __main__: the globals serve() sets are the ones the supervisor and its
    # steps import (jobs.supervisor imports grpo_playground.jobs.warm_start)
    importlib.import_module("grpo_playground.jobs.warm_start").serve(int(sys.argv[1]))
