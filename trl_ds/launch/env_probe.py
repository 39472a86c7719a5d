"""The slow part of `trl-ds env`: it imports torch and DeepSpeed, so run dirs never pay for it. DeepSpeed ops are
reported as ds_report does (installed, or buildable here), plus whether a JIT build is cached already."""
import os
from typing import Dict, List

from trl_ds.op_locks import command_of, holders, unseen_reason

# The ops trl_ds uses: cpu_adam (offload.optimizer=cpu), async_io (offload=nvme), fused_adam (GPU Adam).
OPS = ("cpu_adam", "async_io", "fused_adam")


def probe() -> Dict:
    import torch

    return {"torch": torch.__version__, "cuda": torch.version.cuda, "devices": list_devices(),
            "distributed": distributed_backends(), "deepspeed_ops": deepspeed_ops()}


def list_devices() -> List[Dict]:
    import torch

    if not torch.cuda.is_available():
        return []
    devices = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        devices.append({"index": i, "name": props.name, "memory_gb": round(props.total_memory / 2 ** 30, 2)})
    return devices


def distributed_backends() -> Dict[str, bool]:
    import torch.distributed as dist

    return {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(), "mpi": dist.is_mpi_available()}


def deepspeed_ops() -> Dict[str, Dict]:
    """For each op: in the wheel, already JIT-built here, and buildable here (ds_report's "compatible")."""
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder.all_ops import ALL_OPS
    from deepspeed.ops.op_builder.builder import probe_is_compatible

    report = {}
    for name in OPS:
        builder = ALL_OPS.get(name)
        folder = jit_folder(name)
        report[name] = {"installed": bool(installed_ops.get(name)),
                        "cached": os.path.isfile(os.path.join(folder, f"{name}.so")),
                        "compatible": bool(builder and probe_is_compatible(builder, False)),
                        # torch's lock: a process loading or building the op, or left by a killed one
                        "locked": os.path.exists(os.path.join(folder, "lock"))}
    return report


def jit_folder(name: str) -> str:
    """Where torch builds and caches the op just in time (~/.cache/torch_extensions/<python+device>/<name>)."""
    from torch.utils.cpp_extension import _get_build_directory

    return _get_build_directory(name, verbose=False)


def lock_state(lock: str) -> str:
    pids = sorted(holders(lock))
    if pids:
        return f"held by pid {', '.join(map(str, pids))} ({command_of(pids[0])}), loading or building the op"
    reason = unseen_reason(lock) if os.path.exists(lock) else None
    return (f"no process here holds it, but {reason}" if reason else
            "no process holds it (a killed load left it); the next trl_ds command that loads the op removes it")


def format_probe(p: Dict) -> List[str]:
    devices = "; ".join(f"{d['index']}: {d['name']} {d['memory_gb']} GiB" for d in p["devices"]) or "none"
    lines = [f"torch {p['torch']} (CUDA {p['cuda'] or 'none'}); devices: {devices}",
             "distributed backends: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in p["distributed"].items()),
             "DeepSpeed ops (installed = in the wheel; cached = JIT-built here; compatible = can be built here):"]
    for name, op in p["deepspeed_ops"].items():
        flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in op.items() if k != "locked")
        lines.append(f"  {name:<10} {flags}")
        if op["locked"]:
            lock = os.path.join(jit_folder(name), "lock")
            lines.append(f"    lock {lock}: {lock_state(lock)}")
    return lines
