#!/usr/bin/env bash
# Start the app the way a Space does: runs, exports and model caches on persistent storage when it is there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${GRPO_PLAYGROUND_DATA_ROOT:-}
if [ -n "$root" ] && [ -d "$root" ] && [ -w "$root" ]; then
  export GRPO_PLAYGROUND_RUNS_DIR=${GRPO_PLAYGROUND_RUNS_DIR:-$root/runs}
  export GRPO_PLAYGROUND_EXPORTS_DIR=${GRPO_PLAYGROUND_EXPORTS_DIR:-$root/exports}
  export GRPO_PLAYGROUND_CACHE=${GRPO_PLAYGROUND_CACHE:-$root/cache}
  export HF_HOME=${HF_HOME:-$root/hf}
fi
PY=${VENV:-.venv}/bin/python
[ -x "$PY" ] || PY=python3
exec "$PY" app.py
