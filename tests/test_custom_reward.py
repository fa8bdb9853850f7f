"""The custom-reward sandbox, attacked one property at a time (docs/custom_rewards.md lists what it promises).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_custom_reward.py

Attacks that the namespaces layer stops run in both modes where both promise it, and only in the
namespaced mode where only that mode does (the plain mode's weaknesses are documented, not hidden).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from grpo_playground.rewards import custom
from grpo_playground.rewards.custom import EXAMPLE_REWARD, Limits, run_custom_reward

HAS_NAMESPACES = custom._namespaces_work(os.geteuid() == 0)
MODES = [
    pytest.param(True, id="namespaces", marks=pytest.mark.skipif(not HAS_NAMESPACES, reason="no user namespaces here")),
    pytest.param(False, id="plain"),
]


@pytest.fixture(autouse=True)
def enabled(monkeypatch):
    monkeypatch.setenv(custom.ENABLE_ENV, "1")
    monkeypatch.setenv(custom.UNSANDBOXED_ENV, "1")  # the plain mode runs only when the owner allows it


def reward_code(body: str, header: str = "import os") -> str:
    """A reward module whose `reward` runs `body` and then scores every completion 1.0."""
    return f"{header}\ndef reward(completions, answer, **kwargs):\n{textwrap.indent(textwrap.dedent(body), '    ')}\n" \
           "    return [1.0] * len(completions)\n"


def run(code: str, namespaces: bool = True, completions=("a",), answer="1", **limits):
    return run_custom_reward(code, list(completions), answer, Limits(namespaces=namespaces, **limits))


# --- a good reward ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("namespaces", MODES)
def test_good_reward_returns_its_scores(namespaces):
    result = run(EXAMPLE_REWARD, namespaces, ["so it is 4", "I think 5", "no number", "1,004"], "4")
    assert result.error is None, result.error
    assert result.scores == [1.0, 0.0, 0.0, 0.0]
    assert not result.timed_out and not result.memory_exceeded


def test_answer_arrives_as_one_entry_per_completion_like_trl():
    # TRL passes dataset columns as lists aligned with completions: a reward written here runs in TRL unchanged.
    code = "def reward(completions, answer, **kwargs):\n    return [float(len(answer)) + (a == '7') for a in answer]\n"
    assert run(code, completions=["x", "y", "z"], answer="7").scores == [4.0, 4.0, 4.0]


def test_the_trl_signature_with_prompts_works_too():
    # ARCHITECTURE.md's reward signature takes prompts first; the sandbox passes them as empty strings.
    code = "def reward(prompts, completions, answer, **kwargs):\n    return [float(p == '') for p in prompts]\n"
    assert run(code, completions=["x", "y"]).scores == [1.0, 1.0]


def test_a_full_size_group_goes_through():
    # 64 completions and ~200,000 characters: more than a pipe buffer, so the request is streamed.
    completions = [f"{'word ' * 620}<SOLUTION>{i}</SOLUTION>" for i in range(custom.MAX_COMPLETIONS)]
    result = run(EXAMPLE_REWARD, completions=completions, answer="7")
    assert result.scores == [float(i == 7) for i in range(custom.MAX_COMPLETIONS)]


def test_prints_are_captured():
    assert run(reward_code("print('hello from the reward')")).stdout == "hello from the reward\n"


def test_disabled_unless_the_owner_enables_it(monkeypatch):
    monkeypatch.delenv(custom.ENABLE_ENV)
    assert not custom.custom_reward_enabled()
    result = run(EXAMPLE_REWARD)
    assert result.scores is None and custom.ENABLE_ENV in result.error


# --- clear errors for bad code or bad results -------------------------------------------------------------

@pytest.mark.parametrize("code, expected", [
    ("def reward(completions, answer, **kwargs)\n    return [1.0]\n", "syntax error on line 1"),  # missing colon
    ("def score(completions, answer, **kwargs):\n    return [1.0]\n", "no function named `reward`"),  # wrong name
    ("def reward(completions, answer, **kwargs):\n    return 1.0\n", "returned float"),  # not a list
    ("def reward(completions, answer, **kwargs):\n    return [1.0, 2.0]\n", "returned 2 scores for 1"),  # wrong length
    ("def reward(completions, answer, **kwargs):\n    return ['1.0']\n", "score 0 is str"),  # text is not a score
    ("def reward(completions, answer, **kwargs):\n    return [None]\n", "score 0 is NoneType"),  # no skipping here
    ("def reward(completions, answer, **kwargs):\n    return [True]\n", "score 0 is bool"),  # bool is not a score
    ("def reward(completions, answer, **kwargs):\n    return [float('nan')]\n", "score 0 is nan"),  # breaks advantages
    ("def reward(completions, answer, **kwargs):\n    return [1e400]\n", "score 0 is inf"),  # overflows to inf
    ("def reward(completions, answer, **kwargs):\n    return [1 / 0]\n", "ZeroDivisionError"),  # user's exception
    ("import numpy\ndef reward(completions, answer, **kwargs):\n    return [1.0]\n", "No module named 'numpy'"),  # stdlib only
])
def test_bad_code_gets_a_clear_error(code, expected):
    result = run(code)
    assert result.scores is None
    assert expected in result.error, result.error


def test_traceback_shows_the_users_line_not_the_worker():
    result = run("def reward(completions, answer, **kwargs):\n    x = {}\n    return [x['missing']]\n")
    assert 'File "<reward>", line 3' in result.error and "KeyError" in result.error
    assert "custom_worker" not in result.error and "<string>" not in result.error


@pytest.mark.parametrize("code, completions, expected", [
    ("x" * (custom.MAX_CODE_CHARS + 1), ["a"], "the limit is 20,000"),
    ("", ["a"], "no code given"),
    (EXAMPLE_REWARD, [], "got 0 completions"),
    (EXAMPLE_REWARD, ["a"] * (custom.MAX_COMPLETIONS + 1), "got 65 completions"),
    (EXAMPLE_REWARD, ["a" * (custom.MAX_INPUT_CHARS + 1)], "the limit is 200,000"),
    (EXAMPLE_REWARD, [3], "list of strings"),
])
def test_oversized_or_malformed_input_is_refused_before_any_process_starts(code, completions, expected):
    assert expected in run_custom_reward(code, completions, "1").error


@pytest.mark.parametrize("namespaces", MODES)
def test_the_code_never_runs_when_its_filter_does_not_load(namespaces, monkeypatch):
    # A program the kernel refuses (one record, no return): the launcher stops before it forks the code.
    monkeypatch.setattr(custom.jail, "seccomp_program", lambda scratch_files: bytes(8))
    result = run(reward_code("print('ran')"), namespaces)
    assert result.scores is None and result.stdout == "", result.stdout
    assert result.error == "could not confine the reward process: [Errno 22] cannot load a seccomp filter"


def test_limits_cap_the_wall_clock_at_two_seconds():
    with pytest.raises(ValueError, match="at most 2 s per group"):
        Limits(wall_seconds=3)


@pytest.fixture
def slow_start(monkeypatch):
    """The worker's interpreter behind a shell that first sleeps 2.5 s, longer than any wall limit: a loaded
    machine's slow start, made sure (plain mode only: the jail shows nothing outside /usr)."""
    folder = tempfile.mkdtemp(prefix="grpo-slow-start-")
    wrapper = Path(folder, "python")
    wrapper.write_text(f'#!/bin/sh\nsleep 2.5\nexec {custom._interpreter(os.geteuid() == 0)} "$@"\n')
    os.chmod(folder, 0o755)
    os.chmod(wrapper, 0o755)
    monkeypatch.setattr(custom, "_interpreter", lambda drop_to_nobody: str(wrapper))
    yield
    shutil.rmtree(folder)


