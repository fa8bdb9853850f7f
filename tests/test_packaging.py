"""The set-up promises: the CPU and GPU requirement sets share one list of pins and differ only where they must
(torch build, peft), the GPU set is the one that ran on the H200 and resolves for the image's Python and platform,
the Dockerfile, requirements and docs/deploy.md agree, the CPU set holds no CUDA-only package, and CI runs exactly
the README's test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What ran on the H200 (results/gpu/, docs/deploy.md): the GPU set must pin exactly these.
PROVEN_ON_H200 = {"torch": "2.11.0", "transformers": "5.17.0", "trl": "1.14.2", "peft": "0.21.0",
                  "accelerate": "1.15.0", "datasets": "4.8.5", "vllm": "0.22.0", "unsloth": "2026.10.9",
                  "unsloth-zoo": "2026.10.9", "bitsandbytes": "0.50.2"}
IMAGE_PYTHON = "3.12"
IMAGE_PLATFORM = "x86_64-manylinux_2_28"  # Ubuntu 24.04 (glibc 2.39) on x86-64 runs manylinux_2_28 wheels


def normalize(name: str) -> str:
    return name.lower().replace("_", "-")


def pins(name: str) -> dict[str, str]:
    """name -> version of every line in a requirement file, following `-r` includes, each pin seen once."""
    out: dict[str, str] = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        if line.startswith("-r"):
            included = pins(line[2:].strip())
            assert not set(included) & set(out), f"{name}: pinned twice: {set(included) & set(out)}"
            out.update(included)
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;]+)", line)
        assert m, f"{name}: '{line}' is not pinned with == (pin versions verified together)"
        assert normalize(m.group(1)) not in out, f"{name}: {m.group(1)} pinned twice"
        out[normalize(m.group(1))] = m.group(3)
    return out


def dockerfile_args() -> dict[str, str]:
    text = (ROOT / "Dockerfile").read_text()
    return dict(re.findall(r"^ARG (\w+)=(\S+)", text, flags=re.M))


def test_cpu_and_gpu_sets_share_the_common_pins_and_differ_only_in_torch_and_peft():
    common, cpu, gpu = pins("requirements-common.txt"), pins("requirements.txt"), pins("requirements-gpu.txt")
    assert "torch" not in common, "torch is pinned per set (CPU build vs the GPU's CUDA 13.0 build), not in common"
    for name, version in common.items():
        assert cpu[name] == version and gpu[name] == version
    assert "-r requirements.txt" not in (ROOT / "requirements-gpu.txt").read_text(), \
        "the GPU set must not inherit the CPU torch pin: include requirements-common.txt instead"
    assert {k for k in cpu if cpu[k] != gpu.get(k)} == {"torch", "peft"}


def test_gpu_set_is_what_ran_on_the_h200():
    gpu = pins("requirements-gpu.txt")
    assert {name: gpu.get(name) for name in PROVEN_ON_H200} == PROVEN_ON_H200


def test_dockerfile_pins_agree_with_requirements():
    cpu, gpu, args = pins("requirements.txt"), pins("requirements-gpu.txt"), dockerfile_args()
    assert args["LLAMA_CPP_VERSION"] == cpu["llama-cpp-python"] == gpu["llama-cpp-python"]
    for arg, package in (("TORCH_VERSION", "torch"), ("TRANSFORMERS_VERSION", "transformers"), ("TRL_VERSION", "trl"),
                         ("PEFT_VERSION", "peft"), ("VLLM_VERSION", "vllm"), ("UNSLOTH_VERSION", "unsloth"),
                         ("BITSANDBYTES_VERSION", "bitsandbytes")):
        assert args[arg] == gpu[package], f"Dockerfile ARG {arg}={args[arg]} but requirements-gpu.txt pins {gpu[package]}"
    assert args["PYTHON_VERSION"] == IMAGE_PYTHON
    bases = re.findall(r"^FROM nvidia/cuda:(\d+\.\d+)\.\d+-", (ROOT / "Dockerfile").read_text(), flags=re.M)
    assert bases and set(bases) == {"13.0"}, f"CUDA base images {bases}: torch 2.11.0's build is CUDA 13.0"


def test_deploy_doc_names_the_proven_set():
    """docs/deploy.md's table of what ran must list the pinned versions (a pin change updates the doc)."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    table = dict(re.findall(r"^\| `([\w-]+)` \| `([^`]+)` \|", text, flags=re.M))
    gpu = pins("requirements-gpu.txt")
    assert {name: table.get(name) for name in PROVEN_ON_H200} == {name: gpu[name] for name in PROVEN_ON_H200}
    assert table.get("python") == IMAGE_PYTHON and table.get("cuda", "").startswith("13.0")


