"""`python tests/gpu/qlora_check.py OUT`: what only a GPU can show about QLoRA (peft=qlora), time-boxed to about three
minutes (`tests/gpu/gpu_check.sh OUT --qlora` runs it, with the GPU check's installation and environment).

On one CUDA GPU, the model of llama3.2-1b's dimensions (random weights), bf16, 512 tokens:
1. trl_ds's run at ZeRO-3 with the packed 4-bit weights stored in bf16 (the training dtype; the CPU runs store and
   compute in fp32): does it train, and its peak allocated/reserved memory and model-state bytes against plan.json,
   whose device total includes the `quantized_load` term (the whole quantized model on the rank at load; 0 on one
   GPU, where ZeRO-3 partitions nothing, so the reserved peak is held to the step's estimate).
2. The same run dir with DeepSpeed's `offload_param` (trl_ds refuses offload.param with a quantized base before
   launch, so TRL's own sft script runs it, in one process, once with and once without the offload): does ZeRO-3
   offload the packed weights at all, and with what peak GPU memory (PEFT's guide reports more than without).

OUT gets, after every step: results.json (the runs as gpu_check.py writes them, and `param_offload`), report.md,
failures.log, runs.tar.gz.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repo
from tests.gpu import gpu_check  # noqa: E402
from tests.gpu.gpu_check import PACKAGES, Check, Mode, limits, run_dir  # noqa: E402

LLAMA = "llama3.2-1b"
OFFLOAD_PARAM = {"device": "cpu", "pin_memory": True}
# TRL's sft script in this process (`trl sft` would start it in a child through accelerate launch), printing the
# process's CUDA peaks as it exits
PEAK_SFT = ("import atexit, runpy, sys, torch\n"
            "atexit.register(lambda: print('PEAK', torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(),"
            " flush=True))\n"
            "sys.argv = ['sft', '--config', 'trainer.yaml']\n"
            "runpy.run_module('trl.scripts.sft', run_name='__main__')\n")
ONE_PROCESS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"}


def gpu_mode(gpu_memory_gb: int) -> Mode:
    common = ["cluster=1x1", f"cluster.gpu_memory_gb={gpu_memory_gb}", "cluster.gpu=h200-141gb", "precision=bf16",
              "trainer.max_length=512", "trainer.per_device_train_batch_size=8", "trainer.max_steps=8",
              "peft=qlora"]
    return Mode("qlora-gpu", {LLAMA: LLAMA}, [(LLAMA, 3, "none")], common, {"fused_adam": "FusedAdamBuilder"},
                "h200-141gb", **limits(run_timeout=120, start_deadline=170, hard_end=260), prep_timeout=120,
                packages=(*PACKAGES, "bitsandbytes"))


def probe_folder(source: str, dest: str, offload: bool) -> str:
    """A copy of a run dir's inputs for TRL's script, its ds_config.json with or without offload_param."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(
        "trainer", "logs", "memory", "progress", "metrics.jsonl", "summary.json", "final_model"))
    with open(os.path.join(dest, "ds_config.json")) as f:
        config = json.load(f)
    if offload:
        config["zero_optimization"]["offload_param"] = OFFLOAD_PARAM
    gpu_check.write_atomic(os.path.join(dest, "ds_config.json"), json.dumps(config, indent=2) + "\n")
    return dest


def read_peak(text: str) -> Optional[dict]:
    """The PEAK line PEAK_SFT prints: bytes allocated and reserved at most."""
    line = next((ln for ln in reversed(text.splitlines()) if ln.startswith("PEAK ")), None)
    if line is None:
        return None
    allocated, reserved = (int(x) for x in line.split()[1:3])
    return {"peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved}


def param_offload(check: Check, py: str) -> None:
    """TRL's sft script on the ZeRO-3 QLoRA run dir, without and with offload_param; their peaks side by side."""
    done = [r for r in check.results["runs"] if r.get("status") == "completed"]
    out = check.results["param_offload"] = {}
    for offload in (False, True):
        key = "with" if offload else "without"
        if not done or check.elapsed() > check.mode.start_deadline:
            out[key] = {"status": "skipped", "reason": "no completed ZeRO-3 run" if not done else
                        f"past the {check.mode.start_deadline} s start deadline"}
            continue
        name = f"{done[0]['name']}_trl_{key}_offload_param"
        folder = probe_folder(run_dir(check, done[0]["name"]), run_dir(check, name), offload)
        log = os.path.join(check.work, "logs", f"{name}.log")
        began = time.time()
        rc = gpu_check.finish(gpu_check.start([py, "-c", PEAK_SFT], log, env={**os.environ, **ONE_PROCESS},
                                              cwd=folder),
                              time.monotonic() + min(check.mode.run_timeout, check.left()))
        text = gpu_check.tail(log, 400)
        out[key] = {"status": "timeout" if rc is None else "completed" if rc == 0 else "failed",
                    "wall_s": round(time.time() - began, 1),
                    "losses": [float(x) for x in gpu_check._loss_values(text)], **(read_peak(text) or {})}
        if rc != 0:
            check.note_failure(f"TRL's sft script {key} offload_param", log)
        check.save()
    check.save()


def render_report(r: dict) -> str:
    lines = [gpu_check.render_report(r).rstrip("\n"), ""]
    for run in r["runs"]:
        m = run.get("memory") or {}
        if "estimated_quantized_load_bytes" in m:
            lines.append(f"{run['name']}: quantized_load {gpu_check.gib(m['estimated_quantized_load_bytes'])} GiB "
                         f"in the estimate of {gpu_check.gib(m['estimated_peak_bytes'])} GiB; reserved peak "
                         f"{gpu_check.gib(m.get('peak_reserved_bytes'))} GiB.")
    for key, e in (r.get("param_offload") or {}).items():
        lines.append(f"TRL's sft script {key} offload_param: {e['status']}" + (
            f" ({e['reason']})" if "reason" in e else f", peak allocated {gpu_check.gib(e.get('peak_allocated_bytes'))}"
            f" GiB, reserved {gpu_check.gib(e.get('peak_reserved_bytes'))} GiB, losses {e.get('losses')}") + ".")
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python tests/gpu/qlora_check.py", description=__doc__.split("\n")[0])
    parser.add_argument("out", help="folder for results.json, report.md, failures.log, runs.tar.gz")
    parser.add_argument("--cpu-smoke", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "trl_ds_gpu_check"),
                        help="run dirs and model folders (default: %(default)s, shared with the GPU check)")
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        parser.error("--qlora has no CPU smoke: QLoRA's CPU runs are tests/integration/test_qlora.py")
    out, work = os.path.abspath(args.out), os.path.abspath(args.work)
    shutil.rmtree(os.path.join(work, "runs"), ignore_errors=True)
    started = float(os.environ.get("GPU_CHECK_STARTED") or time.time())
    check = Check(out, work, gpu_mode(gpu_check.gpu_memory_gb()), started)
    check.results["param_offload"] = {}
    if gpu_check.prepare(check, sys.executable):
        gpu_check.run_all(check, sys.executable)
        param_offload(check, sys.executable)
    check.save()
    report = render_report(check.results)
    gpu_check.write_atomic(os.path.join(out, "report.md"), report)
    print(report)
    return 0 if any(r.get("status") == "completed" for r in check.results["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
