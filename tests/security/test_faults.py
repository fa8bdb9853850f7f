"""Faults reported as what they are, and nothing lost or left behind (issue 12, item 6).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/security/test_faults.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grpo_playground.jobs.control import spawn_job, stop_run
from grpo_playground.jobs.runs import load_run, reconcile
from grpo_playground.jobs.crash import crash_reason, oom_kill_count
from grpo_playground.contracts.process import is_alive
from grpo_playground.jobs.runs import compact_metrics
from grpo_playground.run_layout import new_run_id, write_status

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("GRPO_PLAYGROUND_STOP_GRACE_S", "20")
    return tmp_path


def make_run(runs: Path) -> Path:
    run_dir = runs / new_run_id("t")
    run_dir.mkdir()
    write_status(run_dir, state="created", step=0)
    return run_dir


def job(code: str, run_dir: Path) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), str(run_dir)]


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def state(run_dir: Path) -> str:
    return reconcile(load_run(run_dir)).state


@pytest.mark.skipif(oom_kill_count() is None, reason="this kernel has no oom_kill count in /proc/vmstat")
def test_a_signal_kill_is_not_blamed_on_the_oom_killer(runs):
    # Before: any SIGKILL read "often the kernel's out-of-memory killer", sending users to shrink batches.
    run_dir = make_run(runs)
    spawn_job(run_dir, job("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", run_dir))
    wait_for(lambda: state(run_dir) == "failed", what="failed")
    reason = load_run(run_dir).status["reason"]
    assert "killed by SIGKILL, sent by another process" in reason and "out-of-memory killer" not in reason


@pytest.mark.skipif(oom_kill_count() is None, reason="this kernel has no oom_kill count in /proc/vmstat")
def test_the_oom_killer_is_named_when_the_kernel_counted_one(tmp_path):
    (tmp_path / "log.txt").write_text("grpo step 3\n")
    before = oom_kill_count() - 1  # as if the kernel had counted one OOM kill since the job started
    assert "out-of-memory killer" in crash_reason(tmp_path, -9, before)


REPLAYS_STEPS = """
import json, sys, pathlib
run, first, last, value = pathlib.Path(sys.argv[1]), *map(int, sys.argv[2:5])
with open(run / "metrics.jsonl", "a") as f:
    for step in range(first, last + 1):
        f.write(json.dumps({"stage": "grpo", "step": step, "reward": value}) + "\\n")
        f.write(json.dumps({"stage": "grpo", "step": step, "timing/step_s": value}) + "\\n")
"""


def test_resume_leaves_no_duplicate_metric_rows(runs):
    # A job logs steps 1-4 and is stopped; its last checkpoint was step 2, so the resumed job logs 3-5 again.
    run_dir = make_run(runs)
    spawn_job(run_dir, job(REPLAYS_STEPS, run_dir) + ["1", "4", "1"])
    wait_for(lambda: state(run_dir) == "finished", what="first attempt")
    spawn_job(run_dir, job(REPLAYS_STEPS, run_dir) + ["3", "5", "2"])
    wait_for(lambda: state(run_dir) == "finished", what="resumed attempt")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rewards = [(r["step"], r["reward"]) for r in rows if "reward" in r]
    assert rewards == [(1, 1), (2, 1), (3, 2), (4, 2), (5, 2)]  # each step once, the replayed write kept
    assert [r["step"] for r in rows if "timing/step_s" in r] == [1, 2, 3, 4, 5]  # timing rows kept beside them


def test_compacting_keeps_a_half_written_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"stage": "sft", "step": 1, "loss": 2}\n{"stage": "sft", "step": 1, "loss": 1}\n{"stage": "s')
    assert compact_metrics(tmp_path) == 1
    assert path.read_text() == '{"stage": "sft", "step": 1, "loss": 1}\n{"stage": "s'


SAVES_ON_SIGTERM = """
import json, pathlib, signal, sys, time
run = pathlib.Path(sys.argv[1])
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
(run / "started").write_text("1")
while not stop:
    time.sleep(0.05)
