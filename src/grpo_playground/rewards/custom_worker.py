"""Runs ONE user-written reward function inside the sandbox. Started only by `custom.run_custom_reward`.

    python -I -S -c "$(cat custom_worker.py)" RESULT_FD SECCOMP_BPF_HEX SIGNAL_NRS CPU_S MEMORY_MB FILE_MB

Standard library only (any Python >= 3.9), never imported by the app: its source is run by a fresh python.
Protocol: one JSON request on stdin {"code", "completions", "answer"}; one JSON reply written to the
inherited pipe RESULT_FD: {"scores": [...]} or {"error": str, "memory_exceeded": bool}, after a newline written
as soon as the request is read (the app's wall limit on the code starts there; JSON ignores it). Whatever the
user code prints goes to stdout/stderr, which the app captures and truncates.
"""

import ctypes
import errno
import json
import linecache
import math
import numbers
import os
import resource
import struct
import sys
import traceback

FILENAME = "<reward>"
MAX_ERROR_CHARS = 4000
MAX_OPEN_FILES = 64  # RLIMIT_NOFILE: Python and a reward need a handful
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 4, 38, 22, 2
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06  # classic BPF opcodes (linux/bpf_common.h)
SECCOMP_RET_ALLOW, SECCOMP_RET_EPERM = 0x7FFF0000, 0x00050000 | errno.EPERM
LIBC = ctypes.CDLL(None, use_errno=True)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_filter(program: bytes) -> None:
    """Stack a seccomp filter (raw BPF, 8 bytes a record) on this process: every filter loaded must allow a call."""
    code = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.addressof(code))
    if LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot load a seccomp filter")


def confine(program: bytes, cpu_s: int, memory_mb: int, file_mb: int) -> None:
    """Non-dumpable, the rlimits, no_new_privs, then the app's seccomp filter. Done by the launcher before it
    forks the code, so both sides of that fork are held alike: the code cannot read or write the launcher's
    memory (/proc/<ppid>/mem needs a dumpable target), nor undo any of it."""
    if LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot make the launcher non-dumpable")
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb << 20, file_mb << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Pipe buffers are kernel memory outside RLIMIT_AS: 64 descriptors hold at most ~2 MB of them.
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))
    if LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot set no_new_privs")
    load_filter(program)


def signals_to_itself_only(signal_nrs: list[int], pid: int) -> bytes:
    """A filter for the code's process: kill, tkill and tgkill (signal_nrs) may name only `pid` (their first
    argument, compared as a 64-bit word), so the code cannot signal its launcher, the app, or any other
    process of its user (kill(-1) included). Any other call passes on to the app's filter, which also kills
    calls made through another ABI (their numbers differ): hence no architecture check here."""
    low, high = (16, 20) if sys.byteorder == "little" else (20, 16)  # seccomp_data.args[0]'s two halves
    n = len(signal_nrs)
    records = [(BPF_LD_W_ABS, 0, 0, 0)]  # seccomp_data.nr
    records += [(BPF_JEQ_K, n - i, 0, nr) for i, nr in enumerate(signal_nrs)]  # a signal call: to the check
    records += [(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
                (BPF_LD_W_ABS, 0, 0, low), (BPF_JEQ_K, 0, 3, pid),
                (BPF_LD_W_ABS, 0, 0, high), (BPF_JEQ_K, 0, 1, 0),
                (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW), (BPF_RET_K, 0, 0, SECCOMP_RET_EPERM)]
    return b"".join(struct.pack("=HBBI", *record) for record in records)


def user_traceback(exc: BaseException) -> str:
    """The traceback from the first frame of the user's code on: the worker's own frames are noise."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != FILENAME:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).strip()


def score(request: dict) -> dict:
    code, completions = request["code"], request["completions"]
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)  # source lines in tracebacks
    try:
        compiled = compile(code, FILENAME, "exec")
    except SyntaxError as exc:
        return {"error": f"syntax error on line {exc.lineno}: {exc.msg}. Fix the code and try again."}
    namespace = {"__name__": "reward_module"}
    exec(compiled, namespace)
    fn = namespace.get("reward")
    if not callable(fn):
        return {"error": "no function named `reward` found: define `def reward(completions, answer, **kwargs):` "
                         "returning one float per completion."}
    # TRL passes everything by keyword, each dataset column as a list with one entry per completion: so do
    # we. The sandbox scores completions without their prompts: prompts arrive as empty strings.
    n = len(completions)
    scores = fn(prompts=[""] * n, completions=list(completions), answer=[request["answer"]] * n)
    if not isinstance(scores, (list, tuple)):
        return {"error": f"`reward` returned {type(scores).__name__}; it must return a list of "
                         f"{len(completions)} floats, one per completion."}
    out = []
    for i, s in enumerate(scores):
        if isinstance(s, bool) or not isinstance(s, numbers.Real):
            return {"error": f"score {i} is {type(s).__name__} ({s!r:.80}); every score must be a number."}
        out.append(float(s))
    return {"scores": [s if math.isfinite(s) else repr(s) for s in out]}


def reply(result_fd: int, data: dict) -> None:
    with os.fdopen(result_fd, "wb") as f:
        f.write(json.dumps(data).encode())


def give_up(result_fd: int, exc: OSError) -> None:
    """A layer failed to load: the code must not run without it."""
    reply(result_fd, {"error": f"could not confine the reward process: {exc}"})
    os._exit(1)


def main() -> None:
    result_fd, cpu_s, memory_mb, file_mb = (int(a) for a in (sys.argv[1], *sys.argv[4:7]))
    program, signal_nrs = bytes.fromhex(sys.argv[2]), [int(n) for n in sys.argv[3].split(",")]
    request = json.loads(sys.stdin.read())
    os.write(result_fd, b"\n")  # started: the sandbox and interpreter are up, the code's wall time begins
    sys.stdout.flush()
    try:
        confine(program, cpu_s, memory_mb, file_mb)
    except OSError as exc:
        give_up(result_fd, exc)
    # An intermediate launcher: the user's code runs in a child, so its parent is this process, not the app.
    pid = os.fork()
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # from here on neither side forks: no fork bomb
    if pid:
        _, status = os.waitpid(pid, 0)
        # Pass the child's fate on as an exit status; a signal (SIGXCPU: the CPU limit) as 128 + its number.
        os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    # The child stays in the launcher's process group: the app's timeout kills the whole group.
    sys.stdout.reconfigure(line_buffering=True)  # prints made before a timeout still reach the app
    try:
        load_filter(signals_to_itself_only(signal_nrs, os.getpid()))
    except OSError as exc:
        give_up(result_fd, exc)
    try:
        data = score(request)
    except MemoryError:
        data = {"error": f"memory limit exceeded ({memory_mb} MB).", "memory_exceeded": True}
    except BaseException as exc:  # the user's error, reported to the user: nothing here is the app's
        data = {"error": user_traceback(exc)[-MAX_ERROR_CHARS:]}
    reply(result_fd, data)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
