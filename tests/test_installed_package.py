"""The product installs and trains: a wheel built from this checkout, installed into a fresh venv, starts a `quick`
SFT + GRPO job through the app's own Start path, in a folder outside the checkout.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_installed_package.py

Offline: the wheel is built without build isolation (setuptools from this venv) and installed with --no-deps; the
new venv sees this venv's packages (torch, trl, ...) through a .pth line after its own site-packages, so what it
imports of grpo_playground is the wheel's copy and nothing of the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

START_QUICK_FROM_THE_APP = textwrap.dedent("""
    import sys, time
    import grpo_playground
    from grpo_playground import jobs
    from grpo_playground.config import apply_overrides, load_recipe
    from grpo_playground.contracts.shipped import recipe_path

    print("package", grpo_playground.__file__, flush=True)
    config = apply_overrides(load_recipe(recipe_path("quick")), sys.argv[1:])
    info = jobs.start_run(config, name="installed")
    deadline = time.time() + 900
    while jobs.reconcile(jobs.load_run(info.path)).state not in jobs.FINAL_STATES and time.time() < deadline:
        time.sleep(1)
    print("run", info.path, jobs.load_run(info.path).state, flush=True)
""")


# without PYTHONPATH: a checkout's src/ (and its egg-info) on the path would stand in for the wheel, even to pip
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", CLEAN_ENV)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_a_wheel_installed_in_a_fresh_venv_trains_quick_from_the_app(tmp_path):
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
          str(source)])
    wheel = next((tmp_path / "dist").glob("grpo_playground-*.whl"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)])
    (site / "zz_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")  # after the wheel's own copy

    outside = tmp_path / "elsewhere"  # no checkout here: no pipelines/, no src/, no recipes/
    outside.mkdir()
    env = {**CLEAN_ENV, "GRPO_PLAYGROUND_RUNS_DIR": str(outside / "runs"), "OMP_NUM_THREADS": "1"}
    usage = _run([str(venv / "bin" / "grpo-playground"), "--help"], cwd=outside, env=env).stdout
    assert "train" in usage and "export" in usage
    # quick with fewer steps (CI time): the stages, the pre-flight and the app's path are the same
    done = _run([str(python), "-c", START_QUICK_FROM_THE_APP, "sft.max_steps=4", "grpo.max_steps=2",
                 "grpo.on_preflight_error=continue", "grpo.preflight_prompts=2"], cwd=outside, env=env)
    package = done.stdout.split("package ", 1)[1].split()[0]
    assert package.startswith(str(site)), f"imported {package}, not the installed wheel"
    run_dir, state = done.stdout.split("run ", 1)[1].split()[:2]
    log = (Path(run_dir) / "log.txt").read_text()
    assert state == "finished", log[-3000:]
    assert "grpo_playground.cli.train" in log  # the app started the package's CLI, not a checkout's script
    assert all((Path(run_dir) / stage / "adapter_config.json").is_file() for stage in ("sft", "grpo"))