@pytest.mark.slow  # uv resolves the GPU set in a child
def test_gpu_set_resolves_for_the_images_python_and_platform(tmp_path):
    """uv resolves the whole GPU set against PyPI for Python 3.12 on manylinux x86-64 (pip cannot do this across
    platforms with sdist-only packages such as llama-cpp-python and pwinput). No GPU and no download of wheels."""
    lock = tmp_path / "gpu.lock"
    proc = subprocess.run(
        [sys.executable, "-m", "uv", "pip", "compile", "--no-config", str(ROOT / "requirements-gpu.txt"),
         "--python-version", IMAGE_PYTHON, "--python-platform", IMAGE_PLATFORM,
         "--index-url", "https://pypi.org/simple", "--no-header", "--quiet", "-o", str(lock)],
        cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, f"the GPU set does not resolve for Python {IMAGE_PYTHON}:\n{proc.stderr[-3000:]}"
    resolved = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", lock.read_text(), flags=re.M))
    resolved = {normalize(k): v for k, v in resolved.items()}
    for name, version in pins("requirements-gpu.txt").items():
        assert resolved.get(name) == version, f"{name}: resolved {resolved.get(name)}, pinned {version}"
    # PyPI's torch 2.11.0 is the CUDA 13.0 build: the image needs no other index
    assert resolved.get("nvidia-cuda-runtime", "").startswith("13.0."), resolved.get("nvidia-cuda-runtime")


@pytest.mark.slow  # uv resolves in a child
def test_a_conflicting_gpu_set_fails_to_resolve(tmp_path):
    """The resolution check can fail: the old layout (CPU torch 2.13.0 under vLLM 0.22.0) does not resolve."""
    bad = tmp_path / "bad.txt"
    bad.write_text("torch==2.13.0\nvllm==0.22.0\n")
    proc = subprocess.run([sys.executable, "-m", "uv", "pip", "compile", "--no-config", str(bad), "--python-version",
                           IMAGE_PYTHON, "--python-platform", IMAGE_PLATFORM, "--index-url", "https://pypi.org/simple",
                           "--quiet"], capture_output=True, text=True, timeout=400)
    assert proc.returncode != 0 and "torch==2.11.0" in proc.stderr


def test_cpu_set_is_cpu_only_and_torch_first():
    cpu = pins("requirements.txt")
    assert list(cpu)[0] == "torch", "torch must be the first pin, or pip resolves a multi-GB CUDA build"
    for cuda_only in ("vllm", "unsloth", "unsloth-zoo", "bitsandbytes", "flash-attn", "xformers"):
        assert cuda_only not in cpu, f"{cuda_only} is GPU-only: it belongs in requirements-gpu.txt"
    assert not [p for p in cpu if p.startswith("nvidia-")]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"^(bash scripts/install\.sh --test && .+)$", readme, flags=re.M)
    assert commands, "README must show the install-and-test command"
    assert commands[0] in ci, f"CI must run the README's test command: {commands[0]}"
    assert re.search(r"^bash scripts/install\.sh && .*python app\.py", readme, flags=re.M), "README must show the start command"

