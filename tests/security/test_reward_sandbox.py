"""Custom reward code attacked the way issues 12 and 25 did: each test is one escape that worked before.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/security/test_reward_sandbox.py
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import select
import signal
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from grpo_playground.rewards import custom
from grpo_playground.rewards.custom import EXAMPLE_REWARD, Limits, run_custom_reward

PR_SET_DUMPABLE = 4
JAILED = custom._namespaces_work(os.geteuid() == 0)
needs_jail = pytest.mark.skipif(not JAILED, reason="bubblewrap cannot make namespaces on this machine")
MODES = [pytest.param(True, id="bubblewrap", marks=needs_jail), pytest.param(False, id="plain")]


@pytest.fixture(autouse=True)
def enabled(monkeypatch):
    monkeypatch.setenv(custom.ENABLE_ENV, "1")
    monkeypatch.setenv(custom.UNSANDBOXED_ENV, "1")


def reward(body: str) -> str:
    return ("import ctypes, os, time\ndef reward(completions, answer, **kwargs):\n"
            f"{textwrap.indent(textwrap.dedent(body), '    ')}\n    return [1.0] * len(completions)\n")


@needs_jail
def test_the_reported_escape_no_longer_works():
    # The reproduction: unmount the private /tmp, remount / read-write, write into the host's /dev/shm.
    target = Path("/dev/shm", f"grpo-escape-{uuid.uuid4().hex}")
    body = f"""
    libc = ctypes.CDLL(None, use_errno=True)
    os.chdir('/')
    print(libc.umount2(b'/tmp', 2), ctypes.get_errno(), libc.mount(None, b'/', None, 32 | 4096, None),
          ctypes.get_errno())
    open({str(target)!r}, 'w').write('x' * 1000)
    """
    result = run_custom_reward(reward(body), ["a"], "1")
    try:
        assert not target.exists(), "the code wrote into the host's /dev/shm"
        assert result.stdout.split() == ["-1", "1", "-1", "1"], result.error  # both calls refused with EPERM
    finally:
        target.unlink(missing_ok=True)


@needs_jail
def test_the_jail_shows_no_host_folder_but_usr():
    # The old sandbox made the filesystem read-only but visible: the app's source, /root, /home, /work...
    result = run_custom_reward(reward("print(sorted(os.listdir('/')))"), ["a"], "1")
    assert set(json.loads(result.stdout.replace("'", '"'))) <= {"bin", "dev", "etc", "lib", "lib32", "lib64",
                                                               "proc", "sbin", "tmp", "usr"}


@pytest.mark.parametrize("jailed", MODES)
def test_capabilities_are_dropped_and_seccomp_is_on(jailed):
    body = "print(''.join(l for l in open('/proc/self/status') if l.split(':')[0] in ('CapEff', 'NoNewPrivs', 'Seccomp')))"
    status = dict(line.split(":\t") for line in run_custom_reward(reward(body), ["a"], "1", Limits(namespaces=jailed))
                  .stdout.strip().splitlines())
    assert status == {"CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}


@pytest.mark.parametrize("jailed", MODES)
@pytest.mark.parametrize("call", [
    "libc.unshare(0x10000000)", "libc.setns(0, 0)", "libc.ptrace(16, 1, 0, 0)", "libc.setsid()", "libc.setpgid(0, 0)",
    "libc.syscall(321, 0, 0, 0)",  # bpf
    "libc.syscall(311, 1, 0, 0, 0, 0, 0)",  # process_vm_writev
    # issue 25: these passed the old deny-list
    "libc.syscall(425, 1, ctypes.create_string_buffer(120))",  # io_uring_setup: its own openat, unfiltered
    "libc.syscall(434, 1, 0)",  # pidfd_open
    "libc.syscall(135, 0x0040000)",  # personality(ADDR_NO_RANDOMIZE)
    "libc.syscall(59, b'/bin/sh', 0, 0)",  # execve: nothing but the worker's Python runs
    "libc.syscall(41, 2, 1, 0)",  # socket(AF_INET, SOCK_STREAM)
    "libc.syscall(302, os.getppid(), 7, 0, 0)",  # prlimit64 of another process than itself (RLIMIT_NOFILE)
])
def test_the_seccomp_filter_refuses_escape_calls(jailed, call):
    result = run_custom_reward(reward(f"libc = ctypes.CDLL(None, use_errno=True)\nprint({call}, ctypes.get_errno())"),
                               ["a"], "1", Limits(namespaces=jailed))
    assert result.stdout.split() == ["-1", "1"], result.stdout  # EPERM


@pytest.mark.parametrize("jailed", MODES)
def test_a_new_session_cannot_outlive_the_timeout(jailed):
    # Before: the code called setsid() and slept; the timeout killed the old process group, not the new one.
    name = f"esc{uuid.uuid4().hex[:10]}"
    body = f"""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, {name.encode()!r})  # PR_SET_NAME: how this test finds it afterwards
    os.setsid() if hasattr(os, 'setsid') else None
    while True:
        time.sleep(0.05)
    """
    result = run_custom_reward(reward(body), ["a"], "1", Limits(namespaces=jailed, wall_seconds=0.5))
    assert result.timed_out or "Operation not permitted" in result.error
    survivors = _wait_for_no_process_named(name)
    assert not survivors, f"processes {survivors} outlived the sandbox"


# x86-64, position independent (assembled from this listing). Run in the parent, it proves arbitrary code ran
# there: it prints a marker to the app's capture pipe, and leaves a child in a new session, named `name`,
# that sleeps 30 s past every timeout.
#   write(1, "HIJACKED\n", 9); if (fork() == 0) { setsid(); prctl(PR_SET_NAME, name); nanosleep({30, 0}); }
#   exit_group(0)
HIJACK_CODE = bytes.fromhex(
    "b801000000" "bf01000000" "488d3545000000" "ba09000000" "0f05"  # write(1, msg, 9)
    "b839000000" "0f05" "85c0" "752a"  # fork(); the parent jumps to exit_group
    "b870000000" "0f05"  # setsid()
    "b89d000000" "bf0f000000" "488d3524000000" "0f05"  # prctl(PR_SET_NAME, name)
    "6a00" "6a1e" "4889e7" "31f6" "b823000000" "0f05"  # nanosleep({30 s, 0}, NULL)
    "b8e7000000" "31ff" "0f05") + b"HIJACKED\n"  # exit_group(0); msg; then the 11-byte name


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the shellcode and syscall numbers are x86-64")
@pytest.mark.parametrize("jailed", MODES)
def test_the_code_cannot_hijack_its_parent(jailed):
    # Issue 25: the launcher between the app and the code was dumpable and had no filter and no limits. The
    # code read the launcher's instruction pointer (inside wait4) from /proc/<ppid>/syscall, wrote code
    # there through /proc/<ppid>/mem and exited; the launcher woke into it and ran it unconfined.
    name = f"hj{uuid.uuid4().hex[:8]}"
    body = f"""
    pid = os.getppid()
    try:
        for _ in range(400):  # until the launcher sits in wait4 (61), waiting for this process
            fields = open(f'/proc/{{pid}}/syscall').read().split()
            if fields[0] == '61':
                break
            time.sleep(0.005)
        with open(f'/proc/{{pid}}/mem', 'r+b', buffering=0) as mem:
            mem.seek(int(fields[-1], 16))
            mem.write({HIJACK_CODE + name.encode() + bytes(1)!r})
        os._exit(0)
    except OSError as exc:
        print('refused:', type(exc).__name__)
    """
    try:
        result = run_custom_reward(reward(body), ["a"], "1", Limits(namespaces=jailed))
    finally:
        survivors = _wait_for_no_process_named(name)
        for pid in survivors:
            os.kill(int(pid), signal.SIGKILL)
    assert not survivors, f"a setsid child of the hijacked parent, {survivors}, outlived the call"
    assert "HIJACKED" not in result.stdout, "the code's shellcode ran in its parent"
    assert result.scores == [1.0] and result.stdout.startswith("refused: PermissionError"), result.stdout


@pytest.mark.parametrize("jailed", MODES)
def test_the_launcher_is_held_like_the_code(jailed):
    # The code's parent (the launcher; in the jail, pid 1) runs under the same filter and limits (and is
    # non-dumpable: test_the_code_cannot_hijack_its_parent). Default limits: 2 s CPU, 256 MB, no process.
    body = """
    pid = os.getppid()
    while open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] != 'S':
        time.sleep(0.001)  # until it waits for this process: it sets RLIMIT_NPROC right after the fork
    status = dict(l.split(':', 1) for l in open(f'/proc/{pid}/status'))
    limits = {l[:26].strip(): l[26:].split()[0] for l in open(f'/proc/{pid}/limits')}
    print(status['Seccomp'].strip(), status['NoNewPrivs'].strip(), limits['Max cpu time'],
          limits['Max address space'], limits['Max processes'])
    """
    result = run_custom_reward(reward(body), ["a"], "1", Limits(namespaces=jailed))
    assert result.stdout.split() == ["2", "1", "2", str(256 << 20), "0"], result.stdout


@pytest.mark.parametrize("jailed", MODES)
def test_other_processes_of_its_user_cannot_be_written(jailed):
    # A dumpable process of the code's own user (for a non-root app: a training job, a model server).
    ids = {"user": custom.NOBODY, "group": custom.NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    target = subprocess.Popen(["sleep", "30"], env={"JOB_SECRET": "job-secret"}, **ids)
    try:
        body = f"""
        for name, mode in (('mem', 'r+b'), ('environ', 'rb')):
            try:
                with open('/proc/{target.pid}/' + name, mode, buffering=0) as f:
                    print(name, f.read(200))
            except OSError as exc:
                print(name, 'refused:', type(exc).__name__)
        """
        result = run_custom_reward(reward(body), ["a"], "1", Limits(namespaces=jailed))
    finally:
        target.kill()
        target.wait()
    mem, environ = result.stdout.splitlines()
    if jailed:  # its own PID namespace: the process is not there at all
        assert (mem, environ) == ("mem refused: FileNotFoundError", "environ refused: FileNotFoundError")
    else:  # open() may only read: memory not writable; what it was started with stays readable (documented)
        assert mem == "mem refused: PermissionError" and "job-secret" in environ, result.stdout


@pytest.mark.parametrize("jailed", MODES)
def test_other_processes_of_its_user_cannot_be_signalled(jailed):
    # Before, plain-mode code killed any process of its user (for a non-root app: the app itself), by pid,
    # with kill(-1), or by having the kernel send SIGIO to the owner it set on a pipe (F_SETOWN + O_ASYNC).
    ids = {"user": custom.NOBODY, "group": custom.NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    target = subprocess.Popen(["sleep", "30"], **ids)
    try:
        body = f"""
        import fcntl, signal
        libc = ctypes.CDLL(None, use_errno=True)
        r, w = os.pipe()
        for attack in (lambda: os.kill({target.pid}, signal.SIGKILL), lambda: os.kill(-1, signal.SIGKILL),
                       lambda: fcntl.fcntl(r, fcntl.F_SETOWN, {target.pid})):
            try:
                attack()
                print('done')
            except OSError as exc:
                print(type(exc).__name__)
        print(libc.tgkill({target.pid}, {target.pid}, 9), ctypes.get_errno())
        os.kill(os.getpid(), signal.SIGCONT)  # its own pid stays allowed
        """
        result = run_custom_reward(reward(body), ["a"], "1", Limits(namespaces=jailed))
        assert target.poll() is None, "the code killed another process of its user"
        assert result.stdout.split() == ["PermissionError"] * 3 + ["-1", "1"], result.stdout
        assert result.scores == [1.0], result.error
    finally:
        target.kill()
        target.wait()


def _wait_for_no_process_named(name: str, seconds: float = 5) -> list[str]:
    """pids still named `name` after `seconds` (the kernel tears a PID namespace down soon after, not at once)."""
    deadline = time.monotonic() + seconds
    while (survivors := [p for p in os.listdir("/proc") if p.isdigit() and _comm(p) == name]) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    return survivors


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_without_namespaces_custom_code_is_refused_unless_the_owner_allows_it(monkeypatch):
    # Before: a container without user namespaces silently ran the code as the app's own user.
    monkeypatch.delenv(custom.UNSANDBOXED_ENV)
    result = run_custom_reward(EXAMPLE_REWARD, ["4"], "4", Limits(namespaces=False))
    assert result.scores is None and custom.UNSANDBOXED_ENV in result.error


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another uid needs root")
def test_plain_mode_code_cannot_read_the_apps_environment():
    # The usual Docker case: a non-root app, no namespaces, the owner allowed the plain mode. The code runs
    # as the app's user; before, it read GRPO_PLAYGROUND_OWNER_TOKEN and HF_TOKEN from /proc/<app>/environ
    # (the environment the app was started with).
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the "app": this test process's copy, turned into an ordinary user
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            # A uid change makes a process non-dumpable; an app started as that user is dumpable: be one.
            ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
            custom._make_app_undumpable.cache_clear()  # this "app" has not run plain-mode code yet
            body = f"""
            for name in ('environ', 'mem'):
                try:
                    open('/proc/{os.getpid()}/' + name, 'rb').read(1)
                    print(name, 'read')
                except OSError as exc:
                    print(name, type(exc).__name__)
            """
            result = run_custom_reward(reward(body), ["a"], "1", Limits(namespaces=False))
            os.write(write_end, json.dumps([result.stdout, result.error]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    # A fork of a threaded process (pytest may serve an app meanwhile) could hang on a lock: never wait forever.
    if not select.select([read_end], [], [], 60)[0]:
        os.kill(pid, signal.SIGKILL)
    with os.fdopen(read_end, "rb") as pipe:
        stdout, error = json.loads(pipe.read() or b'["", "the app child died or hung"]')
    os.waitpid(pid, 0)
    assert error is None, error
    assert stdout.split("\n")[:2] == ["environ PermissionError", "mem PermissionError"]


@pytest.mark.parametrize("forged, expected", [
    ('{"scores": [NaN]}', "unreadable reply"),  # json's NaN is not JSON: only a forger writes it
    ('{"scores": [Infinity]}', "unreadable reply"),
    ('{"scores": [1' + '0' * 400 + ']}', "not a finite float"),  # before: an unhandled OverflowError
])
def test_a_reply_forged_on_the_result_pipe_is_refused(forged, expected):
    # The code writes its own reply to the worker's result pipe (its number is on the command line) and exits
    # before the worker can write the real one.
    body = f"os.write(int(__import__('sys').argv[1]), {forged.encode()!r})\nos._exit(0)"
    result = run_custom_reward(reward(body), ["a"], "1")
    assert result.scores is None and expected in result.error, result.error


HOARD = """
import json, os

