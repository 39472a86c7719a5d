"""`trl-ds calibrate [--out FILE] [--ranks 2] [--nvme-path DIR]`: this machine's step-time numbers.

    trl-ds calibrate --out hw.yaml && trl-ds plan cluster.gpu=$PWD/hw.yaml

Measures on the device in use (cuda if present, else cpu with the cores shared by --ranks): matmul throughput, a
small transformer's forward+backward at two micro-batch sizes (efficiency and fixed cost per micro-step), host copy
bandwidth, the 2-rank all-reduce bandwidth and latency of the active backend, what a DeepSpeed ZeRO-2 and ZeRO-3
micro-step costs per parameter beyond those collectives, torch AdamW on the device and the offload optimizer (fused
AdamW on every core; --deepspeed-adam: DeepSpeedCPUAdam), and NVMe write/read at --nvme-path. Writes a hardware
YAML in the format of trl_ds/plan/hardware/'s presets.
"""
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

import yaml

from trl_ds.config.schema import ZeroConfig
from trl_ds.launch import spawn_env
from trl_ds.launch.build_ops import build
from trl_ds.op_locks import EXIT_REFUSED, bound_op_lock_waits
from trl_ds.rundir.deepspeed_config import ZERO_1_2, ZERO_3, ZERO_COMMON

GB = 1e9
MATMUL_N = {"cpu": 768, "cuda": 8192}
COPY_BYTES = 64 * 2 ** 20
ALLREDUCE_ELEMENTS = 2 ** 20  # 4 MiB fp32
ADAM_PARAMS = 8_000_000
NVME_BYTES = 64 * 2 ** 20
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2)
SEQ = 64
# ZeRO's gradient path is timed on a 3.2M-parameter Llama: big enough to rise above timer noise on 2 busy cores,
# small enough to take seconds per stage.
ZERO_MODEL = dict(TINY, hidden_size=256, intermediate_size=704)
ZERO = ZeroConfig()  # trl_ds's defaults, as a run without zero.* overrides gets them


def steady_step_seconds(run_dir: str, skip: int = 4) -> float:
    """Median seconds between logged optimizer steps after the first `skip`: the steady state."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        times: List[float] = [json.loads(line)["time"] for line in f if '"step"' in line and '"time"' in line]
    gaps = [b - a for a, b in zip(times[skip:], times[skip + 1:])]
    if not gaps:
        raise ValueError(f"{run_dir}/metrics.jsonl has {len(times)} steps; need more than {skip + 1}")
    return statistics.median(gaps)


def timed(fn: Callable[[], None], repeat: int, sync: Callable[[], None] = lambda: None,
          pick: Callable[[List[float]], float] = statistics.median) -> float:
    """Median (or `pick`) seconds of one call, after one warm-up call."""
    fn()
    sync()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return pick(samples)


def matmul_tflops(torch, device: str, sync) -> float:
    n = MATMUL_N[device]
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n ** 3 / timed(lambda: a @ b, 5, sync) / 1e12


def training_shape(torch, device: str, sync, peak_tflops: float) -> Dict[str, float]:
    """Forward+backward of a tiny Llama at micro-batch 1 and 4: efficiency (slope) and fixed cost."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**TINY)).to(device)
    matmul_params = sum(p.numel() for p in model.parameters()) - TINY["vocab_size"] * TINY["hidden_size"]
    seconds = {}
    for micro in (1, 4):
        ids = torch.randint(0, TINY["vocab_size"], (micro, SEQ), device=device)
        seconds[micro] = timed(lambda ids=ids: model(input_ids=ids, labels=ids).loss.backward(), 5, sync)
    per_sample = max((seconds[4] - seconds[1]) / 3, 1e-9)
    flops = SEQ * (6 * matmul_params + 12 * TINY["num_hidden_layers"] * SEQ * TINY["hidden_size"])
    return {"efficiency": min(flops / per_sample / (peak_tflops * 1e12), 1.0),
            "micro_step_overhead_ms": max(seconds[1] - per_sample, 0.0) * 1e3}


def copy_gbps(torch, device: str, sync) -> float:
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=device == "cuda")
    dst = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    return COPY_BYTES / timed(lambda: dst.copy_(src, non_blocking=False), 5, sync) / GB


