"""trl_ds/plan/precision_bytes.py against DeepSpeed itself: its CPU Adam's and torch's optimizer state dtypes, its
own memory estimator's bytes per parameter, and its ZeRO-3 sub-grouping function."""
import types

import pytest

from trl_ds.plan.precision_bytes import (
    even_offload_split,
    offload_split,
    optimizer_bytes,
    sub_group_sizes,
)


def state_bytes_per_param(optimizer, param) -> int:
    states = [v for v in optimizer.state[param].values() if hasattr(v, "element_size") and v.numel() == param.numel()]
    return sum(v.numel() * v.element_size() for v in states) // param.numel()


def stepped(make, dtype):
    import torch

    param = torch.nn.Parameter(torch.zeros(64, dtype=dtype))
    param.grad = torch.ones_like(param)
    optimizer = make([param])
    optimizer.step()
    return optimizer, param


# DeepSpeed's CPU Adam (its JIT-built cpu_adam op): tests/integration/test_precision_bytes_cpu_adam.py


@pytest.mark.parametrize("bf16_master", [False, True])
def test_device_moments_follow_the_master_weights(bf16_master):
    """On the device the optimizer steps the master weights and allocates its moments like them."""
    import torch

    master = torch.bfloat16 if bf16_master else torch.float32
    optimizer, param = stepped(lambda ps: torch.optim.AdamW(ps), master)
    expected = state_bytes_per_param(optimizer, param)
    assert optimizer_bytes(bf16_master, bf16_master, offloaded=False).moments == expected
    assert optimizer_bytes(bf16_master, bf16_master).master == param.element_size()


def test_default_bytes_are_deepspeeds_estimator_terms():
    """DeepSpeed's own ZeRO-2 estimator: 16 B per parameter offloaded (its cpu_mem), and on the device 18 B over
    the data-parallel ranks, of which 2 B are the 16-bit gradients (its comment): 16 B for the optimizer side."""
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    params, gpus = 1_000_000, 4
    cpu, _ = estimate_zero2_model_states_mem_needs(params, gpus, 1, cpu_offload=True, additional_buffer_factor=1)
    _, gpu = estimate_zero2_model_states_mem_needs(params, gpus, 1, cpu_offload=False)
    assert optimizer_bytes(offloaded=True).total * params == cpu
    assert optimizer_bytes().total * params // gpus == gpu - 2 * params - 2 * params // gpus
    assert (optimizer_bytes().states, optimizer_bytes().master_grads) == (12, 4)


def test_bf16_options_halve_what_they_name():
    assert optimizer_bytes(True, False, offloaded=True) == optimizer_bytes(False, False, True).__class__(2, 8, 2)
    assert optimizer_bytes(True, True, offloaded=True).total == 8  # 2 master + 4 moments + 2 gradients
    assert optimizer_bytes(True, True, offloaded=False).total == 8


@pytest.mark.parametrize("sizes,sub_group_size", [
    ([[30, 30, 30, 30, 30]], 50),  # closes at 60, 60, then the group's last parameter: 30
    ([[10, 10], [100, 5, 40]], 100),  # a small group is one sub-group; the other closes at 100, then 45
    ([[7] * 9], 1000),  # sub_group_size above the group: one sub-group
])
def test_sub_groups_are_deepspeeds(sizes, sub_group_size):
    """DeepSpeed's own _create_fp16_sub_groups over parameters of those partition sizes."""
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3

    owner = types.SimpleNamespace(sub_group_size=sub_group_size)
    expected = []
    for group in sizes:
        params = [types.SimpleNamespace(partition_numel=lambda n=n: n) for n in group]
        expected += [sum(p.partition_numel() for p in sub) for sub in
                     DeepSpeedZeroOptimizer_Stage3._create_fp16_sub_groups(owner, params)]
    assert sub_group_sizes(sizes, sub_group_size) == expected


def test_offload_split_moves_whole_sub_groups():
    # stage3.py: sub-group i goes to the CPU when i >= int((1 - ratio) * n); n = 5, ratio 0.5: int(2.5) = 2 stay
    assert offload_split([10, 20, 30, 40, 50], 0.5) == (30, 120)
    assert offload_split([10, 20, 30, 40, 50], 1.0) == (0, 150)
    assert offload_split([10, 20, 30, 40, 50], 0.0) == (150, 0)
    assert offload_split([100], 0.3) == (0, 100)  # one sub-group: int(0.7) = 0, all of it offloaded
    assert even_offload_split(1000, 100, 0.25) == (700, 300)  # ten sub-groups, int(7.5) = 7 stay
    assert even_offload_split(1000, 10_000, 0.25) == (0, 1000)
