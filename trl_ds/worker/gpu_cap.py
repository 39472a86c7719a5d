"""A smaller GPU on a bigger one: cluster.gpu_memory_gb below the device's memory caps each rank at that size.

The planner judges every run against cluster.gpu_memory_gb, so the rank must not get more: torch's caching
allocator refuses any allocation past fraction × the device's total (memory outside it, such as the CUDA context, is
not counted, as the estimate does not count it). A value above the device's memory stops the rank with one line
before any weight is loaded.
"""
import sys
from typing import NamedTuple, Optional

from trl_ds.errors import EXIT_USER_ERROR

GiB = 2 ** 30
# cluster presets name cards by their marketing size: an "80 GB" H100 has 79.6 GiB, an H200 "141 GB" 140.4 GiB. A
# value up to this much above the device's memory means the whole device (no cap), not a mistake.
WHOLE_DEVICE_SLACK = 0.05


class Cap(NamedTuple):
    fraction: Optional[float]  # for set_per_process_memory_fraction; None: no cap
    line: str  # what the rank logs (or, with refused, the one line it stops with)
    refused: bool = False

    def record(self, total_bytes: int, requested_gb: float) -> dict:
        """What memory/rank_K.json keeps."""
        return {"gpu_memory_gb": requested_gb, "device_total_bytes": total_bytes, "fraction": self.fraction,
                "cap_bytes": int(self.fraction * total_bytes) if self.fraction else None}


def cap_for(requested_gb: float, total_bytes: int, device_name: str = "GPU", local_rank: int = 0) -> Cap:
    """The fraction of the device's memory that cluster.gpu_memory_gb allows, and the line saying so. Pure."""
    total_gb = total_bytes / GiB
    where = f"local GPU {local_rank} ({device_name}, {total_gb:.1f} GiB)"
    if requested_gb <= 0:  # 0: a CPU cluster's value, judged against host RAM; nothing to cap
        return Cap(None, f"trl_ds: {where}: cluster.gpu_memory_gb={requested_gb:g}, no cap")
    if requested_gb > total_gb * (1 + WHOLE_DEVICE_SLACK):
        return Cap(None, f"cluster.gpu_memory_gb={requested_gb:g} is more than this node's {where}: the plan "
                         f"assumed memory this GPU does not have. Set cluster.gpu_memory_gb={int(total_gb)} (or less "
                         f"to rehearse a smaller GPU).", refused=True)
    if requested_gb >= total_gb:
        return Cap(None, f"trl_ds: {where}: cluster.gpu_memory_gb={requested_gb:g} is the whole device, no cap")
    fraction = requested_gb / total_gb
    return Cap(fraction, f"trl_ds: {where} capped at cluster.gpu_memory_gb={requested_gb:g} GiB "
                         f"(set_per_process_memory_fraction {fraction:.4f})")


_applied: dict = {}  # this process's cap, for memory/rank_K.json (worker/measure.py peak_memory)


def apply_gpu_cap(cluster, local_rank: int) -> None:
    """On a CUDA rank: cap this process's allocator, log it, and keep it for the rank's memory file; a value above
    the device's memory ends the rank with one line and exit code 2. Nothing on a CPU rank."""
    import torch

    if not torch.cuda.is_available() or str(getattr(cluster.device, "value", cluster.device)) != "cuda":
        return
    device = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device)
    cap = cap_for(float(cluster.gpu_memory_gb), props.total_memory, props.name, local_rank)
    if cap.refused:
        # The failing rank's last error line is what the launch reports (launch/summary.py ERROR_LINE)
        print(f"GpuMemoryError: {cap.line}", file=sys.stderr, flush=True)
        sys.exit(EXIT_USER_ERROR)
    if cap.fraction is not None:
        torch.cuda.set_per_process_memory_fraction(cap.fraction, device)
    print(cap.line, flush=True)
    _applied.update(cap.record(props.total_memory, float(cluster.gpu_memory_gb)))


def applied_cap() -> dict:
    """{"gpu_cap": {...}} once apply_gpu_cap ran on a CUDA rank, else {}."""
    return {"gpu_cap": dict(_applied)} if _applied else {}