def test_the_wall_limit_is_the_codes_time_not_the_sandboxs_start(slow_start):
    # The default (and most) 2-s limit and a 2.5-s start: before, the start counted and a fast reward timed out.
    start = time.monotonic()
    result = run(reward_code("pass"), False)
    assert time.monotonic() - start > 2.5  # the start alone was over the limit
    assert result.error is None and result.scores == [1.0], result.error


def test_slow_code_after_a_slow_start_still_times_out(slow_start):
    result = run(reward_code("import time\ntime.sleep(1.5)"), False, wall_seconds=0.5)
    assert result.timed_out and result.scores is None
    assert result.error.startswith("timed out: the reward did not finish within 0.5 s"), result.error


def test_a_sandbox_that_does_not_start_in_time_says_so(slow_start, monkeypatch):
    monkeypatch.setattr(custom, "START_SECONDS", 0.3)
    result = run(reward_code("print('ran')"), False)
    assert result.timed_out and result.scores is None and result.stdout == ""
    assert result.error.startswith("the reward sandbox did not start within 0.3 s: the machine is overloaded"), \
        result.error


# --- attacks, one property each ---------------------------------------------------------------------------

@pytest.mark.parametrize("namespaces", MODES)
def test_infinite_loop_times_out(namespaces):
    start = time.monotonic()
    result = run(reward_code("while True:\n    pass"), namespaces)
    assert time.monotonic() - start < custom.START_SECONDS + 2 + 1  # the start's bound, then the code's 2 s
    assert result.timed_out and result.scores is None and "timed out" in result.error


