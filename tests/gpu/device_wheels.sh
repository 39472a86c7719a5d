#!/usr/bin/env bash
# Wheels the lent GPU machine lacks, for its Python 3.12 on x86-64, into .whl/ (ignored by git), for
# tests/gpu/gpu_check.sh there. That machine reaches no registry; its image has torch, accelerate, numpy, pandas,
# pyarrow, xxhash, msgpack, ninja, psutil, py-cpuinfo, einops, huggingface-hub, tokenizers and safetensors, but not
# what is listed here. Versions are the ones installed in this machine's .venv (what the tests here run), one of each.
#
#   bash tests/gpu/device_wheels.sh          # idempotent: fetches or builds only what .whl/ lacks
#
# deepspeed has no wheel on the registry: it is built here as a pure-Python wheel (its ops JIT-compile there).
# antlr4-python3-runtime (hydra's exact 4.9.x) is an sdist only, built here too.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
DEST=.whl
LIMIT_MIB=64  # what travels to the device machine: the working tree plus .whl

# Pure Python, downloaded as py3-none-any. typing-extensions: pydantic needs a newer one than the image may have.
# peft and fsspec: the versions transformers/datasets here accept (the image's are unknown).
PURE=(transformers trl datasets peft hydra-core omegaconf dill hjson pydantic annotated-types typing-inspection
      typing-extensions fsspec)
PER_PYTHON=(multiprocess)      # a py312 wheel
BINARY=(pydantic-core regex)   # cp312 manylinux wheels; regex: transformers checks its version at import
# py3 manylinux, slimmed to the library the GPU's torch loads (tests/gpu/slim_wheel.py): for tests/gpu/qlora_check.py
SLIM=(bitsandbytes)
BNB_KEEP=(libbitsandbytes_cuda130.so libbitsandbytes_cpu.so)
BUILT=(deepspeed antlr4-python3-runtime)

version() { "$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1"; }
norm() { echo "$1" | tr 'A-Z-.' 'a-z__'; }
have() {  # a wheel of this name and version is already there
  local n v; n=$(norm "$1"); v=$2
  find "$DEST" -maxdepth 1 -iname "${n}-${v}-*.whl" | grep -q .
}
drop_other_versions() {  # two versions of one package stop the whole install there
  local n v f; n=$(norm "$1"); v=$2
  for f in "$DEST"/*.whl; do
    [ -e "$f" ] || continue
    case "$(basename "$f" | tr 'A-Z' 'a-z')" in
      "${n}-${v}-"*) ;;
      "${n}-"*) echo "removing $(basename "$f") (not $1 $v)"; rm -f "$f" ;;
    esac
  done
}

mkdir -p "$DEST"
download=()
for name in "${PURE[@]}" "${PER_PYTHON[@]}" "${BINARY[@]}" "${SLIM[@]}"; do
  v=$(version "$name")
  drop_other_versions "$name" "$v"
  have "$name" "$v" || download+=("$name==$v")
done
if [ ${#download[@]} -gt 0 ]; then
  echo "downloading: ${download[*]}"
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 \
    -d "$DEST" "${download[@]}" 2>&1 | grep -v "^WARNING: Location" || true
fi
for name in "${BUILT[@]}"; do
  v=$(version "$name")
  drop_other_versions "$name" "$v"
  if ! have "$name" "$v"; then
    echo "building $name $v"
    DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DEST" "$name==$v" 2>&1 \
      | grep -v "^WARNING: Location" || true
  fi
done

for f in "$DEST"/bitsandbytes-*.whl; do
  if [ -e "$f" ]; then "$PY" tests/gpu/slim_wheel.py "$f" libbitsandbytes_ "${BNB_KEEP[@]}"; fi
done

missing=0
for name in "${PURE[@]}" "${PER_PYTHON[@]}" "${BINARY[@]}" "${SLIM[@]}" "${BUILT[@]}"; do
  v=$(version "$name")
  if ! have "$name" "$v"; then echo "MISSING: $name $v" >&2; missing=1; fi
done
for f in "$DEST"/*.whl; do  # a built wheel must be pure Python: nothing compiled here would run there
  case "$f" in
    *-none-any.whl|*-cp312-*manylinux*.whl|*-py3-none-manylinux*_x86_64.whl) ;;
    *) echo "NOT FOR PYTHON 3.12 x86-64: $f" >&2; missing=1 ;;
  esac
done
wheels=$(du -sb "$DEST" | cut -f1)
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total_mib=$(( (wheels + tree) / 1048576 ))
echo "$DEST: $(ls "$DEST" | wc -l) wheels, $((wheels / 1048576)) MiB; working tree $((tree / 1048576)) MiB;" \
     "together ${total_mib} MiB of the ${LIMIT_MIB} MiB that travel"
if [ "$total_mib" -ge "$LIMIT_MIB" ]; then echo "too large to travel" >&2; exit 1; fi
exit "$missing"
