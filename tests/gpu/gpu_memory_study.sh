#!/usr/bin/env bash
# GPU memory study: trl_ds's estimate against the measured peak, on one GPU, inside 10 minutes.
#
#   bash tests/gpu/gpu_memory_study.sh [OUT]               # the study, one CUDA GPU (OUT: docs/gpu_memory_study)
#   bash tests/gpu/gpu_memory_study.sh --dry-run [OUT]     # print the runs it would start; needs no GPU
#   bash tests/gpu/gpu_memory_study.sh --cpu-smoke [OUT]   # two tiny CPU runs through the same pipeline and report
#   bash tests/gpu/gpu_memory_study.sh --report OUT        # rebuild OUT/report.md and OUT/peak.svg from OUT/runs/*
#
# Model: llama3.2-1b's dimensions (1.24B parameters), random init, built in code (model.name_or_path=null): no
# download. Runs: ZeRO 0-3 x offload none/cpu at micro-batch 2, then ZeRO-3 at micro-batch 1, 4 and 8; 512 tokens,
# 3 steps, bf16, preflight.memory=warn so the configs the estimate rejects run too (an OOM is a data point).
# Time box: each run is killed after RUN_TIMEOUT s (default 90) and no run starts after DEADLINE s (default 420,
# counted from the start, including building DeepSpeed's CPU Adam), so the study ends inside 9 minutes.
# Each run dir keeps plan.json (the estimate) and memory/rank_0.json (peak allocated/reserved, model-state bytes).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
RUN_TIMEOUT=${RUN_TIMEOUT:-90}
DEADLINE=${DEADLINE:-420}
MODE=study
case "${1:-}" in
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --dry-run) MODE=dry; shift ;;
  --cpu-smoke) MODE=cpu; shift ;;
  --report) MODE=report; shift ;;
esac
OUT=$(realpath -m "${1:-docs/gpu_memory_study}")

runs() {  # one line per run: NAME OVERRIDES...
  if [ "$MODE" = cpu ]; then
    echo "s2_none_b2 zero=stage2 offload=none trainer.per_device_train_batch_size=2"
    echo "s3_cpu_b2 zero=stage3 offload=cpu trainer.per_device_train_batch_size=2"
    return
  fi
  for combo in "0 none" "1 none" "2 none" "3 none" "1 cpu" "2 cpu" "3 cpu"; do
    set -- $combo
    echo "s$1_$2_b2 zero=stage$1 offload=$2 trainer.per_device_train_batch_size=2"
  done
  for micro in 1 4 8; do
    echo "s3_none_b$micro zero=stage3 offload=none trainer.per_device_train_batch_size=$micro"
  done
}

common_overrides() {
  if [ "$MODE" = cpu ]; then
    echo "cluster=local trainer.max_steps=2"
    return
  fi
  local gib
  gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | awk '{printf "%d", $1/1024}')
  echo "cluster=1x1 cluster.gpu_memory_gb=$gib model=llama3.2-1b model.name_or_path=null trainer.max_length=512" \
       "trainer.max_steps=3 precision=bf16 preflight.memory=warn"
}

run_all() {
  local started=$SECONDS common
  common=$(common_overrides)
  if [ "$MODE" = study ]; then  # build DeepSpeed's CPU Adam once, outside the runs' time limits
    "$PY" -m trl_ds.cli build-ops cpu_adam
  fi
  mkdir -p "$OUT/runs"
  local model=""  # the first run builds and saves the random-init model; the others load that folder
  runs | while read -r name overrides; do
    if [ $((SECONDS - started)) -gt "$DEADLINE" ]; then
      echo "skipped $name: past the ${DEADLINE}s deadline" | tee -a "$OUT/skipped.txt"
      continue
    fi
    echo "run $name: $overrides"
    # shellcheck disable=SC2086  # the overrides are words on purpose
    timeout "$RUN_TIMEOUT" "$PY" -m trl_ds $common $model $overrides "hydra.run.dir=$OUT/runs/$name" \
      >"$OUT/runs/$name.log" 2>&1 || echo "  exited $? (see $OUT/runs/$name.log)"
    if [ -z "$model" ] && [ -f "$OUT/runs/$name/model/config.json" ]; then
      model="model.name_or_path=$OUT/runs/$name/model"
    fi
  done
}

