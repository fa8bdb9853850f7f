"""Shared fixtures and the test tiers. Tests run offline, single-threaded (2 shared cores: more threads made steps
50-300x slower).

Tiers: a test that uses a fixture of TIERS is marked with that fixture's tier (its cost comes from what the fixture
starts); a test with no tier is `fast`, the inner loop:

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -m fast

A fast test whose call takes longer than FAST_LIMIT_S fails, saying which tier to give it.
"""

from __future__ import annotations

import atexit
import importlib._bootstrap
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("SWANLAB_MODE", "disabled")
# Each test process (each xdist worker) gets its own Gradio upload folder, which the apps it starts inherit: apps of
# the other worker sweep aged files from theirs (tests age files to prove the sweep), and a shared folder let that
# sweep delete files between a test's measure of the folder and its upload (a cap test saw 200 where 507 was due).
os.environ["GRADIO_TEMP_DIR"] = tempfile.mkdtemp(prefix="gradio-tests-", dir=os.environ.get("GRADIO_TEMP_DIR"))
atexit.register(shutil.rmtree, os.environ["GRADIO_TEMP_DIR"], ignore_errors=True)

import pytest  # noqa: E402

from shared_comparison import finished_comparison  # noqa: E402,F401  (a session fixture: registered here)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

# --- tiers ---------------------------------------------------------------------------------------------------------

# Fixture -> the tier of every test that uses it, directly or through another fixture. Add a fixture here when it
# starts something that costs seconds (an app, a browser, a training run, a conversion, a wheel build).
TIERS = {
    "app_url": "app",  # the real app in this process: gradio's import and launch
    "custom_reward_app_url": "app",  # `python app.py` in a child process
    "browser": "browser",  # headless chromium (every page fixture uses it)
    "trainer": "slow",  # the training CLI in a child process
    "exported_lora_run": "slow",  # tests/test_export.py: a LoRA trained, converted and quantized by llama.cpp
    "exported_format_run": "slow",
    "finished_comparison": "slow",  # tests/shared_comparison.py: a real tiny comparison, every arm trained
}
TIER_NAMES = ("slow", "browser", "app")
# A fast test's call may take this long, in wall time and in the CPU time of the thread that runs it, first imports
# of a library not counted (the first test of a selection to import torch pays for every later one). On a machine
# busier than its cores the wall-time limit grows with the load, so other work does not fail a test while the CPU-time
# limit still holds. (Children's CPU is not counted: a job an earlier test left running is reaped, and its CPU
# charged to the process, whenever it ends.) GRPO_PLAYGROUND_FAST_TEST_S moves both limits, 0 turns the check off.
FAST_LIMIT_S = float(os.environ.get("GRPO_PLAYGROUND_FAST_TEST_S", "5"))


# --- parallel workers (pytest-xdist, the README's full command: -n 3 --dist loadgroup) --------------------------------

# A session fixture that trains is built once per worker: the tests that read it share one worker, with it.
SHARED_RUNS = ("finished_comparison",)
# The longest work units (a file, or a SHARED_RUNS group), longest first, measured on 2 cores (JUnit of a full run;
# the shortened quick demo in the browser and Space end to end by their own runs beside the others, as ratios):
# handed out first, they run beside each other and the short files fill in around them, instead of one of them
# starting last and running alone. The others follow in collection order.
LONGEST_FIRST = ("tests/test_export.py", "tests/test_train_cli.py",
                 "tests/browser/test_e2e_flow.py", "tests/test_space_e2e.py", "finished_comparison",
                 "tests/browser/test_quick_browser.py", "tests/test_resume.py", "tests/test_training_tab.py")


def work_unit(item) -> str:
    """A test's unit: the shared run it reads (on the worker that built it), else its file (module fixtures are
    built once)."""
    return next((name for name in SHARED_RUNS if name in item.fixturenames), item.nodeid.split("::")[0])


def pytest_configure(config):
    if config.getoption("dist", "no") == "loadgroup":
        config.option.loadscopereorder = False  # LONGEST_FIRST orders the units, not xdist's count of their tests


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks, and before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        for tier in sorted({TIERS[name] for name in item.fixturenames if name in TIERS}):
            item.add_marker(tier)
        if not any(item.get_closest_marker(tier) for tier in TIER_NAMES):
            item.add_marker("fast")
    if getattr(config.option, "loadgroup", False):  # an xdist worker: every worker collects the same order
        rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
        for item in items:
            item.add_marker(pytest.mark.xdist_group(work_unit(item)))
        items.sort(key=lambda item: rank.get(work_unit(item), len(rank)))


