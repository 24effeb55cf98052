#!/usr/bin/env bash
# The `gateway` test tier's gateways: LiteLLM's proxy and vllm-router (vLLM's Rust load
# balancer), from PyPI, in their own virtualenv cached across runs so that neither touches .venv.
# A minute the first time; instant after. Prints the virtualenv's path on its last line.
# Usage: tests/gateways/install.sh [VENV_DIR]
set -euo pipefail
# LITELLM and ROUTER, the versions (servers.py reads the same file).
source "$(dirname "$0")/versions.env"
VENV=${1:-${DSPARK_GATEWAYS_VENV:-$HOME/.cache/dspark-json/gateways-litellm-$LITELLM-router-$ROUTER}}
# One install at a time: several checkouts (or CI jobs) on one machine share the cache.
mkdir -p "$(dirname "$VENV")"
exec 9>"$(dirname "$VENV")/.install-gateways.lock"
flock 9
STAMP="$VENV/.installed"
if [ ! -f "$STAMP" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "litellm[proxy]==$LITELLM" "vllm-router==$ROUTER"
  "$VENV/bin/litellm" --help >/dev/null
  "$VENV/bin/vllm-router" --help >/dev/null
  touch "$STAMP"
fi
echo "$VENV"