(run / "checkpoint-saved").write_text("1")  # what the trainer does at its next step boundary
status = json.loads((run / "status.json").read_text()); status["state"] = "stopped"
(run / "status.json").write_text(json.dumps(status))
"""


def test_stop_checkpoints_even_when_the_supervisor_is_gone(runs):
    # Before: with the launcher killed, Stop SIGKILLed the whole group at once: the steps since the last
    # checkpoint were lost.
    run_dir = make_run(runs)
    info = spawn_job(run_dir, job(SAVES_ON_SIGTERM, run_dir))
    wait_for(lambda: (run_dir / "started").exists() and state(run_dir) == "running", what="running")
    os.kill(info.job["pid"], signal.SIGKILL)  # only the supervisor
    wait_for(lambda: not is_alive(info.job["pid"]), what="supervisor gone")
    stop_run(run_dir.name)
    wait_for(lambda: state(run_dir) == "stopped", what="stopped")
    assert (run_dir / "checkpoint-saved").exists()


APP_WITH_A_CHAT_SERVER = """
import sys
import gradio as gr
from grpo_playground.models import MODELS, gguf_path
from grpo_playground.serving.pool import POOL
from grpo_playground.serving.targets import ChatTarget
from grpo_playground.ui.app import launch

server, _, _ = POOL.server_for(ChatTarget("llama.cpp", str(gguf_path(MODELS["smollm2-135m"]))))
with gr.Blocks() as demo:
    gr.Markdown("app")
print(server.process.pid, server.port, flush=True)
launch(demo, quiet=True)
"""


@pytest.mark.slow  # the app and its chat servers as children
def test_sigterm_to_the_app_stops_its_chat_servers():
    # Before: SIGTERM ended the app without atexit: its llama.cpp server lived on (ppid 1, port held).
    from grpo_playground.child_process import free_port

    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "GRADIO_SERVER_PORT": str(free_port())}
    app = subprocess.Popen([sys.executable, "-c", APP_WITH_A_CHAT_SERVER], stdout=subprocess.PIPE, env=env,
                           start_new_session=True)
    server_pid = None
    try:
        server_pid = int(app.stdout.readline().split()[0])
        time.sleep(3)  # the app is serving
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=30) != 0
        wait_for(lambda: not is_alive(server_pid) or _zombie(server_pid), timeout=15, what="server gone")
    finally:
        if app.poll() is None:
            app.kill()
        if server_pid and is_alive(server_pid):
            os.killpg(server_pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


@pytest.mark.slow  # a llama.cpp server and a checker as children (3.8 s alone, 13.8 s under load)
def test_chat_servers_and_checkers_get_no_secret(monkeypatch):
    # Their /proc/<pid>/environ stays readable to same-user processes (unlike the non-dumpable app's).
    from grpo_playground.models import MODELS, gguf_path
    from grpo_playground.rewards.equivalence import EquivalenceWorker
    from grpo_playground.serving import llamacpp_server

    secret = "hf_do-not-leak"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("GRPO_PLAYGROUND_OWNER_TOKEN", secret)
    checker, server = EquivalenceWorker(), llamacpp_server(str(gguf_path(MODELS["smollm2-135m"])))
    try:
        checker.warm_up()
        server.start()
        for pid in (checker._proc.pid, checker._answerer, server.process.pid):
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert b"PATH=" in environ and secret.encode() not in environ
    finally:
        checker.close()
        server.stop()


DUMPS_ITS_ENVIRONMENT = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"


def test_jobs_get_the_hub_token_but_never_the_owner_token(runs, monkeypatch):
    # Before: training, eval and export jobs inherited the app's whole environment, the owner token with it, and
    # their /proc/<pid>/environ is readable by any same-user process (a custom reward's parent, a chat server).
    from grpo_playground.cli.args import ExportArgs
    from grpo_playground.jobs import comparisons, evals, exports
    from grpo_playground.jobs import eval_results as results

    owner, hub = "owner-do-not-leak", "hf_a-job-may-need-this"
    monkeypatch.setenv("GRPO_PLAYGROUND_OWNER_TOKEN", owner)
    monkeypatch.setenv("HF_TOKEN", hub)

    def dump(name: str) -> list[str]:
        return [sys.executable, "-c", DUMPS_ITS_ENVIRONMENT, str(runs / f"{name}.env.json")]

    run_dir = make_run(runs)
    spawn_job(run_dir, dump("train"))
    monkeypatch.setattr(results, "eval_command", lambda *args, **kwargs: dump("eval"))
    evals.start_eval_job(["tiny"], "generator:test", 2, 1, 8)
    trained = make_run(runs)
    write_status(trained, state="finished")
    (trained / "sft").mkdir()
    (trained / "sft" / "adapter_config.json").write_text("{}")
    monkeypatch.setattr(ExportArgs, "command", lambda self: dump("export"))
    exports.start_export(trained.name, token=owner)
    monkeypatch.setattr(comparisons, "experiment_command", lambda *args, **kwargs: dump("compare"))
    recipe = runs / "recipe.yaml"
    recipe.write_text("name: x\n")
    comparisons.start_comparison(recipe, "x", comparisons.ComparisonPlan())
    for name in ("train", "eval", "export", "compare"):
        path = runs / f"{name}.env.json"
        wait_for(lambda: path.is_file() and path.read_text().endswith("}"), what=f"the {name} job's environment")
        environ = json.loads(path.read_text())
        assert owner not in environ.values(), f"the {name} job holds the owner token"
        assert environ.get("HF_TOKEN") == hub, f"the {name} job lost HF_TOKEN"


REPLAYS_THEN_WAITS_FOR_SIGTERM = REPLAYS_STEPS + """
import signal, time
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
(run / "started").write_text("1")
while not stop:
    time.sleep(0.05)
