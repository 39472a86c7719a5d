#!/usr/bin/env bash
# Idempotent setup into .venv: `make run` and `make test` call it. Safe to run again; does nothing when up to date.
#  - torch: the CPU build (torch==2.13.0) on a machine without an NVIDIA GPU; a CUDA torch already present is kept.
#  - trl_ds and its pinned dependencies, editable, plus pytest.
#  - libaio-dev (for NVMe offload), slurm-wlm and munge (the local SLURM test cluster), openssh-server, pdsh and
#    openmpi-bin (the multi-host tests' test hosts) with apt-get when root and missing.
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
  "$PY" -m pip install -q -e ".[test,report]"
  touch "$STAMP"
fi

if [ ! -f /usr/include/libaio.h ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing libaio-dev (NVMe offload)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libaio-dev >/dev/null
fi

# slurm-wlm and munge: tests/integration/test_slurm.py starts a real 2-node cluster (scripts/slurm_cluster.sh).
if { ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; } && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null; then
  echo "setup: installing slurm-wlm and munge (local SLURM cluster for the tests)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

# openssh-server, pdsh, openmpi-bin: tests/integration/hosts.py makes two test hosts (network namespaces, an sshd in
# each) that the deepspeed launcher reaches over pdsh.
if { [ ! -x /usr/sbin/sshd ] || ! command -v pdsh >/dev/null || ! command -v mpirun >/dev/null; } \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing openssh-server, pdsh and openmpi-bin (test hosts for the multi-host tests)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server pdsh openmpi-bin >/dev/null
fi