report() {
  "$PY" - "$OUT" <<'EOF'
"""OUT/report.md (estimate vs measured per run) and OUT/peak.svg (the same as bars); stdlib only."""
import glob, json, os, sys

out = sys.argv[1]
GiB = 2 ** 30
rows = []
for run in sorted(glob.glob(os.path.join(out, "runs", "*/"))):
    plan_path, mem_path = os.path.join(run, "plan.json"), os.path.join(run, "memory", "rank_0.json")
    if not os.path.exists(plan_path):
        continue
    current = json.load(open(plan_path))["current"]
    mem = json.load(open(mem_path)) if os.path.exists(mem_path) else None
    after = sum(sum(v.values()) for v in current["after_step_bytes"].values())
    rows.append({"run": os.path.basename(run.rstrip("/")), "estimate": current["device_total_bytes"],
                 "verdict": current["verdict"], "after_step": after,
                 "allocated": mem.get("gpu_peak_allocated_bytes") if mem else None,
                 "reserved": mem.get("gpu_peak_reserved_bytes") if mem else None,
                 "rss": mem.get("peak_rss_bytes") if mem else None,
                 "states": sum(sum(v.values()) for v in mem["model_states"].values()) if mem else None})

def gib(n):
    return "n/a" if n is None else f"{n / GiB:.2f}"

lines = ["| run | estimate verdict | estimated peak GiB | peak allocated GiB | peak reserved GiB | estimate / reserved "
         "| peak RSS GiB (host) | model states after step: estimated GiB | measured GiB |", "|" + "---|" * 9]
for r in rows:
    ratio = f"{r['estimate'] / r['reserved']:.2f}" if r["reserved"] else "n/a"
    outcome = r["verdict"] if r["states"] is not None else f"{r['verdict']} (run failed or was skipped)"
    lines.append(f"| {r['run']} | {outcome} | {gib(r['estimate'])} | {gib(r['allocated'])} | {gib(r['reserved'])} "
                 f"| {ratio} | {gib(r['rss'])} | {gib(r['after_step'])} | {gib(r['states'])} |")
with open(os.path.join(out, "report.md"), "w") as f:
    f.write("# GPU memory study: trl_ds estimate vs measured (tests/gpu/gpu_memory_study.sh)\n\n"
            + "\n".join(lines) + "\n\n![estimate vs measured](peak.svg)\n")

top = max([r["estimate"] for r in rows] + [r["reserved"] or 0 for r in rows] + [1])
bars = []
for i, r in enumerate(rows):
    y = 30 + i * 28
    for j, (key, colour) in enumerate((("estimate", "#888"), ("allocated", "#2a6"), ("reserved", "#26a"))):
        width = 500 * (r[key] or 0) / top
        bars.append(f'<rect x="160" y="{y + j * 8}" width="{width:.1f}" height="7" fill="{colour}"/>')
    bars.append(f'<text x="4" y="{y + 14}" font-size="11">{r["run"]}</text>')
svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="680" height="{40 + 28 * len(rows)}">'
       '<text x="4" y="16" font-size="12">grey: estimated peak, green: peak allocated, blue: peak reserved '
       f'(full width {top / GiB:.1f} GiB)</text>' + "".join(bars) + "</svg>\n")
open(os.path.join(out, "peak.svg"), "w").write(svg)
print(f"wrote {out}/report.md and {out}/peak.svg ({len(rows)} runs)")
EOF
}

case "$MODE" in
  dry)
    echo "would run, each with: ${PY} -m trl_ds <common> <run> hydra.run.dir=$OUT/runs/NAME"
    echo "common: cluster=1x1 cluster.gpu_memory_gb=<from nvidia-smi> model=llama3.2-1b model.name_or_path=null" \
         "trainer.max_length=512 trainer.max_steps=3 precision=bf16 preflight.memory=warn"
    runs | sed 's/^/  /' ;;
  report) report ;;
  cpu) run_all; report ;;
  study)
    if ! nvidia-smi -L >/dev/null 2>&1; then
      echo "gpu_memory_study.sh: no CUDA GPU here (nvidia-smi -L failed). Use --dry-run or --cpu-smoke." >&2
      exit 2
    fi
    run_all; report ;;
esac
