"""Optimizer-side bytes per trainable parameter under DeepSpeed's bf16 options, and where a partial optimizer offload
(offload.ratio) puts them. Pure; optimizer_places.py reads these (docs/deepspeed-keys.md).

Per trainable parameter of a rank's partition DeepSpeed allocates master weights and the optimizer's gradient
partition in `master_weights_and_grads_dtype` (bf16 with bf16_master_weights_and_grads, else fp32), and Adam's two
moments in fp32 unless bf16_optimizer_states (offloaded: DeepSpeedCPUAdam's state_dtype; on the device like the
master weights). Without either option: 4 + 4 + 8 = 16 B.
"""
from dataclasses import dataclass
from typing import Sequence, Tuple


@dataclass(frozen=True)
class OptimizerBytes:
    master: int  # master weights
    moments: int  # Adam's exp_avg and exp_avg_sq together
    master_grads: int  # the optimizer's gradient partition

    @property
    def states(self) -> int:
        """Master weights and moments (12 B per parameter without the bf16 options)."""
        return self.master + self.moments


def optimizer_bytes(bf16_master_weights_and_grads: bool = False, bf16_optimizer_states: bool = False,
                    offloaded: bool = False) -> OptimizerBytes:
    """Bytes per trainable parameter for one combination (the checks refuse those DeepSpeed refuses first)."""
    master = 2 if bf16_master_weights_and_grads else 4
    if offloaded:
        moment = 2 if bf16_optimizer_states else 4  # CPU Adam: fp32_optimizer_states = not bf16_optimizer_states
    else:
        moment = master  # zeros_like(master weights)
    return OptimizerBytes(master=master, moments=2 * moment, master_grads=master)


def offload_split(sizes: Sequence[int], ratio: float) -> Tuple[int, int]:
    """(elements on the device, offloaded): sub-group i is offloaded when i >= int((1 - ratio) * n)."""
    on_device = int((1 - ratio) * len(sizes))
    return sum(sizes[:on_device]), sum(sizes[on_device:])


def even_offload_split(elements: int, sub_group_size: int, ratio: float) -> Tuple[int, int]:
    """offload_split when only a rank's trainable element count is known: sub-groups of sub_group_size each (the
    last one smaller), as one param group. The split moves in whole sub-groups, so a ratio rounds toward offloading."""
    if elements <= 0:
        return 0, 0
    full, rest = divmod(elements, max(1, sub_group_size))
    return offload_split([sub_group_size] * full + ([rest] if rest else []), ratio)
