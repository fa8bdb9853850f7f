"""The product installs and trains: a wheel built from this checkout, installed into a fresh venv, starts a `quick`
SFT + GRPO job through the app's own Start path, and runs a tiny "GRPO vs more SFT" comparison with
`grpo-playground compare`, both in a folder outside the checkout.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_installed_package.py

Offline: the wheel is built without build isolation (setuptools from this venv) and installed with --no-deps; the
new venv sees this venv's packages (torch, trl, ...) through a .pth line after its own site-packages, so what it
imports of grpo_playground is the wheel's copy and nothing of the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

START_QUICK_FROM_THE_APP = textwrap.dedent("""
    import sys, time
    import grpo_playground
    from grpo_playground.contracts.states import FINAL_STATES
    from grpo_playground.jobs.control import start_run
    from grpo_playground.jobs.runs import load_run, reconcile
    from grpo_playground.config import apply_overrides, load_recipe
    from grpo_playground.contracts.shipped import recipe_path

    print("package", grpo_playground.__file__, flush=True)
    config = apply_overrides(load_recipe(recipe_path("quick")), sys.argv[1:])
    info = start_run(config, name="installed")
    deadline = time.time() + 900
    while reconcile(load_run(info.path)).state not in FINAL_STATES and time.time() < deadline:
        time.sleep(1)
    print("run", info.path, load_run(info.path).state, flush=True)
""")


# without PYTHONPATH: a checkout's src/ (and its egg-info) on the path would stand in for the wheel, even to pip
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", CLEAN_ENV)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@dataclass(frozen=True)
class Installed:
    venv: Path  # the fresh venv holding the wheel
    site: Path  # its site-packages
    outside: Path  # a folder with no checkout: no pipelines/, no src/, no recipes/
    env: dict  # the environment the installed product runs in (its runs folder under `outside`)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """A wheel built from this checkout, installed into a fresh venv (built once for this file's tests)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
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
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**CLEAN_ENV, "GRPO_PLAYGROUND_RUNS_DIR": str(outside / "runs"), "OMP_NUM_THREADS": "1"}
    return Installed(venv, site, outside, env)


def test_a_wheel_installed_in_a_fresh_venv_trains_quick_from_the_app(installed):
    python, outside, env, site = installed.python, installed.outside, installed.env, installed.site
    usage = _run([str(installed.venv / "bin" / "grpo-playground"), "--help"], cwd=outside, env=env).stdout
    assert "train" in usage and "export" in usage and "compare" in usage
    # quick with fewer steps, smaller batches and shorter completions (CI time): the stages, the pre-flight and the
    # app's path are the same
    done = _run([str(python), "-c", START_QUICK_FROM_THE_APP, "sft.max_steps=4", "grpo.max_steps=2",
                 "grpo.on_preflight_error=continue", "grpo.preflight_prompts=2", "sft.per_device_train_batch_size=4",
                 "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=32"], cwd=outside, env=env)
    package = done.stdout.split("package ", 1)[1].split()[0]
    assert package.startswith(str(site)), f"imported {package}, not the installed wheel"
    run_dir, state = done.stdout.split("run ", 1)[1].split()[:2]
    log = (Path(run_dir) / "log.txt").read_text()
    assert state == "finished", log[-3000:]
    assert "grpo_playground.cli.train" in log  # the app started the package's CLI, not a checkout's script
    assert all((Path(run_dir) / stage / "adapter_config.json").is_file() for stage in ("sft", "grpo"))


def test_the_installed_wheel_runs_a_comparison_that_trains_every_arm(installed):
    """`grpo-playground compare` from the wheel, outside any checkout, on the shipped tiny-cpu recipe with the
    smallest sets: every arm really trains (sft-W, GRPO, more SFT, fresh SFT: adapters written) and is scored by
    the eval CLI on the same held-out prompts; the report names each arm."""
    compare = [str(installed.venv / "bin" / "grpo-playground"), "compare"]
    assert "--n-worked" in _run([*compare, "--help"], cwd=installed.outside, env=installed.env).stdout
    work, out = installed.outside / "compare", installed.outside / "result"
    # T of 0.6 s (the panel's least is 3 s): each arm still trains a step or more, as the adapters show
    done = _run([*compare, "--n-worked", "8", "--n-answers", "8", "--n-eval", "2", "--minutes", "0.01",
                 "--round-steps", "1", "--max-rounds", "1", "--format-target", "0", "--preflight-prompts", "1",
                 "--set", "sft.per_device_train_batch_size=4", "--set", "grpo.per_device_train_batch_size=8",
                 "--set", "grpo.max_completion_length=32", "--work", str(work), "--out", str(out)],
                cwd=installed.outside, env=installed.env)
    assert f"$ {installed.python} -m grpo_playground.cli.train" in done.stdout  # the wheel's own CLIs, as children
    result = json.loads(out.with_suffix(".json").read_text())
    arms = ("sft_w", "sft_w+grpo_a", "sft_w+more_sft_w", "sft_w+fresh_sft")
    assert set(result["eval"]) == set(arms) and all(result["eval"][arm]["n"] == 2 for arm in arms)
    assert all(result["steps"][arm] >= 1 for arm in arms)
    for folder, stage in (("sft_w_round0", "sft"), ("grpo_a", "grpo"), ("more_sft_w", "sft"), ("fresh_sft", "sft")):
        assert (work / folder / stage / "adapter_model.safetensors").is_file(), folder
    assert "| sft_w+grpo_a |" in out.with_suffix(".md").read_text()