status = json.loads((run / "status.json").read_text()); status["state"] = "stopped"
(run / "status.json").write_text(json.dumps(status))
"""


def test_stop_after_the_supervisor_died_leaves_no_duplicate_metric_rows(runs):
    # Before: the launcher compacts the rows a resumed job replays when the job ends; with the launcher killed,
    # Stop ended the job and nobody compacted: the replayed steps stayed twice until the next resume.
    run_dir = make_run(runs)
    spawn_job(run_dir, job(REPLAYS_STEPS, run_dir) + ["1", "4", "1"])
    wait_for(lambda: state(run_dir) == "finished", what="first attempt")
    info = spawn_job(run_dir, job(REPLAYS_THEN_WAITS_FOR_SIGTERM, run_dir) + ["3", "5", "2"])  # the resume
    wait_for(lambda: (run_dir / "started").exists() and state(run_dir) == "running", what="resumed attempt running")
    os.kill(info.job["pid"], signal.SIGKILL)  # only the supervisor
    wait_for(lambda: not is_alive(info.job["pid"]), what="supervisor gone")
    stop_run(run_dir.name)
    wait_for(lambda: state(run_dir) == "stopped" and not load_run(run_dir).processes_alive(), what="stopped")
    wait_for(lambda: len((run_dir / "metrics.jsonl").read_text().splitlines()) == 10, timeout=10,
             what="the replayed rows dropped")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["reward"]) for r in rows if "reward" in r] == [(1, 1), (2, 1), (3, 2), (4, 2), (5, 2)]


APP_ALONE = """
import gradio as gr
from grpo_playground.ui.app import launch

with gr.Blocks() as demo:
    gr.Markdown("app")
launch(demo, quiet=True)
"""


@pytest.mark.slow  # two apps and a chat server as children
def test_a_restarted_app_stops_the_chat_servers_a_killed_app_left(tmp_path):
    # Before: after SIGKILL (or the out-of-memory killer) the app's llama.cpp server lived on in its own session,
    # holding its memory and port, and the restarted app did not know it.
    from grpo_playground.child_process import free_port

    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "GRPO_PLAYGROUND_CACHE": str(tmp_path)}
    first = subprocess.Popen([sys.executable, "-c", APP_WITH_A_CHAT_SERVER], stdout=subprocess.PIPE,
                             env={**env, "GRADIO_SERVER_PORT": str(free_port())}, start_new_session=True)
    server_pid, second = None, None
    try:
        server_pid, port = map(int, first.stdout.readline().split())
        os.kill(first.pid, signal.SIGKILL)  # the app only, as the out-of-memory killer would
        first.wait(timeout=10)
        time.sleep(1)
        assert is_alive(server_pid) and _port_taken(port)  # the orphan, as before
        app_port = free_port()
        second = subprocess.Popen([sys.executable, "-c", APP_ALONE], env={**env, "GRADIO_SERVER_PORT": str(app_port)},
                                  start_new_session=True)
        wait_for(lambda: _port_taken(app_port), timeout=60, what="the restarted app serving")
        assert not is_alive(server_pid)
        wait_for(lambda: not _port_taken(port), timeout=10, what="the old server's port freed")
        assert not list((tmp_path / "chat_servers").glob("*.json"))
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        if server_pid and is_alive(server_pid):
            os.killpg(server_pid, signal.SIGKILL)


def _port_taken(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