def adam_rates(torch, device: str, sync, deepspeed_adam: bool) -> Dict[str, float]:
    """torch AdamW on the device as an effective bandwidth (28 B per parameter), and the offload optimizer's
    parameters per second on every core: DeepSpeedCPUAdam with --deepspeed-adam, else torch's fused AdamW."""
    from trl_ds.plan.steptime import ADAM_BYTES_PER_PARAM

    p = torch.nn.Parameter(torch.randn(ADAM_PARAMS, device=device))
    p.grad = torch.randn_like(p)
    device_seconds = timed(torch.optim.AdamW([p], lr=1e-3).step, 5, sync)
    cpu_p = torch.nn.Parameter(torch.randn(ADAM_PARAMS))
    cpu_p.grad = torch.randn_like(cpu_p)
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    if deepspeed_adam:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        offload_adam = DeepSpeedCPUAdam([cpu_p], lr=1e-3)
    else:
        offload_adam = torch.optim.AdamW([cpu_p], lr=1e-3, fused=True)
    offload_seconds = timed(offload_adam.step, 5)
    torch.set_num_threads(threads)
    return {"hbm_gbps": ADAM_BYTES_PER_PARAM * ADAM_PARAMS / device_seconds / GB,
            "cpu_adam_mparams_per_s": ADAM_PARAMS / offload_seconds / 1e6}


def _collective_worker(rank: int, world: int, port: int, device: str, out: str) -> None:
    import torch
    import torch.distributed as dist

    bound_op_lock_waits()  # a spawned rank loads DeepSpeed's shm_comm op
    torch.set_num_threads(max((os.cpu_count() or 1) // world, 1))
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    big, small = torch.ones(ALLREDUCE_ELEMENTS, device=device), torch.ones(1, device=device)
    seconds = timed(lambda: dist.all_reduce(big), 5, sync)
    latency = timed(lambda: dist.all_reduce(small), 10, sync)
    # bus bandwidth: a ring all-reduce moves 2 (N-1)/N of the buffer per rank (steptime's convention)
    moved = 2 * (world - 1) / world * big.numel() * big.element_size()
    numbers = {"intra_node_gbps": moved / max(seconds - latency, 1e-9) / GB, "collective_latency_us": latency * 1e6}
    numbers.update(zero_rates(torch, device, sync, world, numbers))
    if rank == 0:
        with open(out, "w") as f:
            json.dump(numbers, f)
    dist.destroy_process_group()


def zero_micro_step_seconds(torch, device: str, sync, stage: int):
    """Seconds of a non-boundary micro-step under DeepSpeed at `stage` (trl_ds's defaults); the sizes."""
    import deepspeed
    from transformers import LlamaConfig, LlamaForCausalLM

    zero = {"stage": stage, **{k: getattr(ZERO, k) for k in ZERO_COMMON + (ZERO_3 if stage == 3 else ZERO_1_2)}}
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1000, "zero_optimization": zero,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}, "steps_per_print": 10 ** 9}
    model = LlamaForCausalLM(LlamaConfig(**ZERO_MODEL))
    sizes = [p.numel() for p in model.parameters()]
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    ids = torch.randint(0, ZERO_MODEL["vocab_size"], (1, SEQ), device=engine.device)

    def micro_step():
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        engine.step()

    # the first (warm-up) builds DeepSpeed's hooks and buffers; the fastest: other work only slows a micro-step down
    return timed(micro_step, 8, sync, pick=min), sizes


def zero_rates(torch, device: str, sync, world: int, comm: Dict[str, float]) -> Dict[str, float]:
    """Nanoseconds per parameter per micro-step that ZeRO-2 and ZeRO-3 add to a stage-0 micro-step beyond the
    collectives steptime.zero_seconds already counts at the bandwidth and latency just measured."""
    os.environ.setdefault("LOCAL_RANK", str(torch.distributed.get_rank()))
    base, sizes = zero_micro_step_seconds(torch, device, sync, 0)
    params, width, ring = sum(sizes), 4, (world - 1) / world  # fp32: the engine trains in the model's dtype
    bandwidth, latency = comm["intra_node_gbps"] * GB, comm["collective_latency_us"] * 1e-6
    gathered = sum(n >= ZERO.stage3_param_persistence_threshold for n in sizes)  # steptime.gathered_modules
    modelled = {2: 2 * ring * params * width / bandwidth + latency,  # one bucket all-reduce
                3: 3 * ring * params * width / bandwidth + 3 * gathered * latency}  # 2 gathers, 1 reduce-scatter
    rates = {}
    for stage in (2, 3):
        seconds, _ = zero_micro_step_seconds(torch, device, sync, stage)
        rates[f"zero{stage}_ns_per_param"] = max(seconds - base - modelled[stage], 0.0) / params * 1e9
    return rates


def collective_rates(device: str, world: int) -> Dict[str, float]:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "collective.json")
        try:
            mp.spawn(_collective_worker, args=(world, port, device, out), nprocs=world, join=True)
        except mp.ProcessExitedException as err:
            if err.exit_code == EXIT_REFUSED:  # each rank said why in one line (an op lock taken after main loaded)
                raise SystemExit(EXIT_REFUSED) from None
            raise
        with open(out) as f:
            return json.load(f)