class FirstImports:
    """Seconds this thread spends importing modules not imported before. importlib's _find_and_load runs only for
    those (the import statement and importlib.import_module both look it up on the module at each call)."""

    def __init__(self):
        self.seconds, self._depth, self._thread = 0.0, 0, threading.get_ident()

    def __enter__(self):
        self._original = original = importlib._bootstrap._find_and_load

        def timed(name, import_):
            if self._depth or threading.get_ident() != self._thread:  # the outermost import holds the inner ones
                return original(name, import_)
            self._depth, start = 1, time.perf_counter()
            try:
                return original(name, import_)
            finally:
                self._depth, self.seconds = 0, self.seconds + time.perf_counter() - start

        importlib._bootstrap._find_and_load = timed
        return self

    def __exit__(self, *exc):
        importlib._bootstrap._find_and_load = self._original


def wall_limit_s() -> float:
    return FAST_LIMIT_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not FAST_LIMIT_S or not item.get_closest_marker("fast"):
        return (yield)
    wall, cpu = time.perf_counter(), cpu_s()
    with FirstImports() as imports:
        result = yield
    wall, cpu = time.perf_counter() - wall - imports.seconds, max(0.0, cpu_s() - cpu - imports.seconds)
    if wall > wall_limit_s() or cpu > FAST_LIMIT_S:
        pytest.fail(f"{item.nodeid} took {wall:.1f} s, {cpu:.1f} s of CPU (first imports not counted: "
                    f"{imports.seconds:.1f} s), over the fast tier's {FAST_LIMIT_S:g} s (wall time: "
                    f"{wall_limit_s():.1f} s at this load). Give it its cost: use the fixture that starts what it "
                    f"waits for ({', '.join(sorted(TIERS))}) or, if it trains, converts or waits on a child process, "
                    "mark it @pytest.mark.slow; or make it faster. GRPO_PLAYGROUND_FAST_TEST_S=SECONDS moves the "
                    "limit.",
                    pytrace=False)
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_module(tmp_path_factory):
    """The app's module, its demo built but not served (for tests that read its events and components), with its
    runs in a temp folder. Not a tier: building the demo costs its first import only."""
    os.environ["GRPO_PLAYGROUND_RUNS_DIR"] = str(tmp_path_factory.mktemp("runs"))
    import app

    return app


@pytest.fixture(scope="session")
def app_url(app_module):
    """The real app, launched once per test session on a free port, with its runs in a temp folder."""
    from grpo_playground.ui.public_limits import serve

    port = free_port()
    serve(app_module.demo, server_name="127.0.0.1", server_port=port, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    app_module.demo.close()
    kill_leftover_jobs()


def kill_leftover_jobs() -> None:
    """Jobs outlive the app by design; a test that failed half-way must not leave one training on shared cores."""
    from grpo_playground.contracts.process import kill_group
    from grpo_playground.contracts.states import ACTIVE_STATES
    from grpo_playground.jobs.runs import list_runs

    for info in list_runs():
        if info.state in ACTIVE_STATES and info.job.get("pid"):
            kill_group(info.job["pid"])


@pytest.fixture
def trainer():
    """trainer(*ARGS) runs `python -m pipelines.train ARGS` as the app does, in a child process, and returns it
    finished (text stdout and stderr). Each child pays ~7 s for TRL's import before its first step."""
    from grpo_playground.child_process import python_child_env

    def train(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        env = python_child_env(OMP_NUM_THREADS="1", SWANLAB_MODE="disabled")
        return subprocess.run([sys.executable, "-m", "pipelines.train", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout)

    return train


@pytest.fixture
def fake_trainer(monkeypatch):
    """Training jobs that the app in this process starts or resumes run tests/fake_trainer.py (the real job with
    the model's parts replaced: no torch, a step every 0.05 s, the same run folder; tests/test_fake_trainer.py
    holds it to the real one) with the training CLI's own arguments. For tests of plumbing, never of learning."""
    from grpo_playground.jobs import control

    real_command = control.train_command

    def fake_command(run_dir: Path, stage: str = "all", resume: bool = False) -> list[str]:
        python, _, _, *args = real_command(run_dir, stage, resume)  # python -m MODULE ARGS
        return [python, str(ROOT / "tests" / "fake_trainer.py"), *args]

    monkeypatch.setattr(control, "train_command", fake_command)


@pytest.fixture
def fake_experiment(monkeypatch):
    """Comparisons that the app in this process starts or resumes run tests/fake_experiment.py (the real experiment
    driver, its training by tests/fake_trainer.py, its scoring over fixed completions: seconds, not minutes;
    tests/test_fake_experiment.py holds it to a real comparison) with the experiment's own arguments. The job's
    record, and so the panel, still show the real command. For tests of plumbing, never of a result."""
    from grpo_playground.cli.args import CompareArgs
    from grpo_playground.jobs import kinds

    real_start = kinds.start_job

    def start_fake(path, kind, steps, *args, **kwargs):
        for step in steps if kind == kinds.COMPARE.name else ():
            python, flag, module, *arguments = step["argv"]
            assert (flag, module) == ("-m", CompareArgs.MODULE), step["argv"]
            step["argv"] = [python, str(ROOT / "tests" / "fake_experiment.py"), *arguments]
        return real_start(path, kind, steps, *args, **kwargs)

    monkeypatch.setattr(kinds, "start_job", start_fake)

