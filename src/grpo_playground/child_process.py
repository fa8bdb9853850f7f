"""What every child process the app or a job starts (training, eval, export, model servers, reward workers,
converters) inherits: its environment, and a free local port when it serves one.

A child must import this checkout's code whatever the working directory (PYTHONPATH gets src/ first), print
unbuffered (its output goes to a log file the UI tails), and, when it runs code or servers a visitor can reach,
not inherit the app's secrets.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

SRC = Path(__file__).resolve().parents[1]  # holds the package: the checkout's src/, or site-packages once installed
CHECKOUT = SRC.parent  # where children start: a checkout's root (holds pipelines/, for the experiments)
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
# The secrets a job (training, eval, export, comparison) may need: hub downloads of a gated base and pushes of an
# export, SwanLab's online mode. Never the app's owner token: a job's environ is readable by same-user processes.
JOB_SECRETS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "SWANLAB_API_KEY")


def env_without_secrets(keep: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    """The app's environment minus anything named like a secret (HF_TOKEN, SWANLAB_API_KEY, the owner token)
    but the names in `keep`, for children (math-verify, chat servers): a same-user process could read their
    /proc/<pid>/environ, which, unlike the app's, stays readable."""
    env = {k: v for k, v in os.environ.items()
           if k in keep or not any(word in k.upper() for word in SECRET_WORDS)}
    return {**env, **extra}


def python_child_env(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """`base` (default: the app's environment) with this checkout's src/ first on PYTHONPATH and unbuffered
    output, plus `extra`."""
    env = dict(os.environ if base is None else base, PYTHONUNBUFFERED="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    return env


def job_env(**extra: str) -> dict[str, str]:
    """The environment of a job the app starts: a Python child's, with no secret but JOB_SECRETS."""
    return python_child_env(env_without_secrets(JOB_SECRETS), **extra)


def free_port() -> int:
    """A local TCP port free right now, for a child server (chat server, DDP rendezvous) to bind."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