def nvme_rates(folder: str) -> Dict[str, float]:
    """Write with fsync, drop the file from the page cache, read back: what the swap files would see."""
    os.makedirs(folder, exist_ok=True)
    data = os.urandom(NVME_BYTES)
    path = os.path.join(folder, "trl_ds_calibrate.bin")
    try:
        start = time.perf_counter()
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        write = time.perf_counter() - start
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            start = time.perf_counter()
            while f.read(16 * 2 ** 20):
                pass
            read = time.perf_counter() - start
    finally:
        os.remove(path)
    return {"nvme_write_gbps": NVME_BYTES / write / GB, "nvme_read_gbps": NVME_BYTES / read / GB}


def measure(ranks: int, nvme_path: str, deepspeed_adam: bool = False) -> Dict[str, float]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cpu":  # every rank gets its share of the cores, as in a ranks-process run
        torch.set_num_threads(max((os.cpu_count() or 1) // ranks, 1))
    numbers = {"peak_tflops": matmul_tflops(torch, device, sync)}
    numbers.update(training_shape(torch, device, sync, numbers["peak_tflops"]))
    numbers["pcie_gbps"] = copy_gbps(torch, device, sync)
    numbers.update(adam_rates(torch, device, sync, deepspeed_adam))
    numbers.update(collective_rates(device, min(ranks, torch.cuda.device_count()) if device == "cuda" else ranks))
    numbers.update(nvme_rates(nvme_path))
    numbers["memory_gb"] = torch.cuda.get_device_properties(0).total_memory / 2 ** 30 if device == "cuda" else 0
    numbers.update(unmeasured(numbers, device))
    return {k: float(f"{v:.4g}") for k, v in numbers.items()}


def unmeasured(numbers: Dict[str, float], device: str) -> Dict[str, float]:
    """The numbers calibrate cannot measure on one machine, set to defaults (DEFAULT_WHY says which and why)."""
    return {"inter_node_gbps": numbers["intra_node_gbps"], "comm_overlap": 0.8 if device == "cuda" else 0.0,
            "zero3_us_per_module": 0.0}


DEFAULT_WHY = {
    "inter_node_gbps": "default, not measured: one machine has no network link; set to intra_node_gbps",
    "comm_overlap": "default, not measured: 0.8 on cuda (a guess), 0 on cpu (ranks compute and communicate on "
                    "the same cores)",
    "memory_gb": "not read by the planner (cluster.gpu_memory_gb decides)",
    "zero3_us_per_module": "default, not measured: zero3_ns_per_param, measured, holds ZeRO-3's per-module cost",
}


def write(numbers: Dict[str, float], path: str, seconds: float) -> None:
    """The hardware YAML; every value not measured carries a comment saying so."""
    lines = [f"# Measured by trl-ds calibrate in {seconds:.0f} s on {os.uname().nodename}, except where a line says",
             "# otherwise.", f"# python -m trl_ds cluster.gpu={os.path.abspath(path)}"]
    for key, value in numbers.items():
        line = yaml.safe_dump({key: value}).rstrip()
        lines.append(f"{line}  # {DEFAULT_WHY[key]}" if key in DEFAULT_WHY else line)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def calibrate(out: str, ranks: int, nvme_path: str, deepspeed_adam: bool = False) -> int:
    """`trl-ds calibrate`: measure, write the hardware YAML `out`, print it; the exit code."""
    # DeepSpeed's JIT ops with the ninja every launch uses (the venv's): another ninja rebuilds them from scratch
    # (trl_ds/launch/build_ops.py); the ZeRO micro-steps load shm_comm, --deepspeed-adam cpu_adam
    os.environ["PATH"] = spawn_env()["PATH"]
    bound_op_lock_waits()
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout, where the YAML goes
        build("deepspeed_shm_comm", say_cleared=True)  # its ranks load it: built, or a held lock waited on, here once
    start = time.perf_counter()
    numbers = measure(ranks, nvme_path, deepspeed_adam)
    write(numbers, out, time.perf_counter() - start)
    print(yaml.safe_dump(numbers, sort_keys=False).rstrip())
    print(f"wrote {out} in {time.perf_counter() - start:.0f} s; use it with cluster.gpu={os.path.abspath(out)}")
    return 0


def ranks(xs: List[float]) -> List[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            out[k] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: List[float], b: List[float]) -> float:
    """Spearman's rank correlation: Pearson's correlation of the ranks."""
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5


def winner_gap(predicted: List[float], measured: List[float]) -> float:
    """How much slower (measured) the predicted fastest is than the measured fastest: 0.05 = 5 %."""
    chosen = min(range(len(predicted)), key=lambda i: predicted[i])
    return measured[chosen] / min(measured) - 1
