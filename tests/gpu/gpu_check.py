"""`python tests/gpu/gpu_check.py OUT [--cpu-smoke]`: the GPU check, time-boxed (tests/gpu/gpu_check.sh runs it).

On one CUDA GPU: real trl_ds runs (cluster=1x1, bf16) of two models built from presets' dimensions (random init,
no download), across ZeRO stages and offload, most informative first. For each run: did it complete, with finite
losses, on exactly the DeepSpeed config trl_ds wrote; its peak allocated/reserved GPU memory and model-state bytes
against plan.json; its step time against the step-time model (cluster.gpu=h200-141gb) and its MFU. Also DeepSpeed's
fused Adam / CPU Adam JIT build times, and TRL's own CLI on one run dir's trainer.yaml. `--cpu-smoke` runs the same
pipeline with the tiny model on one CPU rank, so this file cannot rot between GPU lendings.

Results go to OUT as each check ends, so a run cut short still returns what finished: results.json, report.md,
failures.log (log tails of what failed) and runs.tar.gz (every run dir's small files). Only the standard library
is imported here: a broken install on the GPU machine is reported, not raised.
"""
import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)  # trl_ds, when not installed

GiB = 2 ** 30
PACKAGES = ("torch", "deepspeed", "trl", "transformers", "accelerate", "datasets", "peft", "hydra", "omegaconf",
            "pydantic")
JIT_OPS = ("fused_adam", "cpu_adam", "deepspeed_shm_comm", "pin_memory", "async_io")  # what a rank may JIT-build
DATASET_ROWS = 128  # more than max_steps x micro-batch in either mode
# Keys accelerate sets itself in every DeepSpeed config (steps_per_print=inf: DeepSpeed's own step logging off)
KNOWN_OVERRIDES = ("steps_per_print",)
WARMUP_STEPS = 2  # the first steps build kernels, caches and ZeRO-3's trace: left out of the measured step time


@dataclass
class Mode:
    name: str
    models: Dict[str, str]  # key -> model preset
    runs: List[tuple]  # (model key, ZeRO stage, offload[, trainer]), in priority order; no trainer: sft
    common: List[str]
    ops: Dict[str, str]  # op -> DeepSpeed builder class, JIT-built (and timed) before the runs
    gpu_preset: str
    run_timeout: int  # each run is killed after this
    start_deadline: int  # no run starts after this many seconds since the check began
    hard_end: int  # whatever still runs is killed then
    prep_timeout: int  # op builds and model folders
    packages: tuple = PACKAGES  # what the environment probe imports (an import failure stops the check)


def gpu_mode(gpu_memory_gb: int) -> Mode:
    llama, qwen = "llama3.2-1b", "qwen2.5-0.5b"
    # DPO and GRPO right after the SFT pairs: their plan terms (reference model, chosen+rejected, generation) have
    # never been measured on a GPU
    runs = [(llama, 2, "none"), (llama, 3, "none"), (qwen, 2, "none"), (qwen, 3, "none"), (qwen, 2, "none", "dpo"),
            (qwen, 3, "none", "dpo"), (qwen, 2, "none", "grpo"), (llama, 2, "cpu"), (llama, 3, "cpu"),
            (llama, 0, "none"), (llama, 1, "none"), (qwen, 0, "none"), (qwen, 1, "none"), (qwen, 3, "cpu"),
            (qwen, 2, "cpu"), (llama, 1, "cpu")]
    common = ["cluster=1x1", f"cluster.gpu_memory_gb={gpu_memory_gb}", "cluster.gpu=h200-141gb", "precision=bf16",
              "trainer.max_length=512", "trainer.per_device_train_batch_size=8", "trainer.max_steps=8"]
    return Mode("gpu", {llama: llama, qwen: qwen}, runs, common,
                {"fused_adam": "FusedAdamBuilder", "cpu_adam": "CPUAdamBuilder"}, "h200-141gb",
                **limits(run_timeout=120, start_deadline=465, hard_end=525), prep_timeout=240)