def reward(completions, answer, **kwargs):
    held = {}
    for where in ('/', '/dev/shm', '/tmp'):  # 512 KB files: each under RLIMIT_FSIZE (1 MB)
        held[where] = 0
        for i in range(64):
            try:
                with open(f'{where}/hoard{i}', 'wb') as out:
                    out.write(b'x' * (512 << 10))
                held[where] += 512 << 10
            except OSError:
                break
    held['memfd'] = 0
    try:
        for i in range(64):
            fd = os.memfd_create('hoard')
            os.write(fd, b'x' * (512 << 10))
            held['memfd'] += 512 << 10
    except (OSError, AttributeError):
        pass
    held['pipes'] = 0
    try:
        for i in range(20000):
            r, w = os.pipe2(os.O_NONBLOCK)
            try:
                while True:
                    held['pipes'] += os.write(w, b'x' * 65536)
            except BlockingIOError:
                pass
    except OSError:
        pass
    print(json.dumps(held))
    return [1.0] * len(completions)
"""


@needs_jail
def test_the_jail_holds_no_memory_outside_its_limit():
    # Before: the jail's / and /dev/shm were writable tmpfs: 1 MB files there (under RLIMIT_FSIZE, outside RLIMIT_AS)
    # pinned 2.3-3.6 GB of host memory per call. memfd files and pipe buffers are host memory too.
    result = run_custom_reward(HOARD, ["a"], "1", Limits(namespaces=True))
    held = json.loads(result.stdout.strip().splitlines()[-1])
    assert held["/"] == held["/dev/shm"] == held["memfd"] == 0, held
    assert held["/tmp"] <= Limits().file_mb << 20, held  # the private /tmp, capped
    assert held["pipes"] <= 4 << 20, held  # 64 descriptors' pipe buffers
