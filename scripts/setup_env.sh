#!/usr/bin/env bash
# What training needs, into .venv: `make run` calls it (and scripts/setup_test_env.sh, for `make test`). Idempotent:
# does nothing when up to date. No system packages, except libaio for NVMe offload when asked:
#   bash scripts/setup_env.sh          # the venv: torch (CPU build without an NVIDIA GPU), trl_ds and its pinned deps,
#                                      # matplotlib for trl-ds report's plot (the test tools: setup_test_env.sh)
#   bash scripts/setup_env.sh --nvme   # also Debian's libaio-dev (DeepSpeed's async_io op), with apt-get as root
# A run with offload=nvme on a machine without libaio stops before launch and names the same package.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
STAMP="$VENV/.trl_ds-installed"
CPU_TORCH="torch==2.13.0"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"

if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ "$0" -nt "$STAMP" ]; then
  "$PY" -m pip install -q --upgrade pip
  if ! "$PY" -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
      "$PY" -m pip install -q torch          # a GPU machine: the default (CUDA) build
    else
      "$PY" -m pip install -q "$CPU_TORCH"   # never pull a multi-GB CUDA build onto a CPU machine
    fi
  fi
  "$PY" -m pip install -q -e ".[report]"
  touch "$STAMP"
fi

if [ "${1:-}" = "--nvme" ] && [ ! -f /usr/include/libaio.h ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing libaio-dev (NVMe offload)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libaio-dev >/dev/null
  else
    echo "setup: NVMe offload needs libaio; install it as root: apt-get install -y libaio-dev" >&2
    exit 2
  fi
fi