def limits(run_timeout: int, start_deadline: int, hard_end: int) -> Dict[str, int]:
    """Seconds; the environment's RUN_TIMEOUT, DEADLINE and HARD_END win."""
    return {"run_timeout": int(os.environ.get("RUN_TIMEOUT", run_timeout)),
            "start_deadline": int(os.environ.get("DEADLINE", start_deadline)),
            "hard_end": int(os.environ.get("HARD_END", hard_end))}


def cpu_mode() -> Mode:
    common = ["cluster=local", "cluster.gpus_per_node=1", "precision=fp32", "trainer.max_length=64",
              "trainer.per_device_train_batch_size=2", "trainer.max_steps=3"]
    # No op builds: these runs use torch's Adam, and a build here would rewrite the machine's shared extension cache.
    # DPO stands for the trainers other than SFT (a GRPO run costs the suite 45 s more; its overrides are checked
    # without training in tests/unit/tools/test_gpu_check.py).
    return Mode("cpu-smoke", {"tiny": "tiny"}, [("tiny", 2, "none"), ("tiny", 3, "none"), ("tiny", 3, "none", "dpo")],
                common, {}, "cpu", **limits(run_timeout=300, start_deadline=600, hard_end=840), prep_timeout=300)


class Check:
    """The state of one check: limits, the working folder, and the results written after every step."""

    def __init__(self, out: str, work: str, mode: Mode, started: float):
        self.out, self.work, self.mode, self.started = out, work, mode, started
        self.results: Dict = {"mode": mode.name, "limits": {k: getattr(mode, k) for k in (
            "run_timeout", "start_deadline", "hard_end", "prep_timeout")}, "env": None, "ops": {}, "models": {},
            "runs": [], "zero3_vs_zero2": [], "trl_cli": None}
        os.makedirs(out, exist_ok=True)
        os.makedirs(os.path.join(work, "logs"), exist_ok=True)
        self.failures = os.path.join(out, "failures.log")
        open(self.failures, "w").close()

    def elapsed(self) -> float:
        return time.time() - self.started

    def left(self) -> float:
        return self.mode.hard_end - self.elapsed()

    def save(self) -> None:
        self.results["elapsed_s"] = round(self.elapsed(), 1)
        self.results["zero3_vs_zero2"] = zero3_vs_zero2(self.results["runs"])
        write_atomic(os.path.join(self.out, "results.json"), json.dumps(self.results, indent=2) + "\n")
        write_atomic(os.path.join(self.out, "report.md"), render_report(self.results))
        self.pack_runs()

    def pack_runs(self) -> None:
        """runs.tar.gz: each run dir's small files (no weights, no checkpoints), for later estimate fixes."""
        runs = os.path.join(self.work, "runs")
        if not os.path.isdir(runs):
            return
        tmp = os.path.join(self.out, "runs.tar.gz.tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            for root, dirs, files in os.walk(runs):
                dirs[:] = [d for d in dirs if d not in ("model", "trainer", "final_model", "data", "nvme")]
                for f in files:
                    path = os.path.join(root, f)
                    if os.path.getsize(path) < 4 * 2 ** 20:
                        tar.add(path, arcname=os.path.relpath(path, runs))
        os.replace(tmp, os.path.join(self.out, "runs.tar.gz"))

    def note_failure(self, what: str, log: str) -> None:
        with open(self.failures, "a") as f:
            f.write(f"===== {what} ({log})\n{tail(log, 60)}\n")


def write_atomic(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def tail(path: str, lines: int) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def start(cmd: List[str], log: str, env: Optional[dict] = None, cwd: Optional[str] = None) -> subprocess.Popen:
    """In its own session, so a deadline can end it with everything it started."""
    with open(log, "w") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)


def finish(proc: subprocess.Popen, deadline: float) -> Optional[int]:
    """Wait until the monotonic deadline; the return code, or None when it had to be killed."""
    try:
        return proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        stop(proc)
        return None


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group and every descendant (torchrun starts ranks in sessions of their own), then KILL."""
    try:
        import psutil
        tree = psutil.Process(proc.pid).children(recursive=True)
    except Exception:  # psutil missing, or the process just ended
        tree = []
    for signum, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        for target in [proc.pid] + [p.pid for p in tree]:
            try:
                os.killpg(target, signum) if target == proc.pid else os.kill(target, signum)
            except OSError:
                pass
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if all(not _alive(p) for p in tree):
            return


def _alive(p) -> bool:
    try:
        return p.is_running() and p.status() != "zombie"
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------------------- env

ENV_PROBE = """
import importlib, json, shutil, sys, time
out = {"python": sys.version.split()[0], "executable": sys.executable, "import_seconds": {}, "versions": {}}
for name in %r:
    t = time.perf_counter()
    try:
        module = importlib.import_module(name)
        out["versions"][name] = getattr(module, "__version__", "?")
    except Exception as err:
        out["versions"][name] = "IMPORT FAILED: %%s: %%s" %% (type(err).__name__, err)
    out["import_seconds"][name] = round(time.perf_counter() - t, 2)
import torch
out["cuda_available"] = torch.cuda.is_available()
out["torch_cuda"] = torch.version.cuda
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    out["gpu"] = {"name": p.name, "memory_bytes": p.total_memory, "multiprocessors": p.multi_processor_count,
                  "capability": list(torch.cuda.get_device_capability(0))}
    from torch.utils.cpp_extension import CUDA_HOME
    out["cuda_home"] = CUDA_HOME
out["nvcc"] = shutil.which("nvcc")
out["ninja"] = shutil.which("ninja")
import trl_ds
out["trl_ds"] = trl_ds.__file__
print("ENV " + json.dumps(out))
"""


def record_env(check: Check, log: str, rc: Optional[int]) -> bool:
    """The probe's versions and devices into results; False when an import failed (then nothing can run)."""
    line = next((ln for ln in tail(log, 200).splitlines() if ln.startswith("ENV ")), None)
    env = json.loads(line[4:]) if line else {"error": f"probe exited {rc}"}
    check.results["env"] = env
    broken = [k for k, v in env.get("versions", {}).items() if str(v).startswith("IMPORT FAILED")]
    if rc != 0 or broken or not line:
        check.note_failure(f"environment probe (imports failed: {', '.join(broken) or 'see log'})", log)
    return rc == 0 and not broken


# --------------------------------------------------------------------------------------------------------- prep

BUILD_OP = """
import sys, time
from deepspeed.accelerator import get_accelerator
builder = get_accelerator().create_op_builder(sys.argv[1])
t = time.perf_counter()
builder.load(verbose=False)
print("BUILT %.1f" % (time.perf_counter() - t))
"""

BUILD_MODEL = """
import sys
from trl_ds.config.compose import compose
from trl_ds.worker.models import save_tiny_model
cfg = compose(["model=" + sys.argv[1]])
save_tiny_model(cfg.model, sys.argv[2], cfg.seed)
"""


def prepare(check: Check, py: str) -> bool:
    """Probe the environment, build the ops and the model folders, all at once, each within the prep deadline.
    False when the environment cannot run trl_ds."""
    env_log = os.path.join(check.work, "logs", "env.log")
    jobs = {("env", "probe"): (start([py, "-c", ENV_PROBE % (check.mode.packages,)], env_log), env_log, time.time())}
    for op, builder in check.mode.ops.items():
        log = os.path.join(check.work, "logs", f"build_{op}.log")
        jobs[("ops", op)] = (start([py, "-c", BUILD_OP, builder], log), log, time.time())
    for key, preset in check.mode.models.items():
        log = os.path.join(check.work, "logs", f"model_{key}.log")
        folder = model_folder(check, key)
        jobs[("models", key)] = (start([py, "-c", BUILD_MODEL, preset, folder], log), log, time.time())
    ended = wait_all({key: proc for key, (proc, _, _) in jobs.items()},
                     time.monotonic() + min(check.mode.prep_timeout, check.left()))
    env_ok = record_env(check, env_log, ended[("env", "probe")][0])
    for (kind, key), (_proc, log, began) in jobs.items():
        if kind == "env":
            continue
        rc, at = ended[(kind, key)]
        seconds = round(at - began, 1)
        status = "timeout" if rc is None else "ok" if rc == 0 else "failed"
        entry = {"status": status, "seconds": seconds}
        if kind == "ops":
            built = [ln for ln in tail(log, 50).splitlines() if ln.startswith("BUILT ")]
            entry["load_seconds"] = float(built[-1].split()[1]) if built else None
            if rc is None:
                clear_build_locks(key)
        else:
            entry["folder"] = model_folder(check, key)
        if status != "ok":
            check.note_failure(f"{kind} {key} {status} after {seconds} s", log)
        check.results[kind][key] = entry
    write_long_dataset(check)
    check.save()
    return env_ok


def wait_all(procs: dict, deadline: float) -> dict:
    """key -> (return code or None when killed at the deadline, the time it ended)."""
    ended = {}
    while len(ended) < len(procs) and time.monotonic() < deadline:
        for key, proc in procs.items():
            if key not in ended and proc.poll() is not None:
                ended[key] = (proc.returncode, time.time())
        time.sleep(0.2)
    for key, proc in procs.items():
        if key not in ended:
            stop(proc)
            ended[key] = (None, time.time())
    return ended


def clear_build_locks(*ops: str) -> None:
    """A build killed with its run leaves torch's lock behind, on which every later load of the op would wait
    forever; a lock that another process's build still holds stays."""
    from trl_ds.op_locks import clear_if_stale, lock_files

    for lock in lock_files(ops):
        clear_if_stale(lock)


def model_folder(check: Check, key: str) -> str:
    return os.path.join(check.work, "models", key)


def dataset_path(check: Check, trainer: str = "sft") -> str:
    """A folder holding train.jsonl: TRL's own CLI passes dataset_name to load_dataset as it is, which reads a
    folder but not a single .jsonl file."""
    return os.path.join(check.work, "data", "long" if trainer == "sft" else f"long_{trainer}")


def write_long_dataset(check: Check) -> None:
    """SFT texts of twice trainer.max_length words of the tiny tokenizer: every sample is cut to full length, as
    the estimate assumes. DPO pairs likewise: a prompt of half the length, then a chosen and a rejected answer
    each long enough that prompt + answer is cut to trainer.max_length."""
    from trl_ds.worker.data import NUMBERS

    max_length = int(next(o for o in check.mode.common if o.startswith("trainer.max_length=")).split("=")[1])
    for trainer in ("sft", "dpo"):
        os.makedirs(dataset_path(check, trainer), exist_ok=True)
        with open(os.path.join(dataset_path(check, trainer), "train.jsonl"), "w") as f:
            for i in range(DATASET_ROWS):
                a, b = i % 10, (i // 10) % 10
                words = f"question : what is {NUMBERS[a]} plus {NUMBERS[b]} ? answer : {NUMBERS[a + b]} .".split()
                text = " ".join((words * max_length)[:2 * max_length])
                pair = {"prompt": " ".join(text.split()[:max_length // 2]), "chosen": " " + text,
                        "rejected": " " + " ".join(reversed(text.split()))}
                f.write(json.dumps({"text": text} if trainer == "sft" else pair) + "\n")


# --------------------------------------------------------------------------------------------------------- runs

def run_name(model: str, stage: int, offload: str, trainer: str = "sft") -> str:
    return f"{model}_s{stage}_{offload}" if trainer == "sft" else f"{model}_{trainer}_s{stage}_{offload}"


def run_all(check: Check, py: str) -> None:
    for model, stage, offload, *rest in check.mode.runs:
        trainer = rest[0] if rest else "sft"
        name = run_name(model, stage, offload, trainer)
        entry = {"name": name, "model": model, "stage": stage, "offload": offload, "trainer": trainer}
        check.results["runs"].append(entry)
        run_unless_skipped(check, py, entry, run_one)


def run_unless_skipped(check: Check, py: str, entry: dict, run) -> None:
    """Skip with the reason (its model or optimizer op missing, past the start deadline), or run; then save."""
    op = needed_op(check.mode, entry["offload"])
    if check.results["models"].get(entry["model"], {}).get("status") != "ok":
        entry.update(status="skipped", reason=f"model folder for {entry['model']} was not built")
    elif op and check.results["ops"].get(op, {}).get("status") != "ok":
        entry.update(status="skipped", reason=f"DeepSpeed's {op} did not build")
    elif check.elapsed() > check.mode.start_deadline:
        entry.update(status="skipped", reason=f"past the {check.mode.start_deadline} s start deadline")
    else:
        run(check, py, entry)
    check.save()
    print(f"[{check.elapsed():5.0f} s] {entry['name']}: {entry['status']} {entry.get('reason', '')}", flush=True)


def needed_op(mode: Mode, offload: str) -> Optional[str]:
    """The JIT op a run's optimizer loads: fused Adam on a GPU, CPU Adam with optimizer offload."""
    if offload == "none":
        return "fused_adam" if "fused_adam" in mode.ops else None  # CPU ranks without offload use torch's Adam
    return "cpu_adam"


def run_overrides(check: Check, entry: dict) -> List[str]:
    trainer = entry.get("trainer", "sft")
    # GRPO keeps its built-in prompts: its memory is the prompts' and completions' (trainer.max_completion_length)
    # and no trainer.max_length (trl_ds refuses it: GRPOConfig has none)
    data = [] if trainer == "grpo" else [f"trainer.dataset_name={dataset_path(check, trainer)}"]
    common = [o for o in check.mode.common if trainer != "grpo" or not o.startswith("trainer.max_length=")]
    return [*common, f"model={check.mode.models[entry['model']]}", f"trainer={trainer}",
            f"model.name_or_path={model_folder(check, entry['model'])}", f"zero=stage{entry['stage']}",
            f"offload={entry['offload']}", "trainer.logging_steps=1", "save_final_model=false",
            "preflight.memory=warn", *data,
            f"hydra.run.dir={run_dir(check, entry['name'])}"]


def run_dir(check: Check, name: str) -> str:
    return os.path.join(check.work, "runs", name)


def run_one(check: Check, py: str, entry: dict) -> None:
    log = os.path.join(check.work, "logs", f"{entry['name']}.log")
    rc = run_timed(check, [py, "-m", "trl_ds", *run_overrides(check, entry)], log, entry)
    entry["status"] = "timeout" if rc is None else "completed" if rc == 0 else "failed"
    if rc is None:
        entry["reason"] = f"killed after {entry['wall_s']} s"
    analyse(check, entry)
    if entry["status"] != "completed":
        check.note_failure(f"run {entry['name']} {entry['status']}", log)
        rank_log = rank_stderr(run_dir(check, entry["name"]))
        if rank_log:
            check.note_failure(f"run {entry['name']}: rank 0's stderr", rank_log)


def run_timed(check: Check, cmd: List[str], log: str, entry: dict) -> Optional[int]:
    """One command within the run timeout and the hard end: its return code (None: killed), its wall_s in entry."""
    began = time.time()
    rc = finish(start(cmd, log), time.monotonic() + min(check.mode.run_timeout, check.left()))
    entry["wall_s"] = round(time.time() - began, 1)
    if rc is None:
        clear_build_locks(*JIT_OPS)
    return rc


def rank_stderr(folder: str) -> Optional[str]:
    logs = os.path.join(folder, "logs", "node_0")
    for root, _, files in os.walk(logs):
        if root.endswith(os.path.join("attempt_0", "0")) and "stderr.log" in files:
            return os.path.join(root, "stderr.log")
    return None


def read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def analyse(check: Check, entry: dict) -> None:
    """What the run dir says: losses, the DeepSpeed config used, memory and step time against plan.json."""
    folder = run_dir(check, entry["name"])
    plan, summary = read_json(os.path.join(folder, "plan.json")), read_json(os.path.join(folder, "summary.json"))
    mem = read_json(os.path.join(folder, "memory", "rank_0.json"))
    metrics = read_metrics(os.path.join(folder, "metrics.jsonl"))
    if summary and summary.get("status") == "failed":
        entry["reason"] = summary.get("reason")
    losses = [m["loss"] for m in metrics if "loss" in m]
    entry["losses"] = losses
    entry["losses_finite"] = bool(losses) and all(isinstance(x, (int, float)) and math.isfinite(x) for x in losses)
    if entry["status"] == "completed" and not entry["losses_finite"]:
        entry["status"], entry["reason"] = "failed", "a logged loss is not finite (or none was logged)"
    if mem:
        written = read_json(os.path.join(folder, "ds_config.json"))
        used = mem.get("deepspeed_config")
        entry["ds_config_differences"] = None if used is None else differences(written, used)
        entry["ds_config_as_written"] = None if used is None else all(
            d.split(":")[0] in KNOWN_OVERRIDES for d in entry["ds_config_differences"])
        entry["optimizer_class"] = mem.get("optimizer_class")
    if plan:
        entry["memory"] = memory_comparison(plan["current"], mem)
        entry["step"] = step_comparison(check, plan["current"], metrics, plan)


def read_metrics(path: str) -> List[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def differences(a, b, prefix: str = "") -> List[str]:
    """Dotted keys whose values differ between two JSON trees."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [f"{prefix.rstrip('.')}: {a!r} written, {b!r} used"]


def total(tree: dict) -> int:
    return sum(sum(v.values()) for v in tree.values())


def ratio(a, b) -> Optional[float]:
    return round(a / b, 3) if a is not None and b else None


def memory_comparison(current: dict, mem: Optional[dict]) -> dict:
    """Measured peak against the estimated per-rank peak; model-state bytes against the after-step estimate.
    On a CPU rank the peak is the process's peak RSS (what the estimate means there)."""
    out = {"estimated_peak_bytes": current["device_total_bytes"],
           "estimated_model_states_bytes": total(current["after_step_bytes"]),
           "estimated_device_model_states_bytes": sum(current["after_step_bytes"].get(k, {}).get("device", 0)
                                                       for k in current["after_step_bytes"]),
           "estimated_terms_bytes": current["device_bytes"], "verdict": current["verdict"],
           "estimated_quantized_load_bytes": current["device_bytes"].get("quantized_load", 0)}
    if not mem:
        return out
    states = mem["model_states"]
    out["measured_model_states_bytes"] = total(states)
    out["model_states_ratio"] = ratio(out["measured_model_states_bytes"], out["estimated_model_states_bytes"])
    out["peak_rss_bytes"] = mem["peak_rss_bytes"]
    if "gpu_peak_allocated_bytes" in mem:
        out["measured_device_model_states_bytes"] = sum(v.get("cuda", 0) for v in states.values())
        out["device_model_states_ratio"] = ratio(out["measured_device_model_states_bytes"],
                                                 out["estimated_device_model_states_bytes"])
        out["peak_allocated_bytes"] = mem["gpu_peak_allocated_bytes"]
        out["peak_reserved_bytes"] = mem["gpu_peak_reserved_bytes"]
    else:
        out["peak_allocated_bytes"] = out["peak_reserved_bytes"] = None
    measured = out["peak_allocated_bytes"] or out["peak_rss_bytes"]
    out["measured_over_estimated_peak"] = ratio(measured, out["estimated_peak_bytes"])
    out["reserved_over_estimated_peak"] = ratio(out["peak_reserved_bytes"], out["estimated_peak_bytes"])
    return out


def step_comparison(check: Check, current: dict, metrics: List[dict], plan: dict) -> dict:
    """Median seconds between logged steps after the warm-up, against the model's estimate; MFU against the
    preset's peak, with the FLOPs the model counts (its compute term × peak × efficiency)."""
    from trl_ds.plan.steptime import read_preset

    hw = read_preset(check.mode.gpu_preset)
    flops = current["step_terms"]["compute"] * hw["peak_tflops"] * 1e12 * hw["efficiency"]
    out = {"estimated_s": round(current["step_seconds"], 4),
           "estimated_terms_s": {k: round(v, 4) for k, v in current["step_terms"].items()},
           "flops_per_step": flops, "preset": check.mode.gpu_preset, "peak_tflops": hw["peak_tflops"]}
    times = [(m["step"], m["time"]) for m in metrics if "loss" in m]
    warmup = min(WARMUP_STEPS, len(times) - 2)
    gaps = [t - s for (_, s), (_, t) in zip(times[warmup:], times[warmup + 1:])]
    if gaps:
        measured = statistics.median(gaps)
        out.update(measured_s=round(measured, 4), steps_timed=len(gaps),
                   measured_over_estimated=ratio(measured, current["step_seconds"]),
                   mfu=round(flops / (measured * hw["peak_tflops"] * 1e12), 4),
                   tokens_per_step=plan["seq_len"] * current["micro_batch"])
    return out


def zero3_vs_zero2(runs: List[dict]) -> List[dict]:
    """For each model and offload with both stages measured: ZeRO-3's peak over ZeRO-2's, measured and estimated."""
    done = {(r["model"], r.get("trainer", "sft"), r["stage"], r["offload"]): r for r in runs
            if r.get("status") == "completed" and r.get("memory", {}).get("measured_over_estimated_peak")}
    out = []
    for (model, trainer, stage, offload), s3 in done.items():
        s2 = done.get((model, trainer, 2, offload))
        if stage != 3 or s2 is None:
            continue
        m2, m3 = s2["memory"], s3["memory"]
        measured2 = m2["peak_allocated_bytes"] or m2["peak_rss_bytes"]
        measured3 = m3["peak_allocated_bytes"] or m3["peak_rss_bytes"]
        out.append({"model": model, "offload": offload, "measured_allocated_ratio": ratio(measured3, measured2),
                    "measured_reserved_ratio": ratio(m3["peak_reserved_bytes"], m2["peak_reserved_bytes"]),
                    "estimated_ratio": ratio(m3["estimated_peak_bytes"], m2["estimated_peak_bytes"]),
                    **({} if trainer == "sft" else {"trainer": trainer})})
    return out


# ------------------------------------------------------------------------------------------------------ TRL CLI

TRL_CLI = "import sys; from trl.cli import main; sys.exit(main())"  # the `trl` console script


def trl_cli(check: Check, py: str) -> None:
    """`trl sft --config trainer.yaml` (TRL's own CLI) in the first completed run dir."""
    done = [r for r in check.results["runs"] if r.get("status") == "completed" and r.get("trainer", "sft") == "sft"]
    if not done:
        check.results["trl_cli"] = {"status": "skipped", "reason": "no completed run dir"}
    elif check.elapsed() > check.mode.start_deadline:
        check.results["trl_cli"] = {"status": "skipped", "reason": f"past the {check.mode.start_deadline} s deadline"}
    else:
        smallest = min(done, key=lambda r: (r["memory"]["estimated_peak_bytes"], r["stage"]))
        folder = run_dir(check, smallest["name"])
        log = os.path.join(check.work, "logs", "trl_cli.log")
        began = time.time()
        rc = finish(start([py, "-c", TRL_CLI, "sft", "--config", "trainer.yaml"], log, cwd=folder),
                    time.monotonic() + min(check.mode.run_timeout, check.left()))
        if rc is None:
            clear_build_locks(*JIT_OPS)
        text = tail(log, 400)
        losses = [float(x) for x in _loss_values(text)]
        entry = {"run": smallest["name"], "status": "timeout" if rc is None else "completed" if rc == 0 else "failed",
                 "wall_s": round(time.time() - began, 1), "losses": losses}
        if rc != 0:
            check.note_failure(f"trl sft --config trainer.yaml in {smallest['name']}", log)
        check.results["trl_cli"] = entry
    check.save()


def _loss_values(text: str) -> List[str]:
    """The Trainer's logged dicts ({'loss': '6.37', ...} or 'loss': 6.37) in TRL's console output."""
    import re

    return re.findall(r"'loss': '?([0-9.eE+-]+|nan|inf)'?", text)


# ------------------------------------------------------------------------------------------------------- report

def gib(n) -> str:
    return "–" if n is None else f"{n / GiB:.2f}"


def num(x, fmt: str = "{:.3g}") -> str:
    return "–" if x is None else fmt.format(x)


def render_report(r: dict) -> str:
    env = r.get("env") or {}
    gpu = env.get("gpu", {})
    lines = [f"# trl_ds GPU check ({r['mode']})", "",
             f"Device: {gpu.get('name', 'no GPU')}; Python {env.get('python', '?')}; "
             + ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items())
             + f". Elapsed {r.get('elapsed_s', 0):.0f} s.", ""]
    if r["ops"]:
        lines.append("DeepSpeed JIT builds: " + "; ".join(
            f"{op} {e['status']} in {e['seconds']} s" for op, e in r["ops"].items()) + ".")
    if r["models"]:
        lines.append("Model folders (random init from the preset's dimensions): " + "; ".join(
            f"{k} {e['status']} in {e['seconds']} s" for k, e in r["models"].items()) + ".")
    lines += ["", "| run | status | final loss | DS JSON as written | optimizer | est. peak GiB | allocated GiB "
              "| reserved GiB | allocated / est. | reserved / est. | states meas./est. | step s meas. | step s est. "
              "| meas./est. | MFU |", "|" + "---|" * 15]
    for run in r["runs"]:
        m, s = run.get("memory", {}), run.get("step", {})
        diffs, same = run.get("ds_config_differences"), run.get("ds_config_as_written")
        ds = "–" if same is None else "yes" if same else f"no: {'; '.join(diffs)}"[:120]
        losses = run.get("losses") or []
        status = run["status"] + (f": {run['reason']}"[:80] if run.get("reason") else "")
        lines.append(" | ".join([f"| {run['name']}", status, num(losses[-1] if losses else None, "{:.4f}"), ds,
                                 run.get("optimizer_class") or "–", gib(m.get("estimated_peak_bytes")),
                                 gib(m.get("peak_allocated_bytes")), gib(m.get("peak_reserved_bytes")),
                                 num(m.get("measured_over_estimated_peak")), num(m.get("reserved_over_estimated_peak")),
                                 num(m.get("model_states_ratio")), num(s.get("measured_s")), num(s.get("estimated_s")),
                                 num(s.get("measured_over_estimated")), num(s.get("mfu"))]) + " |")
    lines.append("")
    for z in r.get("zero3_vs_zero2") or []:
        lines.append(f"ZeRO-3 / ZeRO-2 peak, {z['model']}{' ' + z['trainer'] if 'trainer' in z else ''}, offload "
                     f"{z['offload']}: measured "
                     f"{num(z['measured_allocated_ratio'])} (allocated), {num(z['measured_reserved_ratio'])} "
                     f"(reserved); estimated {num(z['estimated_ratio'])}.")
    cli = r.get("trl_cli")
    if cli:
        lines.append(f"TRL CLI (`trl sft --config trainer.yaml`): {cli['status']}"
                     + (f" in {cli['run']}, {cli['wall_s']} s, losses {cli.get('losses')}" if "run" in cli else
                        f" ({cli.get('reason')})") + ".")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------- main

def gpu_memory_gb() -> int:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, check=True)
    return int(float(out.stdout.split()[0]) / 1024)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python tests/gpu/gpu_check.py", description=__doc__.split("\n")[0])
    parser.add_argument("out", help="folder for results.json, report.md, failures.log, runs.tar.gz")
    parser.add_argument("--cpu-smoke", action="store_true", help="the same pipeline on one CPU rank, tiny model")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "trl_ds_gpu_check"),
                        help="run dirs and model folders (default: %(default)s; model folders are kept for a rerun)")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    work = os.path.abspath(args.work)
    shutil.rmtree(os.path.join(work, "runs"), ignore_errors=True)  # a rerun starts fresh run dirs
    started = float(os.environ.get("GPU_CHECK_STARTED") or time.time())
    mode = cpu_mode() if args.cpu_smoke else gpu_mode(gpu_memory_gb())
    check = Check(out, work, mode, started)
    py = sys.executable
    if prepare(check, py):
        run_all(check, py)
        trl_cli(check, py)
    check.save()
    print(render_report(check.results))
    return 0 if any(r.get("status") == "completed" for r in check.results["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
