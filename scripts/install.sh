#!/usr/bin/env bash
# One install for every place the product runs: a laptop, CI (.ci/run) and the Docker image.
#   bash scripts/install.sh            # app dependencies into .venv (CPU set)
#   bash scripts/install.sh --test     # + test tools and Debian chromium(-headless-shell) for the browser tests
#   bash scripts/install.sh --gpu      # requirements-gpu.txt instead (the H200 set: CUDA 13.0 torch, vLLM, Unsloth), as in the Dockerfile
# LLAMA_CPP_WHEEL_DIR=DIR installs a prebuilt llama-cpp-python wheel from DIR (the Docker image builds a CUDA one).
# Re-running is cheap: pinned packages already present are skipped by pip.
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0; want_gpu=0
for arg in "$@"; do case $arg in --test) want_test=1 ;; --gpu) want_gpu=1 ;; *) echo "unknown option $arg (use --test or --gpu)"; exit 2 ;; esac; done

VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
# llama-cpp-python (pinned in requirements.txt) is an sdist on PyPI: a portable build takes ~10 min on 2 cores,
# once. A folder of prebuilt wheels (the Docker image's CUDA build) is used instead when given.
export CMAKE_ARGS=${CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"}
if [ -n "${LLAMA_CPP_WHEEL_DIR:-}" ]; then export PIP_FIND_LINKS=$LLAMA_CPP_WHEEL_DIR; fi
if [ $want_gpu = 1 ]; then "$PY" -m pip install -q -r requirements-gpu.txt; else "$PY" -m pip install -q -r requirements.txt; fi
"$PY" -m pip install -q --no-deps -e .

# llama.cpp's HF->GGUF converters exist only in the llama-cpp-python sdist (vendor/llama.cpp): keep them in the
# venv, where grpo_playground.export.converters looks, so an export never downloads anything at run time.
LLAMA_CPP_VERSION=$("$PY" -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))")
CONVERTERS="$VENV/share/grpo-playground/llama.cpp-$LLAMA_CPP_VERSION"
if [ ! -f "$CONVERTERS/convert_hf_to_gguf.py" ]; then
  sdist_dir=$(mktemp -d)
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$sdist_dir"
  mkdir -p "$CONVERTERS"
  inner="llama_cpp_python-$LLAMA_CPP_VERSION/vendor/llama.cpp"
  tar xzf "$sdist_dir/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz" -C "$CONVERTERS" --strip-components=3 \
    "$inner/convert_hf_to_gguf.py" "$inner/convert_lora_to_gguf.py" "$inner/conversion" "$inner/gguf-py"
  rm -rf "$sdist_dir"
fi

if [ $want_test = 1 ]; then
  "$PY" -m pip install -q -r requirements-test.txt
  "$PY" -m pip install -q --no-deps -r requirements-scale-out.txt
  # chromium-headless-shell drives the browser tests with a third less CPU than chromium (tests/browser/conftest.py);
  # chromium stays the fallback where the shell cannot be installed
  if ! command -v chromium-headless-shell >/dev/null || ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium-headless-shell chromium >/dev/null; }; then
      command -v chromium >/dev/null || $SUDO apt-get install -y -qq chromium >/dev/null
    fi
  fi
fi
echo "install done: $("$PY" --version), venv $VENV"