@pytest.mark.parametrize("namespaces", MODES)
def test_cpu_limit_is_reported_as_such(namespaces):
    # RLIMIT_CPU ends the code with SIGXCPU. On 2 shared cores a busy loop meets the wall clock first, so
    # the signal is raised directly: this checks that its report survives the launcher (and unshare).
    result = run(reward_code("import signal\nos.kill(os.getpid(), signal.SIGXCPU)"), namespaces)
    assert result.scores is None and "CPU time limit exceeded" in result.error, result.error


@pytest.mark.parametrize("namespaces", MODES)
def test_memory_bomb_hits_the_memory_limit(namespaces):
    result = run(reward_code("hog = bytearray(1024 ** 3)"), namespaces, memory_mb=128)
    assert result.memory_exceeded and result.scores is None and "memory limit" in result.error


@pytest.mark.parametrize("namespaces", MODES)
@pytest.mark.parametrize("body, expected", [
    ("while True:\n    os.fork()", "Resource temporarily unavailable"),  # the classic fork bomb
    ("import threading\nthreading.Thread(target=print).start()", "can't start new thread"),  # threads are tasks
    ("import subprocess\nsubprocess.run(['sh', '-c', 'sleep 100 &'])", "Resource temporarily unavailable"),
])
def test_no_child_processes(namespaces, body, expected):
    result = run(reward_code(body), namespaces)
    assert result.scores is None and expected in result.error, result.error


@pytest.mark.parametrize("namespaces", MODES)
def test_killing_its_parent_does_not_reach_the_app(namespaces):
    # The code's parent is an intermediate launcher, not this process (the app): if the kill reached the
    # app, this test process would die and the test run with it. (The filter refuses the kill anyway.)
    result = run(reward_code("import signal\nprint(os.getppid())\nos.kill(os.getppid(), signal.SIGKILL)"), namespaces)
    if not namespaces:  # a PID namespace numbers its own processes: its pids may equal the app's by chance
        assert int(result.stdout) != os.getpid()
    assert run(EXAMPLE_REWARD, namespaces, ["4"], "4").scores == [1.0]  # and the next call works


