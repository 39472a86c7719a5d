#!/usr/bin/env bash
# The first GPU check, one command on the lent GPU machine (one H200, Python 3.12, no registry), under 9 minutes:
#
#   bash tests/gpu/device_wheels.sh                # here, first: the wheels that machine lacks, into .whl/
#   bash tests/gpu/gpu_check.sh "$OUT"             # there, with carry [".whl"]: installs them, then the checks
#   bash tests/gpu/gpu_check.sh OUT --cpu-smoke    # here: the same pipeline on one CPU rank, tiny model
#   bash tests/gpu/gpu_check.sh "$OUT" --fit       # there: the fit-boundary study instead (tests/gpu/fit_boundary.py)
#   bash tests/gpu/gpu_check.sh OUT --cpu-smoke --fit
#   bash tests/gpu/gpu_check.sh "$OUT" --qlora     # there: QLoRA's GPU-only questions instead (tests/gpu/qlora_check.py)
#
# Installs .whl/*.whl into a temporary site folder (GPU mode), puts it and this repo on PYTHONPATH, and runs
# `tests/gpu/gpu_check.py`, or with --fit `tests/gpu/fit_boundary.py`, or with --qlora `tests/gpu/qlora_check.py` (see
# their docstrings for the checks and the files written under OUT). Each is one time box of its own: one per call.
# PY: the interpreter (there: python3; here: .venv/bin/python). RUN_TIMEOUT, DEADLINE, HARD_END: seconds (per run;
# no run starts after DEADLINE; everything is killed at HARD_END), counted from this script's start. WORK: the
# folder for run dirs and model folders (default /tmp/trl_ds_gpu_check).
set -uo pipefail
export GPU_CHECK_STARTED=$(date +%s)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
USAGE="usage: bash tests/gpu/gpu_check.sh OUT [--cpu-smoke] [--fit | --qlora]"
OUT=${1:?$USAGE}
MODE= SCRIPT=gpu_check.py
for arg in "${@:2}"; do
  case $arg in
    --cpu-smoke) MODE=--cpu-smoke ;;
    --fit) SCRIPT=fit_boundary.py ;;
    --qlora) SCRIPT=qlora_check.py ;;
    *) echo "gpu_check.sh: unknown argument '$arg'; $USAGE" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SITE=${SITE:-/tmp/trl_ds_site}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1

if [ "$MODE" = --cpu-smoke ]; then
  # The venv by its real path: DeepSpeed's JIT ops are cached by their source paths, and a symlinked venv would
  # rebuild them under another machine-wide lock
  PY=${PY:-$(cd "$REPO/.venv" && pwd -P)/bin/python}
  export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
  # and its ninja, as every trl_ds launch uses: another ninja rebuilds the cached ops from scratch (twice)
  PATH=$(dirname "$PY"):$PATH
  export PATH
else
  PY=${PY:-python3}
  if ! nvidia-smi -L; then
    echo "gpu_check.sh: no CUDA GPU here (nvidia-smi -L failed); use --cpu-smoke" >&2; exit 2
  fi
  if ! ls "$REPO"/.whl/*.whl >/dev/null 2>&1; then
    echo "gpu_check.sh: no wheels in $REPO/.whl: run bash tests/gpu/device_wheels.sh first, and carry .whl" >&2; exit 2
  fi
  rm -rf "$SITE"
  started=$SECONDS
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$REPO"/.whl/*.whl 2>&1 | tee "$OUT/check.log" || { echo "gpu_check.sh: pip install failed" >&2; exit 1; }
  echo "installed $(ls "$REPO"/.whl | wc -l) wheels into $SITE in $((SECONDS - started)) s" | tee -a "$OUT/check.log"
  export PYTHONPATH=$SITE:$REPO
  export PATH=$SITE/bin:$PATH
  # DeepSpeed's JIT builds: this GPU's architecture only, every core
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 2>/dev/null)
  # DeepSpeed 0.19.8 reads each entry as numbers: an arch-specific name (9.0a) fails its JIT build with
  # "invalid literal for int() with base 10: '0a'", so the suffix goes.
  TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-${cap:-9.0}}
  export TORCH_CUDA_ARCH_LIST=$(printf %s "$TORCH_CUDA_ARCH_LIST" | sed 's/\([0-9]\.[0-9]\)[af]/\1/g')
  echo "TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"
  export MAX_JOBS=${MAX_JOBS:-$(nproc)}
fi
cd "$REPO"
"$PY" "tests/gpu/$SCRIPT" "$OUT" ${MODE:+"$MODE"} ${WORK:+--work "$WORK"} 2>&1 | tee -a "$OUT/check.log"
