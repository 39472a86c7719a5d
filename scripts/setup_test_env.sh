#!/usr/bin/env bash
# What the tests need beyond training, for `make lint`, `make test` and `make test-fast` (never `make run`): the
# venv (scripts/setup_env.sh), the test tools and bitsandbytes into it (pyproject's [test] and [qlora] extras),
# then, as root with apt-get and only those missing, in one apt-get call:
#  - libaio-dev: the NVMe offload runs (DeepSpeed's async_io op);
#  - slurm-wlm and munge: tests/integration/test_slurm.py starts a real 2-node cluster (scripts/slurm_cluster.sh);
#  - openssh-server, pdsh and openmpi-bin: tests/integration/hosts.py makes two test hosts (network namespaces, an
#    sshd in each) that the deepspeed launcher reaches over pdsh, and mpirun's runs.
# Without root the tests that need a missing one skip locally and fail under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
STAMP=.venv/.trl_ds-test-installed  # pytest, pytest-xdist, ruff, hydra-submitit-launcher, bitsandbytes: [test], [qlora]
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ "$0" -nt "$STAMP" ]; then
  .venv/bin/python -m pip install -q -e ".[test,report,qlora]"
  touch "$STAMP"
fi

missing=()
[ -f /usr/include/libaio.h ] || missing+=(libaio-dev)
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v pdsh >/dev/null || missing+=(pdsh)
command -v mpirun >/dev/null || missing+=(openmpi-bin)

if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing ${missing[*]} (for the tests)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
elif [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: the tests that need ${missing[*]} will skip (install them as root: apt-get install -y ${missing[*]})"
fi