@pytest.mark.parametrize("namespaces", MODES)
def test_the_app_cannot_be_found_and_killed_through_proc(namespaces):
    # Walks up the PPid chain in /proc and SIGKILLs every ancestor it can: the app must survive (the filter
    # lets the code signal only itself; before, a non-root app's plain-mode code killed it).
    body = """
    import signal
    pid = os.getppid()
    while pid > 1:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        with open(f'/proc/{pid}/status') as f:
            pid = int([l for l in f if l.startswith('PPid:')][0].split()[1])
    """
    run(reward_code(body), namespaces)
    assert run(EXAMPLE_REWARD, namespaces, ["4"], "4").scores == [1.0]


@pytest.mark.parametrize("namespaces", MODES)
def test_secrets_in_the_apps_environment_are_not_visible(namespaces, monkeypatch):
    secrets = {"HF_TOKEN": "hf_secret", "SWANLAB_API_KEY": "swan_secret", "GRPO_PLAYGROUND_OWNER_TOKEN": "owner"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    result = run(reward_code("print(sorted(os.environ.items()))"), namespaces)
    assert result.error is None
    for name, value in secrets.items():
        assert name not in result.stdout and value not in result.stdout


@pytest.mark.parametrize("namespaces", MODES)
def test_huge_output_is_truncated(namespaces):
    start = time.monotonic()
    result = run(reward_code("print('x' * 50_000_000)"), namespaces, output_chars=1000)
    assert time.monotonic() - start < 3.5
    assert result.scores == [1.0]
    assert len(result.stdout) < 1100 and "output truncated: 50,000,001 bytes" in result.stdout


@pytest.mark.parametrize("namespaces", MODES)
def test_cwd_is_a_fresh_empty_temp_dir_that_is_deleted_afterwards(namespaces):
    result = run(reward_code("print(os.getcwd(), os.listdir('.'))"), namespaces)
    cwd, listing = result.stdout.split(" ", 1)
    assert listing.strip() == "[]" and result.scores == [1.0]
    assert not os.path.exists(cwd) or cwd == "/tmp"  # the jail's cwd is its private tmpfs


@pytest.mark.skipif(not HAS_NAMESPACES, reason="only the jail has scratch files (its private /tmp)")
def test_scratch_files_in_the_jail_vanish_with_it():
    result = run(reward_code("open('scratch.txt', 'w').write('ok')\nprint(open('scratch.txt').read())"))
    assert result.stdout == "ok\n" and result.scores == [1.0]
    assert not Path("/tmp/scratch.txt").exists()


@pytest.mark.skipif(not HAS_NAMESPACES, reason="only the jail has scratch files: the plain mode writes none")
def test_file_size_is_limited():
    result = run(reward_code("open('big.bin', 'wb').write(b'0' * (2 << 20))"), file_mb=1)
    assert result.scores is None and "File too large" in result.error, result.error


@pytest.mark.parametrize("namespaces", MODES)
@pytest.mark.parametrize("folder", ["/tmp", "/dev/shm", "/var/tmp"])
def test_world_writable_folders_of_the_host_cannot_be_written(namespaces, folder):
    target = Path(folder, f"grpo-escape-{uuid.uuid4().hex}")
    result = run(reward_code(f"open({str(target)!r}, 'w').write('escaped')"), namespaces)
    assert not target.exists()
    if not namespaces:  # the filter lets open() only read: nothing is created anywhere
        assert "Operation not permitted" in result.error, result.error
    elif folder == "/tmp":  # the jail's private, capped tmpfs: the write lands there and vanishes with it
        assert result.scores == [1.0], result.error
    else:  # the jail's /dev is read-only (its pages would be host memory) and it has no /var
        assert ("Read-only file system" if folder == "/dev/shm" else "No such file or directory") in result.error


@pytest.mark.parametrize("namespaces", MODES)
@pytest.mark.parametrize("attack", [
    "open({target!r}, 'w').write('escaped')", "os.mkdir({target!r})", "os.rename({folder!r} + '/keep', {target!r})",
    "os.unlink({folder!r} + '/keep')"])
def test_the_apps_own_folders_cannot_be_changed(namespaces, attack):
    # A folder the code's user may write (for a non-root app: its runs/, its source): before, the plain mode
    # wrote, renamed and deleted there.
    folder = Path(tempfile.mkdtemp(prefix="grpo-app-"))
    folder.chmod(0o777)
    (folder / "keep").write_text("the app's")
    target = folder / "planted.py"
    try:
        result = run(reward_code(attack.format(target=str(target), folder=str(folder))), namespaces)
        assert sorted(os.listdir(folder)) == ["keep"] and result.scores is None, result.stdout
        assert ("No such file or directory" if namespaces else "Operation not permitted") in result.error
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("namespaces", MODES)
def test_no_network(namespaces):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        result = run(reward_code(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)"),
                     namespaces)
    # The filter refuses socket() itself; the jail also has its own network namespace (only its loopback).
    assert result.scores is None and "Operation not permitted" in result.error, result.error


@pytest.mark.parametrize("namespaces", MODES)
def test_runs_in_its_own_session(namespaces, monkeypatch):
    # Seen from the app's side: inside a PID namespace (the sandbox's, or a CI container's) getsid() reads 0
    # for a session leader it cannot see, so asking the code itself proves nothing.
    sessions = []
    kill_group = custom._kill_group

    def record_then_kill(proc):
        sessions.append((proc.pid, os.getsid(proc.pid)))  # not reaped yet: its ids are still readable
        kill_group(proc)

    monkeypatch.setattr(custom, "_kill_group", record_then_kill)
    assert run(reward_code("pass"), namespaces).error is None
    (pid, session), = sessions
    assert session == pid != os.getsid(0)  # it leads a session of its own, apart from the app's


@pytest.mark.skipif(not HAS_NAMESPACES, reason="without namespaces /proc shows every process")
def test_app_processes_are_invisible_with_namespaces():
    result = run(reward_code("print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"))
    # A fresh PID namespace that holds only the launcher (pid 1) and the code (comparing with the app's pids
    # would be meaningless: the app may itself run as pid 1 or 2 in a container). Before, bwrap's own
    # reaper, dumpable and unfiltered, was pid 1 there too.
    assert json.loads(result.stdout) == [1, 2]


FD_COUNT = """
import os
from grpo_playground.rewards.custom import EXAMPLE_REWARD, Limits, run_custom_reward
def run(code, **limits):
    run_custom_reward(code, ["a"], "1", Limits(**limits))
run(EXAMPLE_REWARD)  # the namespace probe and lazy imports open what they keep before we count
before = len(os.listdir("/proc/self/fd"))
run(EXAMPLE_REWARD)
run("def reward(completions, answer, **kwargs):\\n    while True:\\n        pass\\n", wall_seconds=0.5)
run("def reward(completions, answer, **kwargs):\\n    print('x' * 1_000_000)\\n    return [1.0]\\n")
print(before, len(os.listdir("/proc/self/fd")))
"""


def test_no_file_descriptors_leak_even_after_a_timeout():
    # The app calls this on every edit for hours: each pipe or selector left open would add up. Counted in a
    # fresh interpreter: in this one, other tests' math-verify checkers restart in the background and open pipes.
    out = subprocess.run([sys.executable, "-c", FD_COUNT], capture_output=True, text=True, timeout=120,
                         env={**os.environ, custom.ENABLE_ENV: "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = map(int, out.stdout.split())
    assert after == before


def test_concurrent_calls_each_get_their_own_scores():
    # Gradio runs up to 4 events at once: calls from several threads must not mix pipes or results.
    from concurrent.futures import ThreadPoolExecutor

    code = "def reward(completions, answer, **kwargs):\n    return [float(c) * 10 for c in completions]\n"
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: run(code, completions=[str(i), str(i + 1)]), range(8)))
    assert [r.scores for r in results] == [[i * 10.0, (i + 1) * 10.0] for i in range(8)]
