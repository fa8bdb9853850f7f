# GRPO Playground for a Hugging Face Space on GPU hardware (sdk: docker, app_port 7860).
# The same scripts/install.sh installs the app here, on a laptop and in CI; --gpu installs requirements-gpu.txt:
# the set that ran on one H200 (docs/deploy.md): Python 3.12, CUDA 13.0, torch 2.11.0 (PyPI's 2.11.0 wheel is
# the CUDA 13.0 build), vLLM 0.22.0, Unsloth 2026.10.9. tests/test_packaging.py checks that the ARGs below agree
# with requirements-gpu.txt and docs/deploy.md, and that the set resolves for Python 3.12 / manylinux x86-64;
# the build checks that pip installed exactly them.

# ---- build stage: llama.cpp bindings compiled with CUDA (needs nvcc, absent from the runtime image) ----
FROM nvidia/cuda:13.0.1-devel-ubuntu24.04 AS llama-build
ARG LLAMA_CPP_VERSION=0.3.36
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip python3-venv git cmake build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/build && CMAKE_ARGS="-DGGML_CUDA=on -DGGML_NATIVE=OFF -DCMAKE_CUDA_ARCHITECTURES=80;86;89;90" \
    /opt/build/bin/pip wheel --no-deps -w /wheels "llama-cpp-python[server]==${LLAMA_CPP_VERSION}"

# ---- runtime ----
FROM nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04
ARG PYTHON_VERSION=3.12
ARG TORCH_VERSION=2.11.0
ARG TRANSFORMERS_VERSION=5.17.0
ARG TRL_VERSION=1.14.2
ARG PEFT_VERSION=0.21.0
ARG VLLM_VERSION=0.22.0
ARG UNSLOTH_VERSION=2026.10.9
ARG BITSANDBYTES_VERSION=0.50.2
ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 GRADIO_ANALYTICS_ENABLED=False \
    GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT=7860 VENV=/opt/venv PATH=/opt/venv/bin:$PATH
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential curl tini libseccomp2 \
    && rm -rf /var/lib/apt/lists/*

# Spaces run the container as uid 1000.
RUN useradd -m -u 1000 user && mkdir -p /opt/venv /data && chown -R user /opt/venv /data
USER user
WORKDIR /home/user/app
COPY --chown=user --from=llama-build /wheels /tmp/wheels
COPY --chown=user requirements*.txt pyproject.toml README.md ./
COPY --chown=user scripts ./scripts
COPY --chown=user src ./src
RUN LLAMA_CPP_WHEEL_DIR=/tmp/wheels bash scripts/install.sh --gpu && rm -rf /tmp/wheels ~/.cache/pip
# The image is the proven set or no image: fail the build on any other Python or package version.
RUN python -c "import sys, importlib.metadata as m; \
want = {'torch': '${TORCH_VERSION}', 'transformers': '${TRANSFORMERS_VERSION}', 'trl': '${TRL_VERSION}', \
'peft': '${PEFT_VERSION}', 'vllm': '${VLLM_VERSION}', 'unsloth': '${UNSLOTH_VERSION}', 'bitsandbytes': '${BITSANDBYTES_VERSION}'}; \
got = {k: m.version(k).split('+')[0] for k in want}; \
assert sys.version.startswith('${PYTHON_VERSION}.'), sys.version; \
assert got == want, f'installed {got} != pinned {want}'"
COPY --chown=user . .

# Runs, exports and caches on the Space's persistent storage when it is mounted (/data), else in the app folder.
ENV GRPO_PLAYGROUND_DATA_ROOT=/data
EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD curl -fsS http://127.0.0.1:7860/gradio_api/info >/dev/null || exit 1
# tini as PID 1 reaps the orphans a killed job group can leave behind.
ENTRYPOINT ["tini", "--"]
CMD ["bash", "scripts/start.sh"]
