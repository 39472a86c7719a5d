"""Optimizer-side bytes per trainable parameter under DeepSpeed's bf16 options, and where a partial optimizer offload
(offload.ratio) puts them. Pure; optimizer_places.py reads these for the memory estimate, the step time and the
ratio check (docs/deepspeed-keys.md).

What DeepSpeed 0.19.8 allocates, per trainable parameter of a rank's partition:
- master weights in `master_weights_and_grads_dtype`: bf16 with bf16_master_weights_and_grads, else fp32
  (runtime/base_optimizer.py `_configure_master_weights`; stage_1_and_2.py `single_partition_of_fp32_groups`,
  stage3.py `_create_fp32_partitions`);
- the optimizer's gradient partition in that same dtype (stage_1_and_2.py `single_partition_of_fp32_groups[i].grad`,
  stage3.py `fp32_partitioned_groups_flat[i].grad`);
- Adam's two moments: offloaded, DeepSpeedCPUAdam keeps them in fp32 unless bf16_optimizer_states turns its
  fp32_optimizer_states off (runtime/engine.py `get_optimizer_configuration`, ops/adam/cpu_adam.py `state_dtype`);
  on the device the optimizer allocates them like the master weights (torch's `zeros_like(p)`).
Without either option that is 4 + 4 + 8 = 16 B, the "12 B of master weights and Adam, 4 B of fp32 gradients" the
estimate has always used.
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
    """(elements on the device, elements offloaded) of a rank's sub-groups: stage3.py `_create_fp32_partitions` sends
    sub-group i to the CPU when i >= int((1 - ratio) * n), so the first ones stay on the device."""
    on_device = int((1 - ratio) * len(sizes))
    return sum(sizes[:on_device]), sum(sizes[on_device:])


def even_offload_split(elements: int, sub_group_size: int, ratio: float) -> Tuple[int, int]:
    """offload_split when only a rank's trainable element count is known: sub-groups of sub_group_size each (the
    last one smaller), as one param group. The split moves in whole sub-groups, so a ratio rounds toward offloading."""
    if elements <= 0:
        return 0, 0
    full, rest = divmod(elements, max(1, sub_group_size))
    return offload_split([sub_group_size] * full + ([rest] if rest else []), ratio)
