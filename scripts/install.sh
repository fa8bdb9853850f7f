#!/usr/bin/env bash
# One install for every place the product runs: a laptop, CI (.ci/run) and the Docker image.
#   bash scripts/install.sh            # app dependencies into .venv (CPU set)
#   bash scripts/install.sh --test     # + test tools and Debian chromium for the browser tests
# Re-running is cheap: pinned packages already present are skipped by pip.
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
for arg in "$@"; do case $arg in --test) want_test=1 ;; *) echo "unknown option $arg (use --test)"; exit 2 ;; esac; done

VENV=${VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -r requirements.txt
"$PY" -m pip install -q --no-deps -e .

# llama.cpp bindings: PyPI has only the sdist; a portable build takes ~10 min on 2 cores, once.
LLAMA_CPP_VERSION=0.3.36
if ! "$PY" -c "import importlib.metadata as m; assert m.version('llama-cpp-python') == '$LLAMA_CPP_VERSION'" 2>/dev/null; then
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    "$PY" -m pip install -q "llama-cpp-python[server]==$LLAMA_CPP_VERSION"
fi

if [ $want_test = 1 ]; then
  "$PY" -m pip install -q -r requirements-test.txt
  if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
  fi
fi
echo "install done: $("$PY" --version), venv $VENV"
