"""Where one rank's optimizer side lives, in bytes: the master weights and Adam's moments (`states`) and the
optimizer's gradient partition (`master_grads`), by place (device | host | nvme), for memory.py and steptime.py.

Bytes per parameter come from precision_bytes.optimizer_bytes. A partial offload (offload.ratio, ZeRO-3 with the
optimizer on the CPU) keeps the first sub-groups' master partition and gradient on the device and steps them there
(stage3.py `_create_fp32_partitions`, `backup_optimizer`); the rest are DeepSpeedCPUAdam's.
"""
from typing import Dict, Tuple

from trl_ds.plan.precision_bytes import even_offload_split, optimizer_bytes

PLACE = {"none": "device", "cpu": "host", "nvme": "nvme"}  # an offload device -> the place its bytes are reported in
RATIOS = (0.25, 0.5, 0.75)  # the partial offloads auto-fit tries
SUB_GROUPS_PER_RANK = 10  # auto-fit's sub-group size: about ten per rank, so a ratio splits them closely


def partial_ratio(s) -> float:
    """The offload.ratio DeepSpeed applies to this setup: 1 unless ZeRO-3 offloads the optimizer to the CPU."""
    if s.stage == 3 and s.optimizer_offload == "cpu" and s.offload_ratio < 1.0:
        return s.offload_ratio
    return 1.0


def split_elements(s) -> Tuple[float, float]:
    """(elements on the device, offloaded) of one rank's trainable partition (even_offload_split)."""
    per_rank = s.trainable / s.world
    if s.optimizer_offload == "none":
        return per_rank, 0.0
    ratio = partial_ratio(s)
    if ratio >= 1.0:
        return 0.0, per_rank
    return even_offload_split(s.trainable // s.world, s.sub_group_size, ratio)


def offloaded_fraction(s) -> float:
    """The share of the optimizer step DeepSpeedCPUAdam (or the NVMe swapper) does."""
    on_device, off = split_elements(s)
    return off / (on_device + off) if on_device + off else 0.0


def optimizer_places(s) -> Dict[str, Dict[str, int]]:
    """{"states": {place: bytes}, "master_grads": {place: bytes}} per rank, stages 1-3. Offloaded gradients stay in
    host RAM even under NVMe offload (the swapper writes them per sub-group, as the estimate always counted)."""
    on_device, off = split_elements(s)
    device = optimizer_bytes(s.bf16_master, s.bf16_states, offloaded=False)
    places = {"states": {"device": int(device.states * on_device)},
              "master_grads": {"device": int(device.master_grads * on_device)}}
    if s.optimizer_offload != "none":
        host = optimizer_bytes(s.bf16_master, s.bf16_states, offloaded=True)
        places["states"][PLACE[s.optimizer_offload]] = int(host.states * off)
        places["master_grads"]["host"] = int(host.master_grads * off)
    return places


def off_device(places: Dict[str, Dict[str, int]]) -> int:
    """Per rank, the optimizer-side bytes DeepSpeed keeps off the device."""
    return sum(b for kind in places.values() for place, b in kind.items() if place != "device")


def label(s, name: str) -> str:
    """The grid's offload name, with the ratio when a partial offload applies (opt-cpu@0.5)."""
    ratio = partial_ratio(s)
    return f"{name}@{ratio:g}" if ratio < 1.0 else name


def ratio_overrides(s) -> list:
    """The overrides that give a setup its partial offload: the ratio and the sub-group size it was planned with.
    Elsewhere none: a run command drops a typed ratio there (the check refuses one below ZeRO-3 or without CPU
    offload, and it changes nothing)."""
    if partial_ratio(s) < 1.0:
        return [f"offload.ratio={s.offload_ratio:g}", f"zero.sub_group_size={s.sub_group_size}"]
    return []


def auto_sub_group_size(s) -> int:
    """ceil(Ψ_t / n / 10): about ten sub-groups per rank, so the check's split tolerance holds."""
    return max(1, -(-(s.trainable // s.world) // SUB_GROUPS_PER_RANK))


def bf16_allows(s) -> bool:
    """Whether DeepSpeed accepts this grid point's bf16 options (check/deepspeed_features.py check_bf16_options):
    not at stage 0, and fp32 moments beside bf16 master weights only in DeepSpeedCPUAdam (an optimizer offload)."""
    if not (s.bf16_master or s.bf16_states):
        return True
    return s.stage > 0 and not (s.bf16_master and not s.bf16_states and s.optimizer_offload == "none")
