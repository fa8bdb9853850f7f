"""The set-up promises: pins agree between the Dockerfile and the requirement files, the CPU set holds no
CUDA-only package, and CI runs exactly the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pins(name: str) -> dict[str, str]:
    out = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-r"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s;]+)", line)
        assert m, f"{name}: '{line}' is not pinned with == (pin versions verified together)"
        out[m.group(1).lower().replace("_", "-")] = m.group(3)
    return out


def dockerfile_args() -> dict[str, str]:
    text = (ROOT / "Dockerfile").read_text()
    return dict(re.findall(r"^ARG (\w+)=(\S+)", text, flags=re.M))


def test_dockerfile_pins_agree_with_requirements():
    cpu, gpu, args = pins("requirements.txt"), pins("requirements-gpu.txt"), dockerfile_args()
    assert args["TORCH_VERSION"] == cpu["torch"]
    assert args["LLAMA_CPP_VERSION"] == cpu["llama-cpp-python"]
    assert args["VLLM_VERSION"] == gpu["vllm"]
    assert args["UNSLOTH_VERSION"] == gpu["unsloth"]
    # the GPU file extends the CPU one instead of repeating (and drifting from) its pins
    assert "-r requirements.txt" in (ROOT / "requirements-gpu.txt").read_text()
    assert not set(gpu) & set(cpu), f"pinned twice: {set(gpu) & set(cpu)}"


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
